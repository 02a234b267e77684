package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// flowFile is the YAML of `heroctl flow submit` (examples/*.yaml).
type flowFile struct {
	Name string            `yaml:"name"`
	ID   uint32            `yaml:"id"`
	Env  map[string]string `yaml:"env"`
	Jobs []flowFileJob     `yaml:"jobs"`
}

type flowFileJob struct {
	Name     string            `yaml:"name"`
	Type     string            `yaml:"type"`
	Script   string            `yaml:"script"`
	File     string            `yaml:"file"`
	Function string            `yaml:"function"` // a handler job: executor#handler
	Args     []any             `yaml:"args"`
	Kwargs   map[string]any    `yaml:"kwargs"`
	Depends  []string          `yaml:"depends"`
	Env      map[string]string `yaml:"env"`
	Timeout  uint32            `yaml:"timeout"`
	Retries  uint8             `yaml:"retries"`
	Runner   uint32            `yaml:"runner"`
}

// loadFlowFile reads and checks a flow file; jobs come back in an order where every
// job follows its dependencies.
func loadFlowFile(path string) (*flowFile, []int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var f flowFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(f.Jobs) == 0 {
		return nil, nil, fmt.Errorf("%s: no jobs", path)
	}
	byName := map[string]int{}
	for i := range f.Jobs {
		j := &f.Jobs[i]
		if j.Name == "" {
			return nil, nil, fmt.Errorf("%s: job %d has no name", path, i+1)
		}
		if _, dup := byName[j.Name]; dup {
			return nil, nil, fmt.Errorf("%s: job name %q used twice", path, j.Name)
		}
		byName[j.Name] = i
		if j.Function != "" {
			if j.Script != "" || j.File != "" {
				return nil, nil, fmt.Errorf("%s: job %q: a handler job (function) has no script or file", path, j.Name)
			}
			continue
		}
		if len(j.Args) > 0 || len(j.Kwargs) > 0 {
			return nil, nil, fmt.Errorf("%s: job %q: args and kwargs belong to a handler job (function)", path, j.Name)
		}
		if j.Type == "" {
			return nil, nil, fmt.Errorf("%s: job %q has no type", path, j.Name)
		}
		if (j.Script == "") == (j.File == "") {
			return nil, nil, fmt.Errorf("%s: job %q needs exactly one of script and file", path, j.Name)
		}
		if j.File != "" {
			p := j.File
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(path), p)
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: job %q: %v", path, j.Name, err)
			}
			j.Script = string(src)
		}
	}
	for _, j := range f.Jobs {
		for _, d := range j.Depends {
			if _, ok := byName[d]; !ok {
				return nil, nil, fmt.Errorf("%s: job %q depends on %q, which is not a job of this flow", path, j.Name, d)
			}
		}
	}
	// Topological order (Kahn), stable by file order; a cycle is an error.
	indeg := make([]int, len(f.Jobs))
	for i, j := range f.Jobs {
		indeg[i] = len(j.Depends)
	}
	var order []int
	done := make([]bool, len(f.Jobs))
	for len(order) < len(f.Jobs) {
		progress := false
		for i, j := range f.Jobs {
			if done[i] {
				continue
			}
			ready := true
			for _, d := range j.Depends {
				if !done[byName[d]] {
					ready = false
				}
			}
			if ready {
				done[i], progress = true, true
				order = append(order, i)
			}
		}
		if !progress {
			var left []string
			for i, j := range f.Jobs {
				if !done[i] {
					left = append(left, j.Name)
				}
			}
			return nil, nil, fmt.Errorf("%s: dependency cycle among jobs %s", path, strings.Join(left, ", "))
		}
	}
	return &f, order, nil
}

