package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// dispatcherClient is the Hero Dispatcher API on the same connection as the
// coordinator's.
func (c *cli) dispatcherClient() (herov1.DispatcherClient, error) {
	if _, err := c.client(); err != nil {
		return nil, err
	}
	return herov1.NewDispatcherClient(c.cc), nil
}

// dispatcherCmd runs `heroctl dispatcher list|status|logs|stop|run`: the Hero
// Dispatcher protocol's jobs (hero:job:<id>), through supervisor-daemon.
func (c *cli) dispatcherCmd(ctx context.Context, verb string, args []string) error {
	api, err := c.dispatcherClient()
	if err != nil {
		return err
	}
	switch verb {
	case "list":
		fs := subFlags("dispatcher list")
		limit := fs.Uint("limit", 100, "")
		cursor := fs.String("cursor", "", "")
		all := fs.Bool("all", false, "")
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		out := &herov1.DispatcherListJobsResponse{}
		next := *cursor
		for {
			cctx, cancel := c.callCtx(ctx)
			r, err := api.ListJobs(cctx, &herov1.DispatcherListJobsRequest{Cursor: next, Limit: uint32(*limit)})
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
	case "status", "logs", "stop":
		pos, err := parseSub(subFlags("dispatcher "+verb), args)
		if err != nil || len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
			return usageErr("dispatcher %s ID", verb)
		}
		id := pos[0]
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		switch verb {
		case "status":
			r, err := api.JobStatus(cctx, &herov1.DispatcherJobStatusRequest{Id: id})
			if err != nil {
				return err
			}
			return c.show(r.Job, func(w *tabwriter.Writer) { printDispatcherJob(w, r.Job) })
		case "logs":
			r, err := api.JobLogs(cctx, &herov1.DispatcherJobLogsRequest{Id: id})
			if err != nil {
				return err
			}
			if c.g.output == "json" {
				return c.show(r, nil)
			}
			fmt.Fprint(c.out, r.Logs)
			if r.FileError != "" {
				fmt.Fprintf(c.errw, "heroctl: log_path not read (%s); showing the %s copy\n", r.FileError, r.Source)
			}
			return nil
		default:
			r, err := api.StopJob(cctx, &herov1.DispatcherStopJobRequest{Id: id})
			if err != nil {
				return err
			}
			if c.g.output == "json" {
				return c.show(r, nil)
			}
			fmt.Fprintf(c.out, "stop request for job %s sent to worker %s (status %s)\n", r.Id, r.WorkerId, dash(r.Status))
			return nil
		}
	case "run":
		fs := subFlags("dispatcher run")
		worker := fs.String("worker", "", "")
		script := fs.String("script", "", "")
		file := fs.String("file", "", "")
		var env multiFlag
		fs.Var(&env, "env", "")
		timeout := fs.Uint("timeout", 0, "")
		retries := fs.Uint("retries", 0, "")
		logPath := fs.String("log-path", "", "")
		depends := fs.String("depends", "", "")
		concurrent := fs.Bool("concurrent", false, "")
		caller := fs.String("caller", "", "")
		contextID := fs.String("context-id", "", "")
		wait := fs.Uint("wait", 0, "")
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		if *worker == "" {
			return usageErr("dispatcher run: --worker names the worker id (its queue is hero:work_queue:<worker>)")
		}
		if (*script == "") == (*file == "") {
			return usageErr("dispatcher run: give --script or --file")
		}
		src := *script
		if *file != "" {
			b, err := os.ReadFile(*file)
			if err != nil {
				return err
			}
			src = string(b)
		}
		envVars, err := parseEnv(env)
		if err != nil {
			return err
		}
		var deps []string
		for _, d := range strings.Split(*depends, ",") {
			if d = strings.TrimSpace(d); d != "" {
				deps = append(deps, d)
			}
		}
		job := &herov1.DispatcherJob{Script: src, Timeout: uint32(*timeout), Retries: uint32(*retries), Concurrent: *concurrent,
			LogPath: *logPath, EnvVars: envVars, Dependencies: deps, CallerId: *caller, ContextId: *contextID}
		waitFor := time.Duration(*timeout)*time.Second + time.Minute
		if *timeout == 0 {
			waitFor = 6 * time.Minute
		}
		if *wait > 0 {
			waitFor = time.Duration(*wait)*time.Second + 5*time.Second
		}
		cctx, cancel := context.WithTimeout(ctx, waitFor+30*time.Second)
		defer cancel()
		r, err := api.RunJob(cctx, &herov1.DispatcherRunJobRequest{Job: job, WorkerId: *worker, Timeout: uint32(*wait)})
		if err != nil {
			return err
		}
		if c.g.output == "json" {
			return c.show(r, nil)
		}
		fmt.Fprint(c.out, r.Job.Output)
		if r.Job.Status != "finished" {
			return &exitError{code: 1, msg: fmt.Sprintf("dispatcher job %s %s: %s", r.Job.Id, r.Job.Status, r.Job.Error)}
		}
		return nil
	}
	return usageErr("dispatcher list|status|logs|stop|run")
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
