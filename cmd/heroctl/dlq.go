package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// dlqCmd: heroctl dlq list|show|requeue|purge.
func (c *cli) dlqCmd(ctx context.Context, verb string, args []string) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	fs := subFlags("dlq " + verb)
	caller := fs.Uint("caller", 0, "")
	limit := fs.Uint("limit", 100, "")
	cursor := fs.String("cursor", "", "")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	callerID := uint32(*caller)
	if callerID == 0 {
		callerID = c.g.actor
	}
	var id uint32
	if len(pos) == 1 {
		if id, err = parseID("job id", pos[0]); err != nil {
			return err
		}
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	switch verb {
	case "list":
		r, err := api.ListDLQ(cctx, &herov1.ListDLQRequest{ContextId: c.g.context, Limit: uint32(*limit), Cursor: *cursor})
		if err != nil {
			return err
		}
		return c.show(r, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "CALLER\tID\tFLOW\tTYPE\tATTEMPTS\tWHEN\tERROR")
			for _, e := range r.Entries {
				what := e.ScriptType
				if e.FunctionName != "" {
					what = e.FunctionName
				}
				fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%d\t%s\t%s\n", e.CallerId, e.Id, e.FlowId, what, e.Attempt,
					time.UnixMilli(e.DlqAtMs).UTC().Format(time.RFC3339), firstLine(e.Error))
			}
			if r.NextCursor != "" {
				fmt.Fprintf(w, "(more: --cursor %s)\n", r.NextCursor)
			}
		})
	case "show", "requeue":
		if id == 0 || callerID == 0 {
			return usageErr("dlq %s ID [--caller N] (or HERO_ACTOR for the caller)", verb)
		}
		if verb == "show" {
			r, err := api.ShowDLQ(cctx, &herov1.ShowDLQRequest{ContextId: c.g.context, CallerId: callerID, Id: id})
			if err != nil {
				return err
			}
			return c.show(r, func(w *tabwriter.Writer) { printJob(w, r.Job) })
		}
		r, err := api.RequeueDLQ(cctx, &herov1.RequeueDLQRequest{ContextId: c.g.context, CallerId: callerID, Id: id})
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "job %d:%d requeued (status %s)\n", r.Job.CallerId, r.Job.Id, r.Job.Status)
		return nil
	case "purge":
		req := &herov1.PurgeDLQRequest{ContextId: c.g.context}
		if id != 0 {
			if callerID == 0 {
				return usageErr("dlq purge ID needs --caller (or HERO_ACTOR)")
			}
			req.CallerId, req.Id = callerID, id
		}
		r, err := api.PurgeDLQ(cctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "%d entr%s purged\n", r.Purged, map[bool]string{true: "y", false: "ies"}[r.Purged == 1])
		return nil
	}
	return usageErr("dlq list|show|requeue|purge")
}
