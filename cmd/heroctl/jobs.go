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

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

func jobCommands() []command {
	return []command{
		{name: "job create", summary: "Create a job (not started: a flow starts it).",
			example: "heroctl job create --type sh --script 'echo hi' --retries 2", define: (*cli).jobCreate},
		{name: "job get", args: "ID", summary: "Show a job.", example: "heroctl job get 7 --caller 1", define: (*cli).jobGet},
		{name: "job list", summary: "List the context's jobs, newest first.", example: "heroctl job list --status error", define: (*cli).jobList},
		{name: "job run", summary: "Run a standalone job, wait for its end and print its output (a handler job: --function).",
			example: "heroctl job run --type python --script 'print(6*7)'\nheroctl job run --function myexec#add --args '[1,2]'", define: (*cli).jobRun},
		{name: "job submit", summary: "Submit a standalone job and return at once (--wait: then wait for its end and print its output).",
			example: "heroctl job submit --type sh --script 'echo hi' --unique-key nightly-report --unique-ttl 24h\nheroctl job submit --type sh --script 'echo later' --delay 10m", define: (*cli).jobSubmit},
		{name: "job wait", args: "ID", summary: "Wait until a job has ended for good and show it; exits 1 when it failed.",
			example: "heroctl job wait 7", define: (*cli).jobWait},
		{name: "job logs", args: "ID", summary: "Print a job's log; -f follows it until the job ends.", example: "heroctl job logs 7 -f", define: (*cli).jobLogs},
		{name: "job stop", args: "ID", summary: "Stop a job: a running one is killed, a queued one never starts.", example: "heroctl job stop 7", define: (*cli).jobStop},
		{name: "job delete", args: "ID", summary: "Delete a job of no flow with its log and messages.", example: "heroctl job delete 7", define: (*cli).jobDelete},
	}
}

// jobFlags are the flags that describe a job.
type jobFlags struct {
	id, runner, timeout, retries *uint
	priority, concurrencyLimit   *uint
	concurrencyKey               *string
	concurrencyPolicy            *string
	typ, script, file, depends   *string
	function, args, kwargs       *string
	limits                       *string
	env                          multiFlag
}

func addJobFlags(fs *flag.FlagSet) *jobFlags {
	f := &jobFlags{}
	f.id = fs.Uint("id", 0, "the job's id (0: the server picks one)")
	f.runner = fs.Uint("runner", 0, "pin the job to this runner (0: any)")
	f.timeout = fs.Uint("timeout", 0, "seconds the job may run (0: the runner's default)")
	f.retries = fs.Uint("retries", 0, "attempts after a failure")
	f.priority = fs.Uint("priority", 0, "its order in its queue: 1 first … 5 last (0: 3)")
	f.concurrencyKey = fs.String("concurrency-key", "", "at most --concurrency-limit jobs of this key run at once (e.g. a customer id)")
	f.concurrencyLimit = fs.Uint("concurrency-limit", 0, "the most jobs of its --concurrency-key in flight (0: 1)")
	f.concurrencyPolicy = fs.String("concurrency-policy", "", "at its key's limit: queue (default: wait), cancel_newest (this job), cancel_oldest (the key's oldest in flight)")
	f.typ = fs.String("type", "", "the script type: python, sh, bash, …")
	f.script = fs.String("script", "", "the script")
	f.file = fs.String("file", "", "read the script from this file")
	f.depends = fs.String("depends", "", "job ids it depends on (comma-separated)")
	f.function = fs.String("function", "", "a handler job: executor#handler")
	f.args = fs.String("args", "", "a handler job's positional arguments (a JSON list)")
	f.kwargs = fs.String("kwargs", "", "a handler job's keyword arguments (a JSON object)")
	fs.Var(&f.env, "env", "an environment variable `KEY=VALUE` (repeatable)")
	f.limits = fs.String("limits", "", "resource limits ("+limitsUsage+")")
	return f
}