func (c *cli) flowCmd(ctx context.Context, verb string, args []string) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	switch verb {
	case "submit":
		fs := subFlags("flow submit")
		watch := fs.Bool("watch", false, "")
		pos, err := parseSub(fs, args)
		if err != nil || len(pos) != 1 {
			return usageErr("flow submit FILE.yaml [--watch]")
		}
		f, order, err := loadFlowFile(pos[0])
		if err != nil {
			return err
		}
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		idOf := map[string]uint32{}
		var jobIDs []uint32
		for _, i := range order {
			fj := f.Jobs[i]
			var deps []uint32
			for _, d := range fj.Depends {
				deps = append(deps, idOf[d])
			}
			job := &herov1.Job{
				ContextId: c.g.context, Script: fj.Script, ScriptType: fj.Type, Timeout: fj.Timeout, Retries: uint32(fj.Retries),
				EnvVars: fj.Env, Dependends: deps, RunnerId: fj.Runner, FunctionName: fj.Function,
			}
			if fj.Args != nil {
				b, err := json.Marshal(fj.Args)
				if err != nil {
					return fmt.Errorf("job %q: args: %v", fj.Name, err)
				}
				job.Args = string(b)
			}
			if fj.Kwargs != nil {
				b, err := json.Marshal(fj.Kwargs)
				if err != nil {
					return fmt.Errorf("job %q: kwargs: %v", fj.Name, err)
				}
				job.Kwargs = string(b)
			}
			r, err := api.CreateJob(cctx, &herov1.CreateJobRequest{ContextId: c.g.context, Job: job})
			if err != nil {
				return fmt.Errorf("create job %q: %s", fj.Name, describe(err))
			}
			idOf[fj.Name] = r.Job.Id
			jobIDs = append(jobIDs, r.Job.Id)
		}
		fr, err := api.CreateFlow(cctx, &herov1.CreateFlowRequest{ContextId: c.g.context, Flow: &herov1.Flow{Id: f.ID, ContextId: c.g.context, Jobs: jobIDs, EnvVars: f.Env}})
		if err != nil {
			return fmt.Errorf("create flow: %s", describe(err))
		}
		sr, err := api.StartFlow(cctx, &herov1.StartFlowRequest{ContextId: c.g.context, Id: fr.Flow.Id})
		if err != nil {
			return fmt.Errorf("start flow %d: %s", fr.Flow.Id, describe(err))
		}
		if c.g.output == "json" && !*watch {
			return c.show(sr.Flow, nil)
		}
		names := make([]string, 0, len(idOf))
		for n := range idOf {
			names = append(names, n)
		}
		sort.Slice(names, func(a, b int) bool { return idOf[names[a]] < idOf[names[b]] })
		fmt.Fprintf(c.out, "flow %d started in context %d (", sr.Flow.Id, c.g.context)
		for i, n := range names {
			if i > 0 {
				fmt.Fprint(c.out, ", ")
			}
			fmt.Fprintf(c.out, "%s=job %d", n, idOf[n])
		}
		fmt.Fprintf(c.out, ")\nwatch it: heroctl flow watch %d\n", sr.Flow.Id)
		if *watch {
			return c.watchFlow(ctx, api, sr.Flow.Id)
		}
		return nil
	case "create":
		fs := subFlags("flow create")
		id := fs.Uint("id", 0, "")
		jobs := fs.String("jobs", "", "")
		var env multiFlag
		fs.Var(&env, "env", "")
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		list, err := parseIDList("--jobs", *jobs)
		if err != nil || len(list) == 0 {
			return usageErr("flow create --jobs 1,2,3 [--id N] [--env K=V]")
		}
		envs, err := parseEnv(env)
		if err != nil {
			return err
		}
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		r, err := api.CreateFlow(cctx, &herov1.CreateFlowRequest{ContextId: c.g.context, Flow: &herov1.Flow{Id: uint32(*id), Jobs: list, EnvVars: envs}})
		if err != nil {
			return err
		}
		return c.show(r.Flow, func(w *tabwriter.Writer) { printFlow(w, r.Flow) })
	case "cancel", "delete", "retry":
		fs := subFlags("flow " + verb)
		force := fs.Bool("force", false, "")
		pos, err := parseSub(fs, args)
		if err != nil || len(pos) != 1 {
			return usageErr("flow %s ID", verb)
		}
		id, err := parseID("flow id", pos[0])
		if err != nil {
			return err
		}
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		if verb == "delete" {
			if _, err := api.DeleteFlow(cctx, &herov1.DeleteFlowRequest{ContextId: c.g.context, Id: id, Force: *force}); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "flow %d deleted\n", id)
			return nil
		}
		if verb == "retry" {
			r, err := api.RetryFlow(cctx, &herov1.RetryFlowRequest{ContextId: c.g.context, Id: id})
			if err != nil {
				return err
			}
			return c.show(r.Flow, func(w *tabwriter.Writer) { printFlow(w, r.Flow) })
		}
		r, err := api.CancelFlow(cctx, &herov1.CancelFlowRequest{ContextId: c.g.context, Id: id})
		if err != nil {
			return err
		}
		return c.show(r.Flow, func(w *tabwriter.Writer) { printFlow(w, r.Flow) })
	case "wait":
		fs := subFlags("flow wait")
		wait := fs.Uint("wait", 0, "")
		pos, err := parseSub(fs, args)
		if err != nil || len(pos) != 1 {
			return usageErr("flow wait ID [--wait S]")
		}
		id, err := parseID("flow id", pos[0])
		if err != nil {
			return err
		}
		waitFor := 5 * time.Minute // the server's default
		if *wait > 0 {
			waitFor = time.Duration(*wait) * time.Second
		}
		cctx, cancel := context.WithTimeout(ctx, waitFor+30*time.Second)
		defer cancel()
		r, err := api.WaitFlow(cctx, &herov1.WaitFlowRequest{ContextId: c.g.context, Id: id, Timeout: uint32(*wait)})
		if err != nil {
			return err
		}
		if err := c.show(r.Flow, func(w *tabwriter.Writer) { printFlow(w, r.Flow) }); err != nil {
			return err
		}
		if r.Flow.Status == "error" {
			return &exitError{code: 1, msg: fmt.Sprintf("flow %d failed: %s", id, r.Flow.Error)}
		}
		return nil
	case "start", "get", "dag", "watch":
		pos, err := parseSub(subFlags("flow "+verb), args)
		if err != nil || len(pos) != 1 {
			return usageErr("flow %s ID", verb)
		}
		id, err := parseID("flow id", pos[0])
		if err != nil {
			return err
		}
		if verb == "watch" {
			return c.watchFlow(ctx, api, id)
		}
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		switch verb {
		case "start":
			r, err := api.StartFlow(cctx, &herov1.StartFlowRequest{ContextId: c.g.context, Id: id})
			if err != nil {
				return err
			}
			return c.show(r.Flow, func(w *tabwriter.Writer) { printFlow(w, r.Flow) })
		case "get":
			r, err := api.GetFlow(cctx, &herov1.GetFlowRequest{ContextId: c.g.context, Id: id})
			if err != nil {
				return err
			}
			return c.show(r.Flow, func(w *tabwriter.Writer) { printFlow(w, r.Flow) })
		default:
			r, err := api.GetFlowDag(cctx, &herov1.GetFlowDagRequest{ContextId: c.g.context, Id: id})
			if err != nil {
				return err
			}
			return c.show(r, func(w *tabwriter.Writer) { printDAG(w, r) })
		}
	case "list":
		fs := subFlags("flow list")
		st := fs.String("status", "", "")
		limit := fs.Uint("limit", 100, "")
		cursor := fs.String("cursor", "", "")
		if _, err := parseSub(fs, args); err != nil {
			return err
		}
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		r, err := api.ListFlows(cctx, &herov1.ListFlowsRequest{ContextId: c.g.context, Status: *st, Limit: uint32(*limit), Cursor: *cursor})
		if err != nil {
			return err
		}
		return c.show(r, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "ID\tCALLER\tJOBS\tSTATUS\tCREATED\tERROR")
			for _, f := range r.Flows {
				fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%s\t%s\n", f.Id, f.CallerId, len(f.Jobs), f.Status, ts(f.CreatedAt), firstLine(f.Error))
			}
			if r.NextCursor != "" {
				fmt.Fprintf(w, "(more: --cursor %s)\n", r.NextCursor)
			}
		})
	}
	return usageErr("flow submit|create|start|get|list|dag|watch|cancel|retry|delete")
}

