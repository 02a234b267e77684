package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

func flowCommands() []command {
	return []command{
		{name: "flow submit", args: "FILE.yaml", summary: "Create a flow file's jobs and the flow, and start it; --watch or --wait follow it.",
			example: "heroctl flow submit examples/diamond.yaml --set GREETING=hi --wait", define: (*cli).flowSubmit},
		{name: "flow create", summary: "Create a flow of existing jobs (flow start runs it).",
			example: "heroctl flow create --jobs 1,2,3 --env STAGE=test", define: (*cli).flowCreate},
		{name: "flow start", args: "ID", summary: "Check a flow's DAG and start it (--run-at/--delay: schedule its start).", example: "heroctl flow start 3\nheroctl flow start 3 --run-at 2026-12-24T18:00:00Z", define: (*cli).flowStart},
		{name: "flow get", args: "ID", summary: "Show a flow; while it runs, its result map so far.", example: "heroctl flow get 3", define: flowByID("flow get", (*hero.Client).GetFlow)},
		{name: "flow list", summary: "List the context's flows, newest first.", example: "heroctl flow list --status error", define: (*cli).flowList},
		{name: "flow dag", args: "ID", summary: "Show a flow's jobs with their dependencies and states.", example: "heroctl flow dag 3", define: (*cli).flowDAG},
		{name: "flow counts", args: "ID", summary: "Count a flow's jobs by state (from counters: as fast for 100,000 jobs as for 10).", example: "heroctl flow counts 3", define: (*cli).flowCounts},
		{name: "flow watch", args: "ID", summary: "Follow a flow's jobs live until it ends; exits 1 when it fails.", example: "heroctl flow watch 3", define: (*cli).flowWatch},
		{name: "flow wait", args: "ID", summary: "Wait until a flow ends and show it; exits 1 when it failed.", example: "heroctl flow wait 3 --wait 600", define: (*cli).flowWait},
		{name: "flow logs", args: "ID", summary: "Print every job's log of a flow, in the flow's order; -f follows them.", example: "heroctl flow logs 3 -f", define: (*cli).flowLogs},
		{name: "flow cancel", args: "ID", summary: "Cancel a flow: running jobs are stopped, pending ones never start.", example: "heroctl flow cancel 3", define: flowByID("flow cancel", (*hero.Client).CancelFlow)},
		{name: "flow retry", args: "ID", summary: "Run a failed flow's failed and cancelled jobs again, keeping the finished ones.", example: "heroctl flow retry 3", define: flowByID("flow retry", (*hero.Client).RetryFlow)},
		{name: "flow delete", args: "ID", summary: "Delete an ended (or, with --force, running) flow with its jobs.", example: "heroctl flow delete 3", define: (*cli).flowDelete},
	}
}

func (c *cli) showFlow(f *model.Flow) error {
	return c.show(f, func(w *tabwriter.Writer) { printFlow(w, f) })
}

// flowByID makes a command that calls one flow method with the flow's id and shows the flow.
func flowByID(name string, call func(*hero.Client, context.Context, uint32) (*model.Flow, error)) func(*cli, *flag.FlagSet) action {
	return func(c *cli, fs *flag.FlagSet) action {
		return c.byID(name, "flow id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
			f, err := call(hc, ctx, id)
			if err != nil {
				return err
			}
			return c.showFlow(f)
		})
	}
}

func (c *cli) flowStart(fs *flag.FlagSet) action {
	runAt, delay := addDelayFlags(fs, "flow")
	return c.byID("flow start", "flow id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
		at, err := runAt.time("flow start")
		if err != nil {
			return err
		}
		if *delay > 0 {
			at = time.Now().Add(*delay)
		}
		var f *model.Flow
		if at.IsZero() {
			f, err = hc.StartFlow(ctx, id)
		} else {
			f, err = hc.StartFlowAt(ctx, id, at)
		}
		if err != nil {
			return err
		}
		return c.showFlow(f)
	})
}

