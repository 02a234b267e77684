package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

func (c *cli) actorCmd(ctx context.Context, verb string, args []string) error {
	if verb == "update" {
		return c.actorUpdate(ctx, args)
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	switch verb {
	case "create":
		fs := subFlags("actor create")
		id := fs.Uint("id", 0, "")
		pubkey := fs.String("pubkey", "", "")
		noKey := fs.Bool("no-key", false, "")
		var addr multiFlag
		fs.Var(&addr, "address", "")
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		if *id > 1<<32-1 {
			return usageErr("actor create: --id %d is not a 32-bit id", *id)
		}
		// Without --pubkey the actor's key is the one in the config directory, made
		// now when there is none: the actor can sign at once (export HERO_ACTOR=N).
		keyFile, created := "", false
		if *pubkey == "" && !*noKey {
			if *id == 0 {
				return usageErr("actor create: give --id N to keep its key in the config directory, or --pubkey HEX (or --no-key)")
			}
			if *pubkey, keyFile, created, err = c.ensureActorKey(uint32(*id)); err != nil {
				return err
			}
		}
		r, err := api.CreateActor(cctx, &herov1.CreateActorRequest{Actor: &herov1.Actor{Id: uint32(*id), Pubkey: *pubkey, Address: addr}})
		if err != nil {
			if created {
				_ = os.Remove(keyFile)
			}
			return err
		}
		if keyFile != "" {
			fmt.Fprintf(c.errw, "key: %s\n", keyFile)
		}
		return c.show(r.Actor, func(w *tabwriter.Writer) { printActor(w, r.Actor) })
	case "get":
		pos, err := parseSub(subFlags("actor get"), args)
		if err != nil || len(pos) != 1 {
			return usageErr("actor get ID")
		}
		id, err := parseID("actor id", pos[0])
		if err != nil {
			return err
		}
		r, err := api.GetActor(cctx, &herov1.GetActorRequest{Id: id})
		if err != nil {
			return err
		}
		return c.show(r.Actor, func(w *tabwriter.Writer) { printActor(w, r.Actor) })
	}
	return usageErr("actor create|update|get")
}

func printActor(w *tabwriter.Writer, a *herov1.Actor) {
	fmt.Fprintf(w, "actor\t%d\npubkey\t%s\naddress\t%s\ncreated\t%s\n", a.Id, dash(a.Pubkey), dash(strings.Join(a.Address, ", ")), ts(a.CreatedAt))
}

func (c *cli) contextCmd(ctx context.Context, verb string, args []string) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	switch verb {
	case "create":
		fs := subFlags("context create")
		admins := fs.String("admins", "", "")
		readers := fs.String("readers", "", "")
		executors := fs.String("executors", "", "")
		retention := fs.Duration("retention", 0, "")
		sources := fs.String("allowed-sources", "", "")
		jobDefaults := fs.String("job-defaults", "", "")
		jobMax := fs.String("job-max", "", "")
		pos, err := parseSub(fs, args)
		if err != nil || len(pos) != 1 {
			return usageErr("context create ID --admins 1,2 [--readers …] [--executors …] [--job-defaults " + limitsUsage + "] [--job-max …]")
		}
		id, err := parseID("context id", pos[0])
		if err != nil {
			return err
		}
		x := &herov1.Context{Id: id, RetentionSeconds: int64(retention.Seconds())}
		if *sources != "" {
			x.AllowedSources = strings.Split(*sources, ",")
		}
		if x.Admins, err = parseIDList("--admins", *admins); err != nil {
			return err
		}
		if x.Readers, err = parseIDList("--readers", *readers); err != nil {
			return err
		}
		if x.Executors, err = parseIDList("--executors", *executors); err != nil {
			return err
		}
		if x.JobDefaults, err = parseLimits("--job-defaults", *jobDefaults); err != nil {
			return err
		}
		if x.JobMax, err = parseLimits("--job-max", *jobMax); err != nil {
			return err
		}
		r, err := api.CreateContext(cctx, &herov1.CreateContextRequest{Context: x})
		if err != nil {
			return err
		}
		return c.show(r.Context, func(w *tabwriter.Writer) { printContext(w, r.Context) })
	case "update":
		fs := subFlags("context update")
		admins := fs.String("admins", "", "")
		readers := fs.String("readers", "", "")
		executors := fs.String("executors", "", "")
		retention := fs.Duration("retention", 0, "")
		sources := fs.String("allowed-sources", "", "")
		jobDefaults := fs.String("job-defaults", "", "")
		jobMax := fs.String("job-max", "", "")
		pos, err := parseSub(fs, args)
		if err != nil || len(pos) > 1 {
			return usageErr("context update [ID] [--admins 1,2] [--readers …] [--executors …] [--retention 24h] [--allowed-sources KEY,…] [--job-defaults " + limitsUsage + "] [--job-max … (operators)] (a flag given empty clears it)")
		}
		req := &herov1.UpdateContextRequest{Id: c.g.context}
		if len(pos) == 1 {
			if req.Id, err = parseID("context id", pos[0]); err != nil {
				return err
			}
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if len(set) == 0 {
			return usageErr("context update: nothing to change; give --admins, --readers, --executors, --retention, --allowed-sources, --job-defaults or --job-max")
		}
		for _, l := range []struct {
			name string
			val  string
			into **herov1.IdList
		}{{"admins", *admins, &req.Admins}, {"readers", *readers, &req.Readers}, {"executors", *executors, &req.Executors}} {
			if !set[l.name] {
				continue
			}
			ids, err := parseIDList("--"+l.name, l.val)
			if err != nil {
				return err
			}
			*l.into = &herov1.IdList{Ids: ids}
		}
		if set["retention"] {
			secs := int64(retention.Seconds())
			req.RetentionSeconds = &secs
		}
		if set["allowed-sources"] {
			req.AllowedSources = &herov1.StringList{}
			if *sources != "" {
				req.AllowedSources.Values = strings.Split(*sources, ",")
			}
		}
		if set["job-defaults"] {
			if req.JobDefaults, err = parseLimits("--job-defaults", *jobDefaults); err != nil {
				return err
			}
		}
		if set["job-max"] {
			if req.JobMax, err = parseLimits("--job-max", *jobMax); err != nil {
				return err
			}
		}
		r, err := api.UpdateContext(cctx, req)
		if err != nil {
			return err
		}
		return c.show(r.Context, func(w *tabwriter.Writer) { printContext(w, r.Context) })
	case "get":
		pos, err := parseSub(subFlags("context get"), args)
		if err != nil {
			return err
		}
		id := c.g.context
		if len(pos) == 1 {
			if id, err = parseID("context id", pos[0]); err != nil {
				return err
			}
		}
		r, err := api.GetContext(cctx, &herov1.GetContextRequest{Id: id})
		if err != nil {
			return err
		}
		return c.show(r.Context, func(w *tabwriter.Writer) { printContext(w, r.Context) })
	case "delete":
		fs := subFlags("context delete")
		force := fs.Bool("force", false, "")
		pos, err := parseSub(fs, args)
		if err != nil || len(pos) != 1 {
			return usageErr("context delete ID [--force]")
		}
		id, err := parseID("context id", pos[0])
		if err != nil {
			return err
		}
		if _, err := api.DeleteContext(cctx, &herov1.DeleteContextRequest{Id: id, Force: *force}); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "context %d deleted\n", id)
		return nil
	}
	return usageErr("context create|get|delete")
}