func printFlow(w *tabwriter.Writer, f *herov1.Flow) {
	fmt.Fprintf(w, "flow\t%d (caller %d, context %d)\nstatus\t%s\njobs\t%s\n", f.Id, f.CallerId, f.ContextId, f.Status, ids(f.Jobs))
	if f.Error != "" {
		fmt.Fprintf(w, "error\t%s\n", f.Error)
	}
	fmt.Fprintf(w, "created\t%s\nstarted\t%s\nfinished\t%s\n", ts(f.CreatedAt), ts(f.StartedAt), ts(f.FinishedAt))
	kvLines(w, "env", f.EnvVars)
	kvLines(w, "result", f.Result)
}

func printDAG(w *tabwriter.Writer, r *herov1.GetFlowDagResponse) {
	fmt.Fprintf(w, "flow %d: %s\n", r.Flow.Id, r.Flow.Status)
	fmt.Fprintln(w, "JOB\tTYPE\tDEPENDS\tNODE\tJOB STATUS\tATTEMPT\tERROR")
	for _, n := range r.Nodes {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", n.Id, n.ScriptType, ids(n.Depends), n.NodeStatus, n.JobStatus, n.Attempt, firstLine(n.Error))
	}
}

// watchFlow shows a flow's jobs live until the flow ends. It loads the DAG once, then
// applies the flow's events to it (a flow of thousands of jobs costs one load, not
// one per event). On a terminal the view is redrawn in place (at most every 100 ms);
// otherwise each event is one line. After a disconnect it resumes from the last event
// id. Exit code 1 when the flow ends in error.
func (c *cli) watchFlow(ctx context.Context, api herov1.CoordinatorClient, flowID uint32) error {
	tty := false
	if f, ok := c.out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		tty = true
	}
	var dag *herov1.GetFlowDagResponse
	byID := map[uint32]*herov1.DagNode{}
	load := func() error {
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		d, err := api.GetFlowDag(cctx, &herov1.GetFlowDagRequest{ContextId: c.g.context, Id: flowID})
		if err != nil {
			return err
		}
		dag = d
		byID = map[uint32]*herov1.DagNode{}
		for _, n := range d.Nodes {
			byID[n.Id] = n
		}
		return nil
	}
	drawn := 0
	var lastDraw time.Time
	draw := func(force bool) {
		if c.g.output == "json" || !tty || (!force && time.Since(lastDraw) < 100*time.Millisecond) {
			return
		}
		text := dagView(dag)
		if drawn > 0 {
			fmt.Fprintf(c.out, "\033[%dA\033[J", drawn)
		}
		fmt.Fprint(c.out, text)
		drawn = strings.Count(text, "\n")
		lastDraw = time.Now()
	}
	ended := func() bool { return dag.Flow.Status == "finished" || dag.Flow.Status == "error" }
	finish := func() error {
		switch {
		case c.g.output == "json":
			_ = c.show(dag, nil)
		case tty:
			draw(true)
		default:
			fmt.Fprint(c.out, dagView(dag))
		}
		if dag.Flow.Status == "error" {
			return &exitError{code: 1, msg: fmt.Sprintf("flow %d failed: %s", flowID, dag.Flow.Error)}
		}
		return nil
	}
	// Take the stream's position first, then the state, then follow from the position:
	// a change between the two is delivered as an event, never lost.
	pctx, pcancel := c.callCtx(ctx)
	pos, err := api.ReadEvents(pctx, &herov1.ReadEventsRequest{ContextId: c.g.context, AfterId: "$"})
	pcancel()
	if err != nil {
		return err
	}
	lastID := pos.NextAfterId
	backoff := 200 * time.Millisecond
	for {
		wctx, cancel := context.WithCancel(ctx)
		stream, err := api.Watch(wctx, &herov1.WatchRequest{ContextId: c.g.context, AfterId: lastID, FlowId: flowID})
		if err == nil && dag == nil {
			// The stream is open: take the state once; every later change is an event.
			if err = load(); err == nil {
				if ended() {
					cancel()
					return finish()
				}
				if !tty && c.g.output != "json" {
					fmt.Fprint(c.out, dagView(dag))
				}
				draw(true)
			}
		}
		for err == nil {
			var ev *herov1.WatchResponse
			if ev, err = stream.Recv(); err != nil {
				break
			}
			lastID = ev.Event.Id
			if strings.HasPrefix(ev.Event.Type, "flow.") {
				if ev.Event.Type == "flow.finished" || ev.Event.Type == "flow.error" {
					if err = load(); err == nil {
						cancel()
						return finish()
					}
					break
				}
				continue
			}
			applyEvent(byID, ev.Event)
			if !tty && c.g.output != "json" {
				fmt.Fprintf(c.out, "%s  job %d %s%s\n", time.UnixMilli(ev.Event.TimeMs).Format("15:04:05.000"), ev.Event.JobId,
					strings.TrimPrefix(ev.Event.Type, "job."), detailSuffix(ev.Event.Detail))
			}
			draw(false)
		}
		cancel()
		if ctx.Err() != nil {
			return &exitError{code: 130}
		}
		if status.Code(err) == codes.OutOfRange {
			// Our position was trimmed from the stream while we were away: take a fresh
			// position, then reload the state (as at the start).
			fmt.Fprintf(c.errw, "heroctl: events after %q were trimmed; reloading the flow\n", lastID)
			pctx, pcancel := c.callCtx(ctx)
			pos, perr := api.ReadEvents(pctx, &herov1.ReadEventsRequest{ContextId: c.g.context, AfterId: "$"})
			pcancel()
			if perr != nil {
				return perr
			}
			lastID, dag = pos.NextAfterId, nil
			continue
		}
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unavailable && st.Code() != codes.Canceled && st.Code() != codes.Internal {
			return err
		}
		fmt.Fprintf(c.errw, "heroctl: watch interrupted (%s); resuming after event %q\n", describe(err), lastID)
		select {
		case <-ctx.Done():
			return &exitError{code: 130}
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func detailSuffix(d string) string {
	if d == "" {
		return ""
	}
	return ": " + firstLine(d)
}

// applyEvent moves a node's shown state as a job event says.
func applyEvent(nodes map[uint32]*herov1.DagNode, e *herov1.Event) {
	n := nodes[e.JobId]
	if n == nil {
		return
	}
	switch e.Type {
	case "job.dispatched":
		n.NodeStatus, n.JobStatus = "dispatched", "dispatched"
		n.Attempt++
	case "job.started":
		n.NodeStatus, n.JobStatus = "running", "started"
	case "job.finished":
		n.NodeStatus, n.JobStatus, n.Error = "completed", "finished", ""
	case "job.failed":
		n.NodeStatus, n.JobStatus, n.Error = "failed", "error", e.Detail
	case "job.retried":
		n.NodeStatus, n.JobStatus = "ready", "error"
	case "job.cancelled":
		n.NodeStatus, n.JobStatus, n.Error = "cancelled", "error", e.Detail
	}
}

func dagView(d *herov1.GetFlowDagResponse) string {
	var b strings.Builder
	counts := map[string]int{}
	for _, n := range d.Nodes {
		counts[n.NodeStatus]++
	}
	done := counts["completed"] + counts["failed"] + counts["cancelled"]
	total := len(d.Nodes)
	width := 30
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	fmt.Fprintf(&b, "flow %d  %-9s [%s%s] %d/%d jobs done\n", d.Flow.Id, d.Flow.Status, strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total)
	show := d.Nodes
	if total > 40 {
		// A big flow: the counts, then the jobs worth a look (running, failed).
		var parts []string
		for _, st := range []string{"pending", "ready", "dispatched", "running", "completed", "failed", "cancelled"} {
			if counts[st] > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", st, counts[st]))
			}
		}
		fmt.Fprintf(&b, "  %s\n", strings.Join(parts, ", "))
		show = nil
		for _, n := range d.Nodes {
			if (n.NodeStatus == "running" || n.NodeStatus == "failed") && len(show) < 20 {
				show = append(show, n)
			}
		}
	}
	for _, n := range show {
		line := fmt.Sprintf("  job %-6d %-10s %-10s %-26s", n.Id, n.ScriptType, n.NodeStatus, n.JobStatus)
		if n.Attempt > 1 {
			line += fmt.Sprintf(" attempt %d", n.Attempt)
		}
		if n.Error != "" {
			line += "  " + firstLine(n.Error)
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	if d.Flow.Error != "" {
		fmt.Fprintf(&b, "  error: %s\n", d.Flow.Error)
	}
	return b.String()
}

func (c *cli) eventsCmd(ctx context.Context, args []string) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	fs := subFlags("events")
	flow := fs.Uint("flow", 0, "")
	after := fs.String("after", "0", "")
	follow := fs.Bool("f", false, "")
	limit := fs.Uint("limit", 100, "")
	if _, err := parseSub(fs, args); err != nil {
		return err
	}
	w := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	print := func(e *herov1.Event) {
		if c.g.output == "json" {
			_ = c.show(e, nil)
			return
		}
		fmt.Fprintf(w, "%s\t%s\t%s\tactor %s\tflow %d\tjob %d\t%s\t%s\n", e.Id, time.UnixMilli(e.TimeMs).UTC().Format("15:04:05.000"), e.Type, e.Actor, e.FlowId, e.JobId, e.Status, e.Detail)
	}
	if !*follow {
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		r, err := api.ReadEvents(cctx, &herov1.ReadEventsRequest{ContextId: c.g.context, AfterId: *after, Limit: uint32(*limit), FlowId: uint32(*flow)})
		if err != nil {
			return err
		}
		for _, e := range r.Events {
			print(e)
		}
		return w.Flush()
	}
	stream, err := api.Watch(ctx, &herov1.WatchRequest{ContextId: c.g.context, AfterId: *after, FlowId: uint32(*flow)})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		print(ev.Event)
		_ = w.Flush()
	}
}