func (c *cli) flowSubmit(fs *flag.FlagSet) action {
	watch := fs.Bool("watch", false, "follow the flow's jobs live until it ends")
	wait := fs.Bool("wait", false, "wait until the flow ends and show it (exit 1 when it fails)")
	maxWait := fs.Uint("max-wait", 0, "with --wait: seconds to wait at most (0: the server's default, 300)")
	ttl := fs.Uint("creation-ttl", 0, "seconds the server keeps an unfinished creation between two calls before it deletes its jobs (0: the server's default, 60; 5 to 3600)")
	quiet := fs.Bool("quiet", false, "no progress lines while the jobs are created")
	var set multiFlag
	fs.Var(&set, "set", "a parameter `KEY=VALUE` into the flow's env (repeatable; over the file's env)")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return wrongArgs("flow submit")
		}
		if *watch && *wait {
			return usageErr("flow submit: --watch and --wait exclude each other")
		}
		spec, err := loadFlowFile(pos[0])
		if err != nil {
			return err
		}
		params, err := parseKV("set", set)
		if err != nil {
			return err
		}
		for k, v := range params {
			if spec.Env == nil {
				spec.Env = map[string]string{}
			}
			spec.Env[k] = v
		}
		hc, err := c.client()
		if err != nil {
			return err
		}
		spec.CreationTTL = time.Duration(*ttl) * time.Second
		if !*quiet {
			spec.Progress = c.creationProgress(len(spec.Jobs))
		}
		sub, err := hc.SubmitFlow(ctx, *spec)
		if err != nil {
			return err
		}
		switch {
		case *wait:
			fmt.Fprintln(c.errw, startedLine(sub, c.g.context))
			return c.waitFlow(ctx, hc, sub.Flow.ID, *maxWait)
		case *watch:
			if c.g.output != "json" {
				fmt.Fprintln(c.out, startedLine(sub, c.g.context))
			}
			return c.watchFlow(ctx, hc, sub.Flow.ID)
		case c.g.output == "json":
			return c.showFlow(sub.Flow)
		}
		fmt.Fprintf(c.out, "%s\nwatch it: heroctl flow watch %d\n", startedLine(sub, c.g.context), sub.Flow.ID)
		return nil
	}
}

// creationProgress prints, on stderr, how many of a flow's jobs are created: for a
// flow of more than one batch, a line a second at most and one at the end.
func (c *cli) creationProgress(total int) func(created, total int) {
	if total <= 500 {
		return nil
	}
	var last time.Time
	return func(created, total int) {
		if created < total && time.Since(last) < time.Second {
			return
		}
		last = time.Now()
		fmt.Fprintf(c.errw, "created %d of %d jobs (%d%%)\n", created, total, created*100/total)
	}
}

// startedLine is "flow 3 started in context 1 (a=job 1, b=job 2)".
func startedLine(sub *hero.SubmittedFlow, ctxID uint32) string {
	names := make([]string, 0, len(sub.Jobs))
	for n := range sub.Jobs {
		names = append(names, n)
	}
	sort.Slice(names, func(a, b int) bool { return sub.Jobs[names[a]] < sub.Jobs[names[b]] })
	const shown = 20 // a big flow's line names its first jobs only
	parts := make([]string, 0, min(len(names), shown+1))
	for i, n := range names {
		if i == shown {
			parts = append(parts, fmt.Sprintf("… %d more", len(names)-shown))
			break
		}
		parts = append(parts, fmt.Sprintf("%s=job %d", n, sub.Jobs[n]))
	}
	return fmt.Sprintf("flow %d started in context %d (%s)", sub.Flow.ID, ctxID, strings.Join(parts, ", "))
}

func (c *cli) flowCreate(fs *flag.FlagSet) action {
	id := fs.Uint("id", 0, "the flow's id (0: the server picks one)")
	jobs := fs.String("jobs", "", "the ids of its jobs, one caller's (comma-separated)")
	var env multiFlag
	fs.Var(&env, "env", "an environment variable `KEY=VALUE` for every job (repeatable)")
	return c.noArgs("flow create", perCall, func(ctx context.Context, hc *hero.Client) error {
		list, err := parseIDList("--jobs", *jobs)
		if err != nil || len(list) == 0 {
			return wrongArgs("flow create")
		}
		envs, err := parseEnv(env)
		if err != nil {
			return err
		}
		f, err := hc.CreateFlow(ctx, &model.Flow{ID: uint32(*id), Jobs: list, EnvVars: envs})
		if err != nil {
			return err
		}
		return c.showFlow(f)
	})
}

