package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

func dlqCommands() []command {
	return []command{
		{name: "dlq list", summary: "List the dead-letter queue: jobs that failed for good, newest first.", example: "heroctl dlq list", define: (*cli).dlqList},
		{name: "dlq show", args: "ID", summary: "Show a dead-lettered job with its last error and attempts.", example: "heroctl dlq show 7 --caller 1", define: (*cli).dlqShow},
		{name: "dlq requeue", args: "ID", summary: "Run a dead-lettered job again with a fresh attempt count.", example: "heroctl dlq requeue 7", define: (*cli).dlqRequeue},
		{name: "dlq purge", args: "[ID]", summary: "Drop one entry, or (no ID) every entry, of the dead-letter queue.", example: "heroctl dlq purge 7 --caller 1", define: (*cli).dlqPurge},
	}
}

// dlqEntry is a dead-letter queue entry as the JSON-RPC API gives it.
type dlqEntry = model.DLQEntry

func entryOf(e *herov1.DLQEntry) dlqEntry {
	return dlqEntry{CallerID: e.CallerId, ID: e.Id, FlowID: e.FlowId, Error: e.Error, Attempt: e.Attempt, DLQAtMs: e.DlqAtMs,
		ScriptType: e.ScriptType, FunctionName: e.FunctionName}
}

func (c *cli) dlqList(fs *flag.FlagSet) action {
	page := addPageFlags(fs, false)
	return c.noArgs("dlq list", perCall, func(ctx context.Context, hc *hero.Client) error {
		r, err := hc.API().ListDLQ(ctx, &herov1.ListDLQRequest{ContextId: c.g.context, Limit: page.limit(), Cursor: *page.cursor})
		if err != nil {
			return err
		}
		out := &hero.Page[dlqEntry]{Items: []dlqEntry{}, NextCursor: r.NextCursor}
		for _, e := range r.Entries {
			out.Items = append(out.Items, entryOf(e))
		}
		return c.show(out, func(w *tabwriter.Writer) { printDLQ(w, out) })
	})
}

func printDLQ(w *tabwriter.Writer, page *hero.Page[dlqEntry]) {
	fmt.Fprintln(w, "CALLER\tID\tFLOW\tTYPE\tATTEMPTS\tWHEN\tERROR")
	for _, e := range page.Items {
		what := e.ScriptType
		if e.FunctionName != "" {
			what = e.FunctionName
		}
		fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%d\t%s\t%s\n", e.CallerID, e.ID, e.FlowID, what, e.Attempt,
			time.UnixMilli(e.DLQAtMs).UTC().Format(time.RFC3339), firstLine(e.Error))
	}
	moreLine(w, page.NextCursor)
}

func (c *cli) dlqShow(fs *flag.FlagSet) action {
	return c.byJob(addJobRef(fs, "dlq show"), perCall, func(ctx context.Context, hc *hero.Client, caller, id uint32) error {
		r, err := hc.API().ShowDLQ(ctx, &herov1.ShowDLQRequest{ContextId: c.g.context, CallerId: caller, Id: id})
		if err != nil {
			return err
		}
		j := hero.JobOf(r.Job)
		out := struct {
			Entry dlqEntry   `json:"entry"`
			Job   *model.Job `json:"job"`
		}{entryOf(r.Entry), j}
		return c.show(out, func(w *tabwriter.Writer) { printJob(w, j) })
	})
}

func (c *cli) dlqRequeue(fs *flag.FlagSet) action {
	return c.byJob(addJobRef(fs, "dlq requeue"), perCall, func(ctx context.Context, hc *hero.Client, caller, id uint32) error {
		r, err := hc.API().RequeueDLQ(ctx, &herov1.RequeueDLQRequest{ContextId: c.g.context, CallerId: caller, Id: id})
		if err != nil {
			return err
		}
		j := hero.JobOf(r.Job)
		return c.done(fmt.Sprintf("job %d:%d requeued (status %s)", j.CallerID, j.ID, j.Status), j)
	})
}

func (c *cli) dlqPurge(fs *flag.FlagSet) action {
	caller := fs.Uint("caller", 0, "the entry's caller (default: HERO_ACTOR)")
	return func(ctx context.Context, pos []string) error {
		req := &herov1.PurgeDLQRequest{ContextId: c.g.context}
		if len(pos) > 1 {
			return wrongArgs("dlq purge")
		}
		if len(pos) == 1 {
			ref := &jobRef{name: "dlq purge", caller: caller}
			var err error
			if req.CallerId, req.Id, err = ref.parse(c, pos); err != nil {
				return err
			}
		}
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error {
			r, err := hc.API().PurgeDLQ(ctx, req)
			if err != nil {
				return err
			}
			return c.done(fmt.Sprintf("%d entr%s purged", r.Purged, map[bool]string{true: "y", false: "ies"}[r.Purged == 1]), map[string]int64{"purged": r.Purged})
		})
	}
}