func printContext(w *tabwriter.Writer, x *herov1.Context) {
	fmt.Fprintf(w, "context\t%d\nadmins\t%s\nreaders\t%s\nexecutors\t%s\ncreated\t%s\n", x.Id, ids(x.Admins), ids(x.Readers), ids(x.Executors), ts(x.CreatedAt))
	if len(x.AllowedSources) > 0 {
		fmt.Fprintf(w, "allowed sources\t%s\n", strings.Join(x.AllowedSources, ", "))
	}
	if t := limitsText(x.JobDefaults); t != "" {
		fmt.Fprintf(w, "job defaults\t%s\n", t)
	}
	if t := limitsText(x.JobMax); t != "" {
		fmt.Fprintf(w, "job max\t%s\n", t)
	}
}

func (c *cli) runnerCmd(ctx context.Context, verb string, args []string) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	switch verb {
	case "create":
		fs := subFlags("runner create")
		remote := fs.Bool("remote", false, "")
		pubkey := fs.String("pubkey", "", "")
		address := fs.String("address", "", "")
		topic := fs.String("topic", "", "")
		types := fs.String("script-types", "", "")
		pos, err := parseSub(fs, args)
		if err != nil {
			return err
		}
		rn := &herov1.Runner{Local: !*remote, Pubkey: *pubkey, Address: *address, Topic: *topic}
		if len(pos) == 1 {
			if rn.Id, err = parseID("runner id", pos[0]); err != nil {
				return err
			}
		}
		if *types != "" {
			rn.ScriptTypes = strings.Split(*types, ",")
		}
		r, err := api.CreateRunner(cctx, &herov1.CreateRunnerRequest{ContextId: c.g.context, Runner: rn})
		if err != nil {
			return err
		}
		return c.show(r.Runner, func(w *tabwriter.Writer) { printRunner(w, r.Runner) })
	case "get":
		pos, err := parseSub(subFlags("runner get"), args)
		if err != nil || len(pos) != 1 {
			return usageErr("runner get ID")
		}
		id, err := parseID("runner id", pos[0])
		if err != nil {
			return err
		}
		r, err := api.GetRunner(cctx, &herov1.GetRunnerRequest{ContextId: c.g.context, Id: id})
		if err != nil {
			return err
		}
		return c.show(r.Runner, func(w *tabwriter.Writer) { printRunner(w, r.Runner) })
	case "list":
		fs := subFlags("runner list")
		limit := fs.Uint("limit", 100, "")
		cursor := fs.String("cursor", "", "")
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		r, err := api.ListRunners(cctx, &herov1.ListRunnersRequest{ContextId: c.g.context, Limit: uint32(*limit), Cursor: *cursor})
		if err != nil {
			return err
		}
		return c.show(r, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "ID\tLOCAL\tTOPIC\tSCRIPT TYPES\tPROCESSES")
			for _, x := range r.Runners {
				fmt.Fprintf(w, "%d\t%v\t%s\t%s\t%d\n", x.Id, x.Local, x.Topic, dash(strings.Join(x.ScriptTypes, ",")), len(x.Processes))
			}
			if r.NextCursor != "" {
				fmt.Fprintf(w, "(more: --cursor %s)\n", r.NextCursor)
			}
		})
	case "delete":
		fs := subFlags("runner delete")
		force := fs.Bool("force", false, "")
		pos, err := parseSub(fs, args)
		if err != nil || len(pos) != 1 {
			return usageErr("runner delete ID [--force]")
		}
		id, err := parseID("runner id", pos[0])
		if err != nil {
			return err
		}
		if _, err := api.DeleteRunner(cctx, &herov1.DeleteRunnerRequest{ContextId: c.g.context, Id: id, Force: *force}); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "runner %d deleted\n", id)
		return nil
	}
	return usageErr("runner create|get|list|delete")
}