func (c *cli) flowDelete(fs *flag.FlagSet) action {
	force := fs.Bool("force", false, "delete it even while it runs")
	return c.byID("flow delete", "flow id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
		if err := hc.DeleteFlow(ctx, id, *force); err != nil {
			return err
		}
		return c.done(fmt.Sprintf("flow %d deleted", id), deleted)
	})
}

func (c *cli) flowWait(fs *flag.FlagSet) action {
	wait := fs.Uint("wait", 0, "seconds to wait at most (0: the server's default, 300)")
	return c.byID("flow wait", "flow id", waits, func(ctx context.Context, hc *hero.Client, id uint32) error {
		return c.waitFlow(ctx, hc, id, *wait)
	})
}

// waitFlow waits for a flow's end, shows it, and exits 1 when it failed.
func (c *cli) waitFlow(ctx context.Context, hc *hero.Client, id uint32, secs uint) error {
	f, err := hc.WaitFlow(ctx, id, time.Duration(secs)*time.Second)
	if err != nil {
		return err
	}
	if err := c.showFlow(f); err != nil {
		return err
	}
	if f.Status == model.FlowError {
		return &exitError{code: 1, msg: fmt.Sprintf("flow %d failed: %s", id, f.Error)}
	}
	return nil
}

func (c *cli) flowLogs(fs *flag.FlagSet) action {
	follow := fs.Bool("f", false, "follow each job's log until it ends")
	return c.byID("flow logs", "flow id", waits, func(ctx context.Context, hc *hero.Client, id uint32) error {
		return quietCancel(ctx, hc.CopyFlowLogs(ctx, id, c.out, *follow))
	})
}

func (c *cli) flowList(fs *flag.FlagSet) action {
	page := addPageFlags(fs, true)
	return c.noArgs("flow list", perCall, func(ctx context.Context, hc *hero.Client) error {
		r, err := hc.ListFlows(ctx, page.options())
		if err != nil {
			return err
		}
		return c.show(r, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "ID\tCALLER\tJOBS\tSTATUS\tCREATED\tERROR")
			for _, f := range r.Items {
				fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%s\t%s\n", f.ID, f.CallerID, len(f.Jobs), f.Status, ts(f.CreatedAt), firstLine(f.Error))
			}
			moreLine(w, r.NextCursor)
		})
	})
}

func (c *cli) flowDAG(fs *flag.FlagSet) action {
	return c.byID("flow dag", "flow id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
		d, err := hc.FlowDAG(ctx, id)
		if err != nil {
			return err
		}
		for next := d.NextOffset; next != 0; {
			// a flow of more than 10,000 jobs comes a page at a time
			page, err := hc.FlowDAGPage(ctx, id, next, 10000)
			if err != nil {
				return err
			}
			d.Nodes, next = append(d.Nodes, page.Nodes...), page.NextOffset
		}
		d.NextOffset = 0
		return c.show(d, func(w *tabwriter.Writer) { printDAG(w, d) })
	})
}

func (c *cli) flowCounts(fs *flag.FlagSet) action {
	return c.byID("flow counts", "flow id", perCall, func(ctx context.Context, hc *hero.Client, id uint32) error {
		n, err := hc.FlowCounts(ctx, id)
		if err != nil {
			return err
		}
		return c.show(n, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "started\t%v\ntotal\t%d\nended\t%d\ncompleted\t%d\nfailed\t%d\ncancelled\t%d\nnot ended\t%d\n",
				n.Started, n.Total, n.Ended, n.Completed, n.Failed, n.Cancelled, n.NotEnded)
		})
	})
}

func (c *cli) flowWatch(fs *flag.FlagSet) action {
	return c.byID("flow watch", "flow id", waits, func(ctx context.Context, hc *hero.Client, id uint32) error {
		return c.watchFlow(ctx, hc, id)
	})
}

