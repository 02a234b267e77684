package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hero-coordinator/hero/lib/dispatcher"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

// The Hero Dispatcher protocol's jobs (hero:job:<id>), through supervisor-daemon;
// they need the operator secret.
func dispatcherCommands() []command {
	return []command{
		{name: "dispatcher list", summary: "List the Dispatcher's job ids (--all: every page).", example: "heroctl dispatcher list --all", operator: true, define: (*cli).dispatcherList},
		{name: "dispatcher status", args: "ID", summary: "Show a Dispatcher job.", example: "heroctl dispatcher status j1", operator: true, define: (*cli).dispatcherStatus},
		{name: "dispatcher logs", args: "ID", summary: "Print a Dispatcher job's log.", example: "heroctl dispatcher logs j1", operator: true, define: (*cli).dispatcherLogs},
		{name: "dispatcher stop", args: "ID", summary: "Ask a Dispatcher job's worker to stop it.", example: "heroctl dispatcher stop j1", operator: true, define: (*cli).dispatcherStop},
		{name: "dispatcher run", summary: "Run a script on a Dispatcher worker and print its output.",
			example: "heroctl dispatcher run --worker local --script 'echo hi' --timeout 30", operator: true, define: (*cli).dispatcherRun},
	}
}

// byDispatcherID is the action of a dispatcher command on one job: its id, the
// Hero Dispatcher API on the client's connection, a per-call timeout.
func (c *cli) byDispatcherID(name string, fn func(ctx context.Context, api herov1.DispatcherClient, id string) error) action {
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
			return wrongArgs(name)
		}
		return c.withClient(ctx, perCall, func(ctx context.Context, hc *hero.Client) error { return fn(ctx, hc.Dispatcher(), pos[0]) })
	}
}

func (c *cli) dispatcherList(fs *flag.FlagSet) action {
	limit := fs.Uint("limit", 100, "ids a page")
	cursor := fs.String("cursor", "", "the page after this cursor")
	all := fs.Bool("all", false, "every page")
	return c.noArgs("dispatcher list", waits, func(ctx context.Context, hc *hero.Client) error {
		out := &herov1.DispatcherListJobsResponse{}
		next := *cursor
		for {
			cctx, cancel := context.WithTimeout(ctx, c.g.timeout)
			r, err := hc.Dispatcher().ListJobs(cctx, &herov1.DispatcherListJobsRequest{Cursor: next, Limit: uint32(*limit)})
			cancel()
			if err != nil {
				return err
			}
			out.Ids = append(out.Ids, r.Ids...)
			out.NextCursor, next = r.NextCursor, r.NextCursor
			if !*all || next == "" {
				break
			}
		}
		return c.show(out, func(w *tabwriter.Writer) {
			for _, id := range out.Ids {
				fmt.Fprintln(w, id)
			}
			if out.NextCursor != "" {
				fmt.Fprintf(w, "(more: --cursor %s, or --all)\n", out.NextCursor)
			}
		})
	})
}

func (c *cli) dispatcherStatus(fs *flag.FlagSet) action {
	return c.byDispatcherID("dispatcher status", func(ctx context.Context, api herov1.DispatcherClient, id string) error {
		r, err := api.JobStatus(ctx, &herov1.DispatcherJobStatusRequest{Id: id})
		if err != nil {
			return err
		}
		return c.show(r.Job, func(w *tabwriter.Writer) { printDispatcherJob(w, r.Job) })
	})
}

func (c *cli) dispatcherLogs(fs *flag.FlagSet) action {
	return c.byDispatcherID("dispatcher logs", func(ctx context.Context, api herov1.DispatcherClient, id string) error {
		r, err := api.JobLogs(ctx, &herov1.DispatcherJobLogsRequest{Id: id})
		if err != nil {
			return err
		}
		if c.g.output == "json" {
			return c.printJSON(r)
		}
		fmt.Fprint(c.out, r.Logs)
		if r.FileError != "" {
			fmt.Fprintf(c.errw, "heroctl: log_path not read (%s); showing the %s copy\n", r.FileError, r.Source)
		}
		return nil
	})
}

func (c *cli) dispatcherStop(fs *flag.FlagSet) action {
	return c.byDispatcherID("dispatcher stop", func(ctx context.Context, api herov1.DispatcherClient, id string) error {
		r, err := api.StopJob(ctx, &herov1.DispatcherStopJobRequest{Id: id})
		if err != nil {
			return err
		}
		return c.done(fmt.Sprintf("stop request for job %s sent to worker %s (status %s)", r.Id, r.WorkerId, dash(r.Status)), r)
	})
}

// dispatcherRunFlags describe a Dispatcher job.
type dispatcherRunFlags struct {
	worker, script, file, logPath, depends, caller, contextID *string
	timeout, retries, wait                                    *uint
	concurrent                                                *bool
	env                                                       multiFlag
}