func printRunner(w *tabwriter.Writer, r *herov1.Runner) {
	fmt.Fprintf(w, "runner\t%d\nlocal\t%v\ntopic\t%s\npubkey\t%s\naddress\t%s\nscript types\t%s\n", r.Id, r.Local, r.Topic, dash(r.Pubkey), dash(r.Address), dash(strings.Join(r.ScriptTypes, ",")))
	for _, p := range r.Processes {
		fmt.Fprintf(w, "process\t%s (heartbeat %s ago)\n", p.Id, time.Since(time.UnixMilli(p.LastHeartbeatMs)).Round(time.Second))
	}
}

// jobFlags are the flags that describe a job.
type jobFlags struct {
	id, runner, timeout, retries *uint
	typ, script, file, depends   *string
	function, args, kwargs       *string
	limits                       *string
	env                          multiFlag
}

func addJobFlags(fs *flag.FlagSet) *jobFlags {
	f := &jobFlags{}
	f.id = fs.Uint("id", 0, "")
	f.runner = fs.Uint("runner", 0, "")
	f.timeout = fs.Uint("timeout", 0, "")
	f.retries = fs.Uint("retries", 0, "")
	f.typ = fs.String("type", "", "")
	f.script = fs.String("script", "", "")
	f.file = fs.String("file", "", "")
	f.depends = fs.String("depends", "", "")
	f.function = fs.String("function", "", "")
	f.args = fs.String("args", "", "")
	f.kwargs = fs.String("kwargs", "", "")
	fs.Var(&f.env, "env", "")
	f.limits = fs.String("limits", "", "")
	return f
}

func (f *jobFlags) job(ctxID uint32) (*herov1.Job, error) {
	j, err := f.spec(ctxID)
	if err != nil || *f.limits == "" {
		return j, err
	}
	if j.Limits, err = parseLimits("--limits", *f.limits); err != nil {
		return nil, err
	}
	return j, nil
}