func printFlow(w *tabwriter.Writer, f *model.Flow) {
	fmt.Fprintf(w, "flow\t%d (caller %d, context %d)\nstatus\t%s\njobs\t%s\n", f.ID, f.CallerID, f.ContextID, f.Status, ids(f.Jobs))
	if f.Error != "" {
		fmt.Fprintf(w, "error\t%s\n", f.Error)
	}
	if f.Paused {
		fmt.Fprintf(w, "paused\t%s\n", dash(f.PauseNote))
	}
	if f.ScheduleID != "" {
		fmt.Fprintf(w, "schedule\t%s (tick %s)\n", f.ScheduleID, time.UnixMilli(f.ScheduleTickMs).UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "created\t%s\nstarted\t%s\nfinished\t%s\n", ts(f.CreatedAt), ts(f.StartedAt), ts(f.FinishedAt))
	kvLines(w, "env", f.EnvVars)
	flowResultLines(w, f.Result)
}

// dagHeader labels the columns of a flow's jobs (flow dag, flow watch).
const dagHeader = "JOB\tTYPE\tSTATE\tJOB STATUS\tATTEMPT\tDEPENDS\tERROR"

// nodeState is what a job is doing, in one word: its DAG node's state, or
// "retrying" for a failed attempt with another to come.
func nodeState(n *hero.DagNode) string {
	if n.JobStatus == model.JobError && !n.NodeStatus.Terminal() {
		return "retrying"
	}
	return string(n.NodeStatus)
}

// nodeWhat is a node's script type, or its handler job's function (as jobWhat).
func nodeWhat(n *hero.DagNode) string {
	if n.FunctionName != "" {
		return n.FunctionName
	}
	return n.ScriptType
}

func printDAG(w *tabwriter.Writer, d *hero.DAG) {
	fmt.Fprintf(w, "flow %d: %s\n", d.Flow.ID, d.Flow.Status)
	fmt.Fprintln(w, dagHeader)
	for _, n := range d.Nodes {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", n.ID, nodeWhat(n), nodeState(n), n.JobStatus, n.Attempt, ids(n.Depends), firstLine(n.Error))
	}
}

// watchView draws a watched flow: redrawn in place on a terminal (at most every
// 100 ms), one line per event otherwise, nothing but the end with -o json.
type watchView struct {
	c        *cli
	tty      bool
	drawn    int
	lastDraw time.Time
}

func (v *watchView) update(u hero.FlowUpdate) {
	switch {
	case u.Notice != "":
		fmt.Fprintf(v.c.errw, "heroctl: %s\n", u.Notice)
	case v.c.g.output == "json":
	case v.tty:
		v.draw(u.DAG, u.Event == nil)
	case u.Event == nil:
		fmt.Fprint(v.c.out, dagView(u.DAG))
	default:
		e := u.Event
		fmt.Fprintf(v.c.out, "%s  job %d %s%s\n", time.UnixMilli(e.TimeMs).Format("15:04:05.000"), e.JobID, strings.TrimPrefix(e.Type, "job."), detailSuffix(e.Detail))
	}
}

func (v *watchView) draw(d *hero.DAG, force bool) {
	if !force && time.Since(v.lastDraw) < 100*time.Millisecond {
		return
	}
	text := dagView(d)
	if v.drawn > 0 {
		fmt.Fprintf(v.c.out, "\033[%dA\033[J", v.drawn)
	}
	fmt.Fprint(v.c.out, text)
	v.drawn = strings.Count(text, "\n")
	v.lastDraw = time.Now()
}

// watchFlow shows a flow's jobs live until the flow ends (the Go client's WatchFlow
// follows it). Exit code 1 when the flow ends in error, 130 when interrupted.
func (c *cli) watchFlow(ctx context.Context, hc *hero.Client, flowID uint32) error {
	v := &watchView{c: c}
	if f, ok := c.out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		v.tty = true
	}
	dag, err := hc.WatchFlow(ctx, flowID, v.update)
	if ctx.Err() != nil {
		return &exitError{code: 130}
	}
	if err != nil {
		return err
	}
	switch {
	case c.g.output == "json":
		_ = c.printJSON(dag)
	case v.tty:
		v.draw(dag, true)
	default:
		fmt.Fprint(c.out, dagView(dag))
	}
	if dag.Flow.Status == model.FlowError {
		return &exitError{code: 1, msg: fmt.Sprintf("flow %d failed: %s", flowID, dag.Flow.Error)}
	}
	return nil
}

