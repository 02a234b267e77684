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

func scheduleCommands() []command {
	return []command{
		{name: "schedule create", args: "ID", summary: "Create a schedule of a job, or of a flow (--flow FILE, a flow file as flow submit takes: each run creates and starts a flow of it): --every or --cron (--tz, --jitter), --overlap, --catchup, --paused with --note.",
			example: "heroctl schedule create nightly --cron '0 2 * * *' --tz Europe/Brussels --type sh --script './report.sh'\nheroctl schedule create poll --every 30s --overlap skip --type python --script 'print(1)'\nheroctl schedule create etl --cron '0 3 * * *' --flow examples/diamond.yaml --set GREETING=hi", define: (*cli).scheduleCreate},
		{name: "schedule get", args: "ID", summary: "Show a schedule with its next tick and its counts.", example: "heroctl schedule get nightly", define: scheduleRef("schedule.load", false)},
		{name: "schedule list", summary: "List the context's schedules.", example: "heroctl schedule list", define: (*cli).scheduleList},
		{name: "schedule update", args: "ID", summary: "Change a schedule's spec, overlap or catch-up window, or its flow (--flow FILE).", example: "heroctl schedule update nightly --cron '0 3 * * *'\nheroctl schedule update etl --flow examples/diamond.yaml", define: (*cli).scheduleUpdate},
		{name: "schedule pause", args: "ID", summary: "Pause a schedule (--note says why): no tick fires until it is resumed.", example: "heroctl schedule pause nightly --note 'db migration'", define: scheduleRef("schedule.pause", true)},
		{name: "schedule resume", args: "ID", summary: "Resume a schedule from its next tick after now.", example: "heroctl schedule resume nightly", define: scheduleRef("schedule.resume", true)},
		{name: "schedule delete", args: "ID", summary: "Delete a schedule (its runs stay).", example: "heroctl schedule delete nightly", define: scheduleRef("schedule.delete", false)},
		{name: "schedule trigger", args: "ID", summary: "Make a run of a schedule now.", example: "heroctl schedule trigger nightly", define: scheduleRef("schedule.trigger", false)},
		{name: "schedule backfill", args: "ID FROM TO", summary: "Make the runs of a schedule's ticks from FROM to TO (RFC 3339; a tick whose run exists is not made again).",
			example: "heroctl schedule backfill nightly 2026-12-01T00:00:00Z 2026-12-06T00:00:00Z", define: (*cli).scheduleBackfill},
	}
}

// specFlags are a schedule's settings as flags.
type specFlags struct {
	every, cron, tz, jitter, overlap, catchup *string
}

func addSpecFlags(fs *flag.FlagSet) *specFlags {
	return &specFlags{
		every:   fs.String("every", "", "tick every `DURATION` (30s, 1h), at its multiples since the Unix epoch"),
		cron:    fs.String("cron", "", "tick on a cron `EXPRESSION` (5 fields, or 6 with seconds; @daily, …)"),
		tz:      fs.String("tz", "", "the cron expression's time zone (IANA: Europe/Brussels; default UTC)"),
		jitter:  fs.String("jitter", "", "delay each run by up to this `DURATION`"),
		overlap: fs.String("overlap", "", "while the last run goes on: skip (default), buffer_one, allow_all, cancel_previous"),
		catchup: fs.String("catchup", "", "the catch-up `WINDOW` for ticks missed while no scheduler ran (default 1m; 0: all)"),
	}
}

// params adds the flags given to p (update: only those given).
func (f *specFlags) params(p map[string]any) {
	if *f.every != "" || *f.cron != "" {
		p["spec"] = map[string]any{"every": *f.every, "cron": *f.cron, "timezone": *f.tz, "jitter": *f.jitter}
	}
	if *f.overlap != "" {
		p["overlap"] = *f.overlap
	}
	if *f.catchup != "" {
		p["catchup_window"] = *f.catchup
	}
}

// callSchedule calls a schedule method and shows the schedule it answers.
func (c *cli) callSchedule(ctx context.Context, hc *hero.Client, method string, p map[string]any) error {
	p["context_id"] = c.g.context
	raw, err := hc.Call(ctx, method, p)
	if err != nil {
		return err
	}
	var s model.Schedule
	if err := json.Unmarshal(raw, &s); err != nil || s.ID == "" {
		var v any
		_ = json.Unmarshal(raw, &v)
		return c.printJSON(v)
	}
	return c.show(&s, func(w *tabwriter.Writer) { printSchedules(w, []model.Schedule{s}) })
}

// jobParams is a job as schedule.create's job (job.submit's) takes it.
func jobParams(j *model.Job) map[string]any {
	job := map[string]any{"script": j.Script, "script_type": string(j.ScriptType), "timeout": j.Timeout, "retries": j.Retries,
		"env_vars": j.EnvVars, "runner_id": j.RunnerID, "function_name": j.FunctionName, "limits": j.Limits,
		"priority": j.Priority, "concurrency_key": j.ConcurrencyKey, "concurrency_limit": j.ConcurrencyLimit, "concurrency_policy": j.ConcurrencyPolicy}
	if len(j.Args) > 0 {
		job["args"] = j.Args
	}
	if len(j.Kwargs) > 0 {
		job["kwargs"] = j.Kwargs
	}
	return job
}

// flowFlags are --flow FILE and its --set KEY=VALUE: a flow's schedule's template.
type flowFlags struct {
	file *string
	set  multiFlag
}