func (f *jobFlags) spec(ctxID uint32) (*herov1.Job, error) {
	if *f.function != "" {
		if *f.script != "" || *f.file != "" {
			return nil, usageErr("a handler job (--function) has no --script or --file")
		}
		env, err := parseEnv(f.env)
		if err != nil {
			return nil, err
		}
		deps, err := parseIDList("--depends", *f.depends)
		if err != nil {
			return nil, err
		}
		return &herov1.Job{Id: uint32(*f.id), ContextId: ctxID, ScriptType: *f.typ, FunctionName: *f.function, Args: *f.args, Kwargs: *f.kwargs,
			Timeout: uint32(*f.timeout), Retries: uint32(*f.retries), EnvVars: env, Dependends: deps, RunnerId: uint32(*f.runner)}, nil
	}
	if *f.typ == "" {
		return nil, usageErr("--type is required (python, sh, bash, …), or --function executor#handler for a handler job")
	}
	script := *f.script
	if *f.file != "" {
		if script != "" {
			return nil, usageErr("give --script or --file, not both")
		}
		b, err := os.ReadFile(*f.file)
		if err != nil {
			return nil, err
		}
		script = string(b)
	}
	if script == "" {
		return nil, usageErr("--script or --file is required")
	}
	env, err := parseEnv(f.env)
	if err != nil {
		return nil, err
	}
	deps, err := parseIDList("--depends", *f.depends)
	if err != nil {
		return nil, err
	}
	return &herov1.Job{Id: uint32(*f.id), ContextId: ctxID, Script: script, ScriptType: *f.typ, Timeout: uint32(*f.timeout),
		Retries: uint32(*f.retries), EnvVars: env, Dependends: deps, RunnerId: uint32(*f.runner)}, nil
}

func (c *cli) jobCmd(ctx context.Context, verb string, args []string) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	switch verb {
	case "create":
		fs := subFlags("job create")
		jf := addJobFlags(fs)
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		j, err := jf.job(c.g.context)
		if err != nil {
			return err
		}
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		r, err := api.CreateJob(cctx, &herov1.CreateJobRequest{ContextId: c.g.context, Job: j})
		if err != nil {
			return err
		}
		return c.show(r.Job, func(w *tabwriter.Writer) { printJob(w, r.Job) })
	case "run":
		fs := subFlags("job run")
		jf := addJobFlags(fs)
		wait := fs.Uint("wait", 0, "")
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		j, err := jf.job(c.g.context)
		if err != nil {
			return err
		}
		waitFor := time.Duration(j.Timeout)*time.Second + time.Minute
		if *wait > 0 {
			waitFor = time.Duration(*wait)*time.Second + 5*time.Second
		}
		cctx, cancel := context.WithTimeout(ctx, waitFor+5*time.Minute)
		defer cancel()
		r, err := api.RunJob(cctx, &herov1.RunJobRequest{ContextId: c.g.context, Job: j, Timeout: uint32(*wait)})
		if err != nil {
			return err
		}
		if c.g.output == "json" {
			return c.show(r.Job, nil)
		}
		if r.Job.FunctionName != "" && len(r.Job.Result) > 0 && r.Job.Result["output"] == "" {
			b, _ := json.Marshal(r.Job.Result)
			fmt.Fprintln(c.out, string(b))
		} else {
			fmt.Fprint(c.out, r.Job.Result["output"])
		}
		if r.Job.Status != "finished" {
			return &exitError{code: 1, msg: fmt.Sprintf("job %d:%d %s: %s", r.Job.CallerId, r.Job.Id, r.Job.Status, r.Job.Error)}
		}
		return nil
	case "get", "logs", "stop", "delete":
		fs := subFlags("job " + verb)
		caller := fs.Uint("caller", 0, "")
		follow := fs.Bool("f", false, "")
		force := fs.Bool("force", false, "")
		pos, err := parseSub(fs, args)
		if err != nil || len(pos) != 1 {
			switch verb {
			case "logs":
				return usageErr("job logs ID [-f] [--caller N]")
			case "delete":
				return usageErr("job delete ID [--caller N] [--force]")
			}
			return usageErr("job %s ID [--caller N]", verb)
		}
		id, err := parseID("job id", pos[0])
		if err != nil {
			return err
		}
		callerID := uint32(*caller)
		if callerID == 0 {
			callerID = c.g.actor
		}
		if callerID == 0 {
			return usageErr("job %s: --caller (or HERO_ACTOR) names the job's caller", verb)
		}
		switch verb {
		case "get":
			cctx, cancel := c.callCtx(ctx)
			defer cancel()
			r, err := api.GetJob(cctx, &herov1.GetJobRequest{ContextId: c.g.context, CallerId: callerID, Id: id})
			if err != nil {
				return err
			}
			return c.show(r.Job, func(w *tabwriter.Writer) { printJob(w, r.Job) })
		case "delete":
			cctx, cancel := c.callCtx(ctx)
			defer cancel()
			if _, err := api.DeleteJob(cctx, &herov1.DeleteJobRequest{ContextId: c.g.context, CallerId: callerID, Id: id, Force: *force}); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "job %d:%d deleted\n", callerID, id)
			return nil
		case "stop":
			cctx, cancel := c.callCtx(ctx)
			defer cancel()
			r, err := api.StopJob(cctx, &herov1.StopJobRequest{ContextId: c.g.context, CallerId: callerID, Id: id})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "stop requested for job %d:%d (status %s)\n", callerID, id, r.Job.Status)
			return nil
		default:
			return c.followLogs(ctx, api, callerID, id, *follow)
		}
	case "list":
		fs := subFlags("job list")
		status := fs.String("status", "", "")
		limit := fs.Uint("limit", 100, "")
		cursor := fs.String("cursor", "", "")
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		r, err := api.ListJobs(cctx, &herov1.ListJobsRequest{ContextId: c.g.context, Status: *status, Limit: uint32(*limit), Cursor: *cursor})
		if err != nil {
			return err
		}
		return c.show(r, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "CALLER\tID\tFLOW\tTYPE\tSTATUS\tATTEMPT\tERROR")
			for _, j := range r.Jobs {
				fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%s\t%d\t%s\n", j.CallerId, j.Id, j.FlowId, j.ScriptType, j.Status, j.Attempt, firstLine(j.Error))
			}
			if r.NextCursor != "" {
				fmt.Fprintf(w, "(more: --cursor %s)\n", r.NextCursor)
			}
		})
	}
	return usageErr("job create|get|list|run|logs|stop|delete")
}