func (f *jobFlags) job() (*model.Job, error) {
	j := &model.Job{ID: uint32(*f.id), ScriptType: model.ScriptType(*f.typ), Timeout: uint32(*f.timeout), RunnerID: uint32(*f.runner)}
	if *f.retries > 255 {
		return nil, usageErr("--retries %d: at most 255", *f.retries)
	}
	j.Retries = uint8(*f.retries)
	if *f.priority > model.PriorityLowest {
		return nil, usageErr("--priority %d: 1 (first) … %d (last), or 0 for %d", *f.priority, model.PriorityLowest, model.PriorityDefault)
	}
	j.Priority = uint8(*f.priority)
	if *f.concurrencyLimit > model.MaxConcurrencyLimit || (*f.concurrencyLimit != 0 && *f.concurrencyKey == "") {
		return nil, usageErr("--concurrency-limit %d: at most %d, with a --concurrency-key", *f.concurrencyLimit, model.MaxConcurrencyLimit)
	}
	j.ConcurrencyKey, j.ConcurrencyLimit, j.ConcurrencyPolicy = *f.concurrencyKey, uint32(*f.concurrencyLimit), *f.concurrencyPolicy
	var err error
	if j.EnvVars, err = parseEnv(f.env); err != nil {
		return nil, err
	}
	if j.Dependends, err = parseIDList("--depends", *f.depends); err != nil {
		return nil, err
	}
	l, err := parseLimits("--limits", *f.limits)
	if err != nil {
		return nil, err
	}
	j.Limits = protoconv.LimitsFromPB(l)
	if *f.function != "" {
		return f.handler(j)
	}
	return f.scriptJob(j)
}

func (f *jobFlags) handler(j *model.Job) (*model.Job, error) {
	if *f.script != "" || *f.file != "" {
		return nil, usageErr("a handler job (--function) has no --script or --file")
	}
	j.FunctionName = *f.function
	for _, a := range []struct {
		name, val string
		into      *json.RawMessage
	}{{"--args", *f.args, &j.Args}, {"--kwargs", *f.kwargs, &j.Kwargs}} {
		if a.val == "" {
			continue
		}
		if !json.Valid([]byte(a.val)) {
			return nil, usageErr("%s %q is not JSON", a.name, a.val)
		}
		*a.into = json.RawMessage(a.val)
	}
	return j, nil
}

func (f *jobFlags) scriptJob(j *model.Job) (*model.Job, error) {
	if j.ScriptType == "" {
		return nil, usageErr("--type is required (python, sh, bash, …), or --function executor#handler for a handler job")
	}
	if *f.args != "" || *f.kwargs != "" {
		return nil, usageErr("--args and --kwargs belong to a handler job (--function)")
	}
	j.Script = *f.script
	if *f.file != "" {
		if j.Script != "" {
			return nil, usageErr("give --script or --file, not both")
		}
		b, err := os.ReadFile(*f.file)
		if err != nil {
			return nil, err
		}
		j.Script = string(b)
	}
	if j.Script == "" {
		return nil, usageErr("--script or --file is required")
	}
	return j, nil
}

func (c *cli) showJob(j *model.Job) error {
	return c.show(j, func(w *tabwriter.Writer) { printJob(w, j) })
}

func (c *cli) jobCreate(fs *flag.FlagSet) action {
	jf := addJobFlags(fs)
	return c.noArgs("job create", perCall, func(ctx context.Context, hc *hero.Client) error {
		j, err := jf.job()
		if err != nil {
			return err
		}
		if j, err = hc.CreateJob(ctx, j); err != nil {
			return err
		}
		return c.showJob(j)
	})
}

func (c *cli) jobRun(fs *flag.FlagSet) action {
	jf := addJobFlags(fs)
	wait := fs.Uint("wait", 0, "seconds to wait for the job's end (0: its timeout)")
	return c.noArgs("job run", waits, func(ctx context.Context, hc *hero.Client) error {
		j, err := jf.job()
		if err != nil {
			return err
		}
		r, err := hc.RunJob(ctx, j, time.Duration(*wait)*time.Second)
		if err != nil {
			return err
		}
		return c.printOutput(r)
	})
}

// printOutput prints an ended job's output (a handler's result as JSON), or with -o
// json the job; exit 1 when it did not finish.
func (c *cli) printOutput(j *model.Job) error {
	if c.g.output == "json" {
		if err := c.showJob(j); err != nil {
			return err
		}
		return jobOutcome(j)
	}
	if j.FunctionName != "" && len(j.Result) > 0 && j.Result["output"] == "" {
		b, _ := json.Marshal(j.Result)
		fmt.Fprintln(c.out, string(b))
	} else {
		fmt.Fprint(c.out, j.Result["output"])
	}
	return jobOutcome(j)
}