func addFlowFlags(fs *flag.FlagSet) *flowFlags {
	f := &flowFlags{file: fs.String("flow", "", "a flow's schedule: each run creates and starts a flow of this flow `FILE` (YAML, as flow submit takes)")}
	fs.Var(&f.set, "set", "with --flow: a parameter `KEY=VALUE` into the flow's env (repeatable; over the file's env)")
	return f
}

// params adds the flow file's template to p as schedule.create's flow (nothing
// without --flow).
func (f *flowFlags) params(p map[string]any) error {
	if *f.file == "" {
		if len(f.set) > 0 {
			return usageErr("--set goes with --flow")
		}
		return nil
	}
	spec, err := loadFlowFile(*f.file)
	if err != nil {
		return err
	}
	params, err := parseKV("set", f.set)
	if err != nil {
		return err
	}
	env := map[string]string{}
	for k, v := range spec.Env {
		env[k] = v
	}
	for k, v := range params {
		env[k] = v
	}
	jobs := make([]map[string]any, len(spec.Jobs))
	for i := range spec.Jobs {
		jobs[i] = map[string]any{"name": spec.Jobs[i].Name, "depends": spec.Jobs[i].Depends, "job": jobParams(&spec.Jobs[i].Job)}
	}
	p["flow"] = map[string]any{"env_vars": env, "jobs": jobs}
	return nil
}

// scheduleFlagsOnly are the flags of schedule create that go with --flow (the job's
// flags do not: the flow file holds the jobs).
var scheduleFlagsOnly = map[string]bool{"flow": true, "set": true, "every": true, "cron": true, "tz": true, "jitter": true, "overlap": true, "catchup": true, "paused": true, "note": true}

func (c *cli) scheduleCreate(fs *flag.FlagSet) action {
	jf := addJobFlags(fs)
	sf := addSpecFlags(fs)
	ff := addFlowFlags(fs)
	paused := fs.Bool("paused", false, "create it paused")
	note := fs.String("note", "", "the pause's note")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return wrongArgs("schedule create")
		}
		p := map[string]any{"id": pos[0], "paused": *paused, "note": *note}
		if *ff.file != "" {
			var jobFlag string
			fs.Visit(func(f *flag.Flag) {
				if !scheduleFlagsOnly[f.Name] && jobFlag == "" {
					jobFlag = f.Name
				}
			})
			if jobFlag != "" {
				return usageErr("schedule create: --%s is a job's flag; with --flow the flow file holds the jobs", jobFlag)
			}
			if err := ff.params(p); err != nil {
				return err
			}
		} else {
			if len(ff.set) > 0 {
				return usageErr("--set goes with --flow")
			}
			j, err := jf.job()
			if err != nil {
				return err
			}
			p["job"] = jobParams(j)
		}
		sf.params(p)
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error { return c.callSchedule(ctx, hc, "schedule.create", p) })
	}
}

func (c *cli) scheduleUpdate(fs *flag.FlagSet) action {
	sf := addSpecFlags(fs)
	ff := addFlowFlags(fs)
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return wrongArgs("schedule update")
		}
		p := map[string]any{"id": pos[0]}
		sf.params(p)
		if err := ff.params(p); err != nil {
			return err
		}
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error { return c.callSchedule(ctx, hc, "schedule.update", p) })
	}
}

// scheduleRef is a command on one schedule by id (withNote: it takes --note).
func scheduleRef(method string, withNote bool) func(*cli, *flag.FlagSet) action {
	return func(c *cli, fs *flag.FlagSet) action {
		var note *string
		if withNote {
			note = fs.String("note", "", "why (shown with the schedule)")
		}
		return func(ctx context.Context, pos []string) error {
			if len(pos) != 1 {
				return usageErr("%s: give the schedule's id", method)
			}
			p := map[string]any{"id": pos[0]}
			if note != nil {
				p["note"] = *note
			}
			return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error { return c.callSchedule(ctx, hc, method, p) })
		}
	}
}

func (c *cli) scheduleList(fs *flag.FlagSet) action {
	return contextList(c, "schedule list", "schedule.list", printSchedules)
}

func (c *cli) scheduleBackfill(fs *flag.FlagSet) action {
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 3 {
			return wrongArgs("schedule backfill")
		}
		p := map[string]any{"id": pos[0], "from": pos[1], "to": pos[2]}
		return c.withClient(ctx, waits, func(ctx context.Context, hc *hero.Client) error {
			return c.callSchedule(ctx, hc, "schedule.backfill", p)
		})
	}
}

func printSchedules(w *tabwriter.Writer, items []model.Schedule) {
	fmt.Fprintln(w, "ID\tRUNS\tSPEC\tOVERLAP\tSTATE\tNEXT\tFIRED\tSKIPPED\tMISSED\tNOTE")
	for _, s := range items {
		spec := "every " + s.Spec.Every
		if s.Spec.Cron != "" {
			spec = "cron " + s.Spec.Cron
			if s.Spec.Timezone != "" {
				spec += " (" + s.Spec.Timezone + ")"
			}
		}
		state, next := "active", "-"
		if s.Paused {
			state = "paused"
		} else if s.NextTickMs != 0 {
			next = time.UnixMilli(s.NextTickMs).UTC().Format(time.RFC3339)
		}
		runs := "job"
		if s.Flow != nil {
			runs = fmt.Sprintf("flow of %d jobs", len(s.Flow.Jobs))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.ID, runs, spec, s.Overlap, state, next, s.Fired, s.Skipped, s.Missed, firstLine(s.Note))
	}
}
