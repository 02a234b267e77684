package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

// Run and rate limits of a context (limit.set|list|delete, docs/scheduling.md).
func limitCommands() []command {
	return []command{
		{name: "limit set", args: "SCOPE", summary: "Set a run or rate limit: SCOPE is context, type:<script type>, executor:<name> or key:<concurrency key>; --max running at once, --rate N/s or N/m (--burst). Holds from the next claim.",
			example: "heroctl limit set type:python --max 4\nheroctl limit set context --rate 50/s\nheroctl limit set key:customer-42 --max 2", define: (*cli).limitSet},
		{name: "limit list", summary: "List the context's limits with the runs each counts now.", example: "heroctl limit list", define: (*cli).limitList},
		{name: "limit delete", args: "SCOPE", summary: "Remove a limit.", example: "heroctl limit delete type:python", define: (*cli).limitDelete},
	}
}

// parseRate reads --rate: N/s, N/m, N/h or N/<duration> ("50/s", "600/m", "5/100ms").
func parseRate(s string) (rate uint32, per string, err error) {
	n, unit, ok := strings.Cut(s, "/")
	var v uint64
	if _, e := fmt.Sscan(n, &v); !ok || e != nil || v == 0 || v > model.MaxRunLimitRate {
		return 0, "", usageErr("--rate %q: give N/s, N/m, N/h or N/<duration> (N from 1 to %d)", s, model.MaxRunLimitRate)
	}
	switch unit {
	case "s":
		per = "1s"
	case "m", "min":
		per = "1m"
	case "h":
		per = "1h"
	default:
		per = unit
	}
	return uint32(v), per, nil
}

func (c *cli) limitSet(fs *flag.FlagSet) action {
	maxRunning := fs.Uint("max", 0, "the most jobs of the scope running at once (0: no such limit)")
	rate := fs.String("rate", "", "the most jobs of the scope started per period: N/s, N/m, N/h or N/<duration>")
	burst := fs.Uint("burst", 0, "the most starts at once after a quiet time (0: a tenth of a second's worth, at least 1)")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return wrongArgs("limit set")
		}
		p := map[string]any{"context_id": c.g.context, "scope": pos[0], "max_running": *maxRunning, "burst": *burst}
		if *rate != "" {
			r, per, err := parseRate(*rate)
			if err != nil {
				return err
			}
			p["rate"], p["per"] = r, per
		}
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error {
			raw, err := hc.Call(ctx, "limit.set", p)
			if err != nil {
				return err
			}
			var l model.RunLimit
			if err := json.Unmarshal(raw, &l); err != nil {
				return err
			}
			return c.show(&l, func(w *tabwriter.Writer) { printRunLimits(w, []model.RunLimit{l}) })
		})
	}
}

func (c *cli) limitList(fs *flag.FlagSet) action {
	return contextList(c, "limit list", "limit.list", printRunLimits)
}

func (c *cli) limitDelete(fs *flag.FlagSet) action {
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return wrongArgs("limit delete")
		}
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error {
			raw, err := hc.Call(ctx, "limit.delete", map[string]any{"context_id": c.g.context, "scope": pos[0]})
			if err != nil {
				return err
			}
			var v any
			_ = json.Unmarshal(raw, &v)
			return c.printJSON(v)
		})
	}
}

func printRunLimits(w *tabwriter.Writer, items []model.RunLimit) {
	fmt.Fprintln(w, "SCOPE\tMAX RUNNING\tRATE\tBURST\tRUNNING")
	for _, l := range items {
		mx, rate, burst := "-", "-", "-"
		if l.MaxRunning > 0 {
			mx = fmt.Sprint(l.MaxRunning)
		}
		if l.Rate > 0 {
			rate, burst = fmt.Sprintf("%d per %s", l.Rate, l.Per), fmt.Sprint(l.Burst)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", l.Scope, mx, rate, burst, l.Running)
	}
}