func (f *dispatcherRunFlags) job() (*herov1.DispatcherJob, error) {
	if *f.worker == "" {
		return nil, usageErr("dispatcher run: --worker names the worker id (its queue is hero:work_queue:<worker>)")
	}
	if (*f.script == "") == (*f.file == "") {
		return nil, usageErr("dispatcher run: give --script or --file")
	}
	src := *f.script
	if *f.file != "" {
		b, err := os.ReadFile(*f.file)
		if err != nil {
			return nil, err
		}
		src = string(b)
	}
	envVars, err := parseEnv(f.env)
	if err != nil {
		return nil, err
	}
	var deps []string
	for _, d := range strings.Split(*f.depends, ",") {
		if d = strings.TrimSpace(d); d != "" {
			deps = append(deps, d)
		}
	}
	return &herov1.DispatcherJob{Script: src, Timeout: uint32(*f.timeout), Retries: uint32(*f.retries), Concurrent: *f.concurrent,
		LogPath: *f.logPath, EnvVars: envVars, Dependencies: deps, CallerId: *f.caller, ContextId: *f.contextID}, nil
}

// bound is how long the call may take: the wait, else the job's timeout, plus a margin.
func (f *dispatcherRunFlags) bound() time.Duration {
	d := time.Duration(*f.timeout)*time.Second + time.Minute
	if *f.timeout == 0 {
		d = 6 * time.Minute
	}
	if *f.wait > 0 {
		d = time.Duration(*f.wait)*time.Second + 5*time.Second
	}
	return d + 30*time.Second
}

func (c *cli) dispatcherRun(fs *flag.FlagSet) action {
	f := &dispatcherRunFlags{
		worker:     fs.String("worker", "", "the worker id (its queue is hero:work_queue:<worker>)"),
		script:     fs.String("script", "", "the script"),
		file:       fs.String("file", "", "read the script from this file"),
		timeout:    fs.Uint("timeout", 0, "seconds the job may run (0: the worker's default)"),
		retries:    fs.Uint("retries", 0, "attempts after a failure"),
		logPath:    fs.String("log-path", "", "where the worker writes the log"),
		depends:    fs.String("depends", "", "ids of jobs it waits for (comma-separated)"),
		concurrent: fs.Bool("concurrent", false, "it may run beside other jobs"),
		caller:     fs.String("caller", "", "the caller id recorded on the job"),
		contextID:  fs.String("context-id", "", "the context id recorded on the job"),
		wait:       fs.Uint("wait", 0, "seconds to wait for the end (0: its timeout)"),
	}
	fs.Var(&f.env, "env", "an environment variable `KEY=VALUE` (repeatable)")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 {
			return wrongArgs("dispatcher run")
		}
		job, err := f.job()
		if err != nil {
			return err
		}
		hc, err := c.client()
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, f.bound())
		defer cancel()
		r, err := hc.Dispatcher().RunJob(cctx, &herov1.DispatcherRunJobRequest{Job: job, WorkerId: *f.worker, Timeout: uint32(*f.wait)})
		if err != nil {
			return err
		}
		if c.g.output == "json" {
			return c.printJSON(r)
		}
		fmt.Fprint(c.out, r.Job.Output)
		if r.Job.Status != string(dispatcher.StatusFinished) {
			return &exitError{code: 1, msg: fmt.Sprintf("dispatcher job %s %s: %s", r.Job.Id, r.Job.Status, r.Job.Error)}
		}
		return nil
	}
}

func printDispatcherJob(w *tabwriter.Writer, j *herov1.DispatcherJob) {
	fmt.Fprintf(w, "job\t%s\nworker\t%s\nstatus\t%s\n", j.Id, dash(j.WorkerId), dash(j.Status))
	fmt.Fprintf(w, "caller\t%s\ncontext\t%s\n", dash(j.CallerId), dash(j.ContextId))
	fmt.Fprintf(w, "timeout\t%ds\nretries\t%d\nconcurrent\t%t\nlog path\t%s\n", j.Timeout, j.Retries, j.Concurrent, dash(j.LogPath))
	fmt.Fprintf(w, "dependencies\t%s\nprerequisites\t%s\ndependents\t%s\n", dash(strings.Join(j.Dependencies, ",")), dash(strings.Join(j.Prerequisites, ",")), dash(strings.Join(j.Dependents, ",")))
	fmt.Fprintf(w, "created\t%s\nupdated\t%s\n", dash(j.CreatedAt), dash(j.UpdatedAt))
	if j.Error != "" {
		fmt.Fprintf(w, "error\t%s\n", j.Error)
	}
	kvLines(w, "env", j.EnvVars)
	if j.Output != "" {
		kvLines(w, "result", map[string]string{"output": j.Output})
	}
}