func detailSuffix(d string) string {
	if d == "" {
		return ""
	}
	return ": " + firstLine(d)
}

// bigFlow is the size from which the watch view shows counts and the jobs worth a
// look instead of every job.
const bigFlow = 40

func dagView(d *hero.DAG) string {
	var b strings.Builder
	counts := map[model.NodeStatus]int{}
	for _, n := range d.Nodes {
		counts[n.NodeStatus]++
	}
	done := counts[model.NodeCompleted] + counts[model.NodeFailed] + counts[model.NodeCancelled]
	total := len(d.Nodes)
	const width = 30
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	fmt.Fprintf(&b, "flow %d  %-9s [%s%s] %d/%d jobs done\n", d.Flow.ID, d.Flow.Status, strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total)
	show := d.Nodes
	if total > bigFlow {
		fmt.Fprintf(&b, "  %s\n", countsLine(counts))
		show = worthALook(d.Nodes)
	}
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+dagHeader)
	for _, n := range show {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%s\t%s\n", n.ID, nodeWhat(n), nodeState(n), n.JobStatus, n.Attempt, ids(n.Depends), firstLine(n.Error))
	}
	_ = tw.Flush()
	if d.Flow.Error != "" {
		fmt.Fprintf(&b, "  error: %s\n", d.Flow.Error)
	}
	return b.String()
}

func countsLine(counts map[model.NodeStatus]int) string {
	var parts []string
	for _, st := range []model.NodeStatus{model.NodePending, model.NodeReady, model.NodeDispatched, model.NodeRunning, model.NodeCompleted, model.NodeFailed, model.NodeCancelled} {
		if counts[st] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", st, counts[st]))
		}
	}
	return strings.Join(parts, ", ")
}

// worthALook are up to 20 running or failed jobs of a big flow.
func worthALook(nodes []*hero.DagNode) []*hero.DagNode {
	var show []*hero.DagNode
	for _, n := range nodes {
		if (n.NodeStatus == model.NodeRunning || n.NodeStatus == model.NodeFailed) && len(show) < 20 {
			show = append(show, n)
		}
	}
	return show
}

func eventsCommands() []command {
	return []command{{name: "events", summary: "Read the context's events (of one flow with --flow); -f follows them.",
		example: "heroctl events --flow 3 -f", define: (*cli).eventsCmd}}
}

const eventsHeader = "ID\tTIME\tTYPE\tACTOR\tFLOW\tJOB\tSTATUS\tDETAIL"

func (c *cli) eventsCmd(fs *flag.FlagSet) action {
	flow := fs.Uint("flow", 0, "only this flow's events")
	after := fs.String("after", "0", "the event id to read after (0: the oldest kept)")
	follow := fs.Bool("f", false, "follow: print events as they come until interrupted")
	limit := fs.Uint("limit", 100, "at most this many (without -f)")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 {
			return wrongArgs("events")
		}
		hc, err := c.client()
		if err != nil {
			return err
		}
		if *follow {
			return c.followEvents(ctx, hc, *after, uint32(*flow))
		}
		r, err := hc.ReadEvents(ctx, *after, uint32(*limit), uint32(*flow))
		if err != nil {
			return err
		}
		return c.show(r, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, eventsHeader)
			for _, e := range r.Events {
				printEvent(w, e)
			}
		})
	}
}

// followEvents prints events as they come: a table, or one JSON object a line.
func (c *cli) followEvents(ctx context.Context, hc *hero.Client, after string, flow uint32) error {
	w := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	if c.g.output != "json" {
		fmt.Fprintln(w, eventsHeader)
	}
	err := hc.FollowEvents(ctx, after, flow, func(e hero.Event) error {
		if c.g.output == "json" {
			b, err := json.Marshal(e)
			if err == nil {
				_, err = fmt.Fprintln(c.out, string(b))
			}
			return err
		}
		printEvent(w, e)
		return w.Flush()
	})
	return quietCancel(ctx, err)
}

func printEvent(w *tabwriter.Writer, e hero.Event) {
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.ID, time.UnixMilli(e.TimeMs).UTC().Format("15:04:05.000"), e.Type, e.Actor, e.FlowID, e.JobID, dash(e.Status), dash(e.Detail))
}
