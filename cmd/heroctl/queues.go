package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

func queueCommands() []command {
	return []command{
		{name: "queue list", summary: "List the context's job queues with their depth, runners and pause.", example: "heroctl queue list", define: (*cli).queueList},
		{name: "queue pause", args: "TYPE|--executor NAME", summary: "Pause a job queue (a script type's, or an executor's with --executor; --note says why): none of its jobs starts until it is resumed; running jobs go on.",
			example: "heroctl queue pause python --note 'db migration'\nheroctl queue pause --executor mailer", define: queueRef("queue.pause")},
		{name: "queue resume", args: "TYPE|--executor NAME", summary: "Resume a paused job queue: its jobs start again.", example: "heroctl queue resume python", define: queueRef("queue.resume")},
	}
}

// queueRef is queue pause or queue resume: the queue is a script type (the argument)
// or an executor (--executor).
func queueRef(method string) func(*cli, *flag.FlagSet) action {
	return func(c *cli, fs *flag.FlagSet) action {
		executor := fs.String("executor", "", "the executor `NAME` whose handler jobs' queue it is")
		note := fs.String("note", "", "why (shown with the queue)")
		return func(ctx context.Context, pos []string) error {
			p := map[string]any{"context_id": c.g.context, "note": *note}
			switch {
			case len(pos) == 1 && *executor == "":
				p["script_type"] = pos[0]
			case len(pos) == 0 && *executor != "":
				p["executor"] = *executor
			default:
				return usageErr("%s: give the queue's script type, or --executor NAME", method)
			}
			return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error {
				raw, err := hc.Call(ctx, method, p)
				if err != nil {
					return err
				}
				var q model.Queue
				if err := json.Unmarshal(raw, &q); err != nil {
					return err
				}
				return c.show(&q, func(w *tabwriter.Writer) { printQueues(w, []model.Queue{q}) })
			})
		}
	}
}

func (c *cli) queueList(fs *flag.FlagSet) action {
	return contextList(c, "queue list", "queue.list", printQueues)
}

func printQueues(w *tabwriter.Writer, items []model.Queue) {
	fmt.Fprintln(w, "QUEUE\tDEPTH\tPINNED\tRUNNERS\tSTATE\tSINCE\tBY\tNOTE")
	for _, q := range items {
		state, since := "active", "-"
		if q.Paused {
			state = "paused"
			since = time.UnixMilli(q.PausedAtMs).UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", q.Queue, q.Depth, q.Pinned, q.Runners, state, since, q.PausedBy, firstLine(q.PauseNote))
	}
}

// contextList is a "<resource> list" command: method's {items} of the context, shown
// as JSON or by print as a table.
func contextList[T any](c *cli, name, method string, print func(*tabwriter.Writer, []T)) action {
	return c.noArgs(name, perCall, func(ctx context.Context, hc *hero.Client) error {
		raw, err := hc.Call(ctx, method, map[string]any{"context_id": c.g.context})
		if err != nil {
			return err
		}
		var page struct {
			Items []T `json:"items"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		return c.show(&page, func(w *tabwriter.Writer) { print(w, page.Items) })
	})
}