func (c *cli) followLogs(ctx context.Context, api herov1.CoordinatorClient, callerID, id uint32, follow bool) error {
	var offset int64
	for {
		cctx, cancel := c.callCtx(ctx)
		r, err := api.GetJobLogs(cctx, &herov1.GetJobLogsRequest{ContextId: c.g.context, CallerId: callerID, Id: id, Offset: offset})
		cancel()
		if err != nil {
			return err
		}
		fmt.Fprint(c.out, r.Logs)
		offset = r.NextOffset
		if !follow || r.Complete {
			return nil
		}
		if r.Logs == "" {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(250 * time.Millisecond): // tailing a log: the CLI polls the offset
			}
		}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return dash(s)
}

func printJob(w *tabwriter.Writer, j *herov1.Job) {
	fmt.Fprintf(w, "job\t%d (caller %d, context %d)\n", j.Id, j.CallerId, j.ContextId)
	fmt.Fprintf(w, "status\t%s\n", j.Status)
	if j.FlowId != 0 {
		fmt.Fprintf(w, "flow\t%d\n", j.FlowId)
	}
	fmt.Fprintf(w, "script type\t%s\ndepends\t%s\ntimeout\t%ds\nretries\t%d\nattempt\t%d\n", j.ScriptType, ids(j.Dependends), j.Timeout, j.Retries, j.Attempt)
	if j.FunctionName != "" {
		fmt.Fprintf(w, "function\t%s\nargs\t%s\nkwargs\t%s\n", j.FunctionName, dash(j.Args), dash(j.Kwargs))
	}
	if j.TraceId != "" {
		fmt.Fprintf(w, "trace id\t%s\n", j.TraceId)
	}
	if t := limitsText(j.Limits); t != "" {
		fmt.Fprintf(w, "limits\t%s\n", t)
	}
	if j.Error != "" {
		fmt.Fprintf(w, "error\t%s\n", j.Error)
	}
	fmt.Fprintf(w, "created\t%s\nstarted\t%s\nfinished\t%s\n", ts(j.CreatedAt), ts(j.StartedAt), ts(j.FinishedAt))
	kvLines(w, "env", j.EnvVars)
	kvLines(w, "result", j.Result)
}