// jobOutcome is exit 1 for a job that did not finish.
func jobOutcome(j *model.Job) error {
	if j.Status != model.JobFinished {
		return &exitError{code: 1, msg: fmt.Sprintf("job %d:%d %s: %s", j.CallerID, j.ID, j.Status, j.Error)}
	}
	return nil
}

// jobRef are the flags and argument that name a job: ID [--caller N].
type jobRef struct {
	name   string
	caller *uint
}

func addJobRef(fs *flag.FlagSet, name string) *jobRef {
	return &jobRef{name: name, caller: fs.Uint("caller", 0, "the job's caller (default: HERO_ACTOR)")}
}

func (r *jobRef) parse(c *cli, pos []string) (caller, id uint32, err error) {
	if id, err = oneID(r.name, "job id", pos); err != nil {
		return 0, 0, err
	}
	caller = uint32(*r.caller)
	if caller == 0 {
		caller = c.g.actor
	}
	if caller == 0 {
		return 0, 0, usageErr("%s: --caller (or HERO_ACTOR) names the job's caller", r.name)
	}
	return caller, id, nil
}

func (c *cli) jobSubmit(fs *flag.FlagSet) action {
	jf := addJobFlags(fs)
	key := fs.String("unique-key", "", "while it lasts, a submission with this key returns the job it names")
	ttl := fs.Duration("unique-ttl", 24*time.Hour, "how long the key lasts (1s to 720h)")
	wait := fs.Bool("wait", false, "wait for the job's end and print its output (exit 1 when it failed)")
	runAt, delay := addDelayFlags(fs, "job")
	debounceKey := fs.String("debounce-key", "", "of the submissions with this key within the --debounce window only the last runs; the others end cancelled")
	debounce := fs.Duration("debounce", 0, "the --debounce-key's window (1ms to 24h): the job runs at its end unless a later submission of the key replaces it")
	return c.noArgs("job submit", waits, func(ctx context.Context, hc *hero.Client) error {
		j, err := jf.job()
		if err != nil {
			return err
		}
		at, err := runAt.time("job submit")
		if err != nil {
			return err
		}
		if (*debounceKey == "") != (*debounce == 0) {
			return usageErr("job submit: --debounce-key and --debounce go together (the key and its window)")
		}
		sub, err := hc.Submit(ctx, j, hero.SubmitOptions{UniqueKey: *key, UniqueTTL: *ttl, RunAt: at, Delay: *delay, DebounceKey: *debounceKey, Debounce: *debounce})
		if err != nil {
			return err
		}
		if !*wait {
			return c.done(submittedLine(sub), sub)
		}
		fmt.Fprintln(c.errw, submittedLine(sub))
		if j, err = hc.WaitJob(ctx, sub.Job.CallerID, sub.Job.ID); err != nil {
			return err
		}
		return c.printOutput(j)
	})
}

// submittedLine is "job 1:7 submitted" (or "… exists already").
func submittedLine(s *hero.Submitted) string {
	what := "submitted"
	if s.Existing {
		what = "exists already (the unique key names it)"
	}
	return fmt.Sprintf("job %d:%d %s (status %s)", s.Job.CallerID, s.Job.ID, what, s.Job.Status)
}

func (c *cli) jobGet(fs *flag.FlagSet) action {
	return c.byJob(addJobRef(fs, "job get"), perCall, func(ctx context.Context, hc *hero.Client, caller, id uint32) error {
		j, err := hc.GetJob(ctx, caller, id)
		if err != nil {
			return err
		}
		return c.showJob(j)
	})
}

func (c *cli) jobWait(fs *flag.FlagSet) action {
	ref := addJobRef(fs, "job wait")
	wait := fs.Duration("max", 5*time.Minute, "how long to wait at most")
	return c.byJob(ref, waits, func(ctx context.Context, hc *hero.Client, caller, id uint32) error {
		ctx, cancel := context.WithTimeout(ctx, *wait)
		defer cancel()
		j, err := hc.WaitJob(ctx, caller, id)
		if err != nil {
			return err
		}
		if err := c.showJob(j); err != nil {
			return err
		}
		return jobOutcome(j)
	})
}

func (c *cli) jobLogs(fs *flag.FlagSet) action {
	ref := addJobRef(fs, "job logs")
	follow := fs.Bool("f", false, "follow the log until the job ends")
	return c.byJob(ref, waits, func(ctx context.Context, hc *hero.Client, caller, id uint32) error {
		return quietCancel(ctx, hc.CopyJobLogs(ctx, caller, id, c.out, *follow))
	})
}

// quietCancel: a follow ended by Ctrl-C is no error.
func quietCancel(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (c *cli) jobStop(fs *flag.FlagSet) action {
	return c.byJob(addJobRef(fs, "job stop"), perCall, func(ctx context.Context, hc *hero.Client, caller, id uint32) error {
		j, err := hc.StopJob(ctx, caller, id)
		if err != nil {
			return err
		}
		return c.done(fmt.Sprintf("stop requested for job %d:%d (status %s)", caller, id, j.Status), j)
	})
}

func (c *cli) jobDelete(fs *flag.FlagSet) action {
	ref := addJobRef(fs, "job delete")
	force := fs.Bool("force", false, "delete it even while it runs")
	return c.byJob(ref, perCall, func(ctx context.Context, hc *hero.Client, caller, id uint32) error {
		if err := hc.DeleteJob(ctx, caller, id, *force); err != nil {
			return err
		}
		return c.done(fmt.Sprintf("job %d:%d deleted", caller, id), deleted)
	})
}

func (c *cli) jobList(fs *flag.FlagSet) action {
	page := addPageFlags(fs, true)
	return c.noArgs("job list", perCall, func(ctx context.Context, hc *hero.Client) error {
		r, err := hc.ListJobs(ctx, page.options())
		if err != nil {
			return err
		}
		return c.show(r, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "CALLER\tID\tFLOW\tTYPE\tSTATUS\tATTEMPT\tERROR")
			for _, j := range r.Items {
				fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%s\t%d\t%s\n", j.CallerID, j.ID, j.FlowID, jobWhat(j), j.Status, j.Attempt, firstLine(j.Error))
			}
			moreLine(w, r.NextCursor)
		})
	})
}

// jobWhat is a job's script type, or a handler job's function.
func jobWhat(j *model.Job) string {
	if j.FunctionName != "" {
		return j.FunctionName
	}
	return string(j.ScriptType)
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

func printJob(w *tabwriter.Writer, j *model.Job) {
	fmt.Fprintf(w, "job\t%d (caller %d, context %d)\n", j.ID, j.CallerID, j.ContextID)
	fmt.Fprintf(w, "status\t%s\n", j.Status)
	if j.FlowID != 0 {
		fmt.Fprintf(w, "flow\t%d\n", j.FlowID)
	}
	if j.ScheduleID != "" {
		fmt.Fprintf(w, "schedule\t%s (tick %s)\n", j.ScheduleID, time.UnixMilli(j.ScheduleTickMs).UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "script type\t%s\ndepends\t%s\ntimeout\t%ds\nretries\t%d\nattempt\t%d\n", j.ScriptType, ids(j.Dependends), j.Timeout, j.Retries, j.Attempt)
	if j.FunctionName != "" {
		fmt.Fprintf(w, "function\t%s\nargs\t%s\nkwargs\t%s\n", j.FunctionName, dash(string(j.Args)), dash(string(j.Kwargs)))
	}
	if j.Priority != 0 {
		fmt.Fprintf(w, "priority\t%d\n", j.Priority)
	}
	if j.ConcurrencyKey != "" {
		policy := j.ConcurrencyPolicy
		if policy == "" {
			policy = model.ConcurrencyQueue
		}
		fmt.Fprintf(w, "concurrency key\t%s (limit %d, %s)\n", j.ConcurrencyKey, max(j.ConcurrencyLimit, 1), policy)
	}
	if j.Held != "" {
		fmt.Fprintf(w, "held\t%s\n", j.Held)
	}
	if j.DebounceKey != "" {
		fmt.Fprintf(w, "debounce key\t%s\n", j.DebounceKey)
	}
	if j.TraceID != "" {
		fmt.Fprintf(w, "trace id\t%s\n", j.TraceID)
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
