package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// The DAG state of a started flow lives in the hash coord:dag:<flow>:
//
//	caller, total, terminal, failed   the flow's caller and node counters
//	s:<id>   node status (seed 003's NodeStatus)
//	r:<id>   dependencies not yet completed (absent: none; removed once the node is ready)
//	rel:<id> dependents of a completed node left to release ("<done> <end ms>")
//	starting a large flow's start in chunks under way (its token)
//	a:<id>   attempts dispatched so far (gone once the node completed: its job's attempt)
//	p:<id>   the node's dependencies (JSON list): written by earlier versions only; a
//	         node's dependencies are its job's dependends (LoadDAG, SweepDAG read them)
//	d:<id>   the node's dependents (JSON list); a completed node's are moved to its
//	         job's field dependents (but while release_dependents has some to release)
//	e:<id>   why the node failed or was cancelled
//	due:<id> when a retry is due (ms), while the node waits for it
//
// Every change is one Lua script, so a node's state, its job's status, the flow's
// status, the results and the event stream never disagree, and reporting the same end
// of a job twice changes nothing the second time.

// DAGNode is one node of a started flow.
type DAGNode struct {
	ID         uint32
	Status     model.NodeStatus
	Depends    []uint32
	Dependents []uint32
	Remaining  int
	Attempt    uint32
	Error      string
	DueMs      int64
}

// DAG is the state of a started flow.
type DAG struct {
	FlowID   uint32
	CallerID uint32
	Total    int
	Terminal int
	Failed   int
	Nodes    map[uint32]*DAGNode
}

// Ids returns the node ids in ascending order.
func (d *DAG) IDs() []uint32 {
	out := make([]uint32, 0, len(d.Nodes))
	for id := range d.Nodes {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// LoadDAG reads a flow's DAG state; ErrNotFound when the flow was never started.
func (d *DB) LoadDAG(ctx context.Context, flowID uint32) (*DAG, error) {
	h, err := d.HGetAll(ctx, keys.DAG(flowID))
	if err != nil {
		return nil, fmt.Errorf("load dag of flow %d: %w", flowID, err)
	}
	if len(h) == 0 {
		return nil, notFound("dag of flow %d (not started)", flowID)
	}
	g := dagOfHash(flowID, h)
	// A node of the started flow with no field left is completed: its completion
	// removed them (lua/lib_complete.lua); the flow's job list names it. So is one
	// with no status (s:) but a field its completion did not remove (an r: of 0 a
	// retry wrote before it removed it: LoadDAGNodes reads it so too).
	if h["starting"] == "" {
		for _, n := range g.Nodes {
			if n.Status == "" {
				n.Status = model.NodeCompleted
			}
		}
		if err := d.addCompletedNodes(ctx, flowID, g); err != nil {
			return nil, fmt.Errorf("load dag of flow %d: %w", flowID, err)
		}
	}
	// A node's dependencies are its job's (p: in a DAG of an earlier version): read for
	// the nodes not ended, the ones whose dependencies decide something (a ready node
	// never dispatched is a start's only when it has none).
	var unread []*DAGNode
	for _, n := range g.Nodes {
		if n.Depends == nil && !n.Status.Terminal() {
			unread = append(unread, n)
		}
	}
	if err := d.readDepends(ctx, g.CallerID, unread); err != nil {
		return nil, fmt.Errorf("load dag of flow %d: %w", flowID, err)
	}
	// A completed node's attempt and dependents are its job's (a completed node was
	// dispatched: an attempt of 0 is one its completion moved; lib_complete.lua).
	var moved []*DAGNode
	for _, n := range g.Nodes {
		if n.Status == model.NodeCompleted && n.Attempt == 0 {
			moved = append(moved, n)
		}
	}
	if err := d.readMovedNodes(ctx, g.CallerID, moved); err != nil {
		return nil, fmt.Errorf("load dag of flow %d: %w", flowID, err)
	}
	// The start leaves empty lists out of the hash (lua/start_flow.lua).
	for _, n := range g.Nodes {
		if n.Depends == nil {
			n.Depends = []uint32{}
		}
		if n.Dependents == nil {
			n.Dependents = []uint32{}
		}
	}
	return g, nil
}

// dagOfHash is the DAG state a flow's DAG hash h holds: its counters and the nodes its
// fields name (the reads after LoadDAG's fill in what they leave out).
func dagOfHash(flowID uint32, h map[string]string) *DAG {
	g := &DAG{FlowID: flowID, Nodes: map[uint32]*DAGNode{}}
	g.CallerID = parseU32(h["caller"])
	g.Total, _ = strconv.Atoi(h["total"])
	g.Terminal, _ = strconv.Atoi(h["terminal"])
	g.Failed, _ = strconv.Atoi(h["failed"])
	node := func(id uint32) *DAGNode {
		n, ok := g.Nodes[id]
		if !ok {
			n = &DAGNode{ID: id}
			g.Nodes[id] = n
		}
		return n
	}
	for k, v := range h {
		prefix, idStr, ok := strings.Cut(k, ":")
		if !ok {
			continue
		}
		id64, err := strconv.ParseUint(idStr, 10, 32)
		if err != nil {
			continue
		}
		n := node(uint32(id64))
		switch prefix {
		case "s":
			n.Status = model.NodeStatus(v)
		case "r":
			n.Remaining, _ = strconv.Atoi(v)
		case "a":
			n.Attempt = parseU32(v)
		case "p":
			_ = json.Unmarshal([]byte(v), &n.Depends)
		case "d":
			_ = json.Unmarshal([]byte(v), &n.Dependents)
		case "e":
			n.Error = v
		case "due":
			n.DueMs, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return g
}

// addCompletedNodes adds to g, completed, the jobs of the flow that have no node in it
// (a completed node leaves the DAG hash: lua/lib_complete.lua).
func (d *DB) addCompletedNodes(ctx context.Context, flowID uint32, g *DAG) error {
	v, err := d.hmget(ctx, keys.Flow(flowID), "jobs")
	if err != nil {
		return err
	}
	var jobs []uint32
	if s, ok := v[0].(string); ok && s != "" {
		if err := json.Unmarshal([]byte(s), &jobs); err != nil {
			return fmt.Errorf("flow %d's jobs: %w", flowID, err)
		}
	}
	for _, id := range jobs {
		if _, ok := g.Nodes[id]; !ok {
			g.Nodes[id] = &DAGNode{ID: id, Status: model.NodeCompleted}
		}
	}
	return nil
}

// readDepends sets the dependencies of nodes (of a flow of caller) from their jobs'
// dependends, in one round trip; a job gone or whose list does not read leaves its
// node's empty.
func (d *DB) readDepends(ctx context.Context, caller uint32, nodes []*DAGNode) error {
	if len(nodes) == 0 {
		return nil
	}
	cmds := make([]*redis.StringCmd, len(nodes))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range nodes {
			cmds[i] = p.HGet(ctx, keys.Job(caller, n.ID), "dependends")
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, n := range nodes {
		n.Depends = []uint32{}
		if v := cmds[i].Val(); v != "" {
			_ = json.Unmarshal([]byte(v), &n.Depends)
		}
	}
	return nil
}

// PlanError is a DAG that cannot run, with the reason.
type PlanError struct{ Msg string }

func (e *PlanError) Error() string { return e.Msg }

// PlanDAG checks a flow's jobs form a DAG that can run: every dependency is a job of
// the flow, there is no cycle, every job is of the flow's context and caller and runs
// a script of a known type or calls a handler of a named executor. It returns the
// nodes' dependents.
func PlanDAG(f *model.Flow, jobs []*model.Job) (map[uint32][]uint32, error) {
	if len(jobs) == 0 {
		return nil, &PlanError{fmt.Sprintf("flow %d has no jobs", f.ID)}
	}
	in := map[uint32]*model.Job{}
	for _, j := range jobs {
		in[j.ID] = j
	}
	dependents := map[uint32][]uint32{}
	for _, j := range jobs {
		if j.ContextID != 0 && j.ContextID != f.ContextID {
			return nil, &PlanError{fmt.Sprintf("job %d belongs to context %d, not the flow's context %d", j.ID, j.ContextID, f.ContextID)}
		}
		if j.CallerID != f.CallerID {
			return nil, &PlanError{fmt.Sprintf("job %d belongs to caller %d, not the flow's caller %d", j.ID, j.CallerID, f.CallerID)}
		}
		if exec, _ := j.Handler(); exec == "" && !j.ScriptType.Valid() {
			// A handler job that names its executor ("executor#handler") needs no
			// script_type: its executor routes it, as job.run's.
			return nil, &PlanError{fmt.Sprintf("job %d: script_type %q is not a known script type (and the job names no executor#handler)", j.ID, j.ScriptType)}
		}
		for _, dep := range j.Dependends {
			if _, ok := in[dep]; !ok {
				return nil, &PlanError{fmt.Sprintf("job %d depends on job %d, which is not in flow %d", j.ID, dep, f.ID)}
			}
			if dep == j.ID {
				return nil, &PlanError{fmt.Sprintf("job %d depends on itself", j.ID)}
			}
			dependents[dep] = append(dependents[dep], j.ID)
		}
	}
	if cyc := findCycle(jobs, in); cyc != nil {
		parts := make([]string, len(cyc))
		for i, id := range cyc {
			parts[i] = strconv.FormatUint(uint64(id), 10)
		}
		return nil, &PlanError{fmt.Sprintf("flow %d has a dependency cycle: %s", f.ID, strings.Join(parts, " → "))}
	}
	for k := range dependents {
		sort.Slice(dependents[k], func(i, j int) bool { return dependents[k][i] < dependents[k][j] })
	}
	return dependents, nil
}

// findCycle returns one cycle (a → b → … → a, meaning a depends on b …) or nil.
func findCycle(jobs []*model.Job, in map[uint32]*model.Job) []uint32 {
	const (
		white = 0
		grey  = 1
		black = 2
	)
	color := map[uint32]int{}
	var stack []uint32
	var found []uint32
	var visit func(id uint32) bool
	visit = func(id uint32) bool {
		color[id] = grey
		stack = append(stack, id)
		deps := append([]uint32(nil), in[id].Dependends...)
		sort.Slice(deps, func(i, j int) bool { return deps[i] < deps[j] })
		for _, d := range deps {
			switch color[d] {
			case grey:
				for i, s := range stack {
					if s == d {
						found = append(append([]uint32(nil), stack[i:]...), d)
						return true
					}
				}
			case white:
				if visit(d) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[id] = black
		return false
	}
	ids := make([]uint32, 0, len(jobs))
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if color[id] == white && visit(id) {
			return found
		}
	}
	return nil
}

func jsonIDs(ids []uint32) string {
	if len(ids) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(ids)
	return string(b)
}

// StartFlow writes the DAG state of a planned flow and marks it started. It returns
// the ids of the nodes ready to dispatch, whose jobs it leaves as they are: their
// dispatch (DispatchStarted) marks them. A flow that is not in status dispatched is
// not touched; its status is returned with started=false.
//
// A flow of more than startChunk jobs is started in chunks (startFlowChunked): no
// call holds Redis for the whole flow.
func (d *DB) StartFlow(ctx context.Context, f *model.Flow, jobs []*model.Job, dependents map[uint32][]uint32, actor string) (ready []uint32, status string, started bool, err error) {
	ready, _, status, started, err = d.startFlow(ctx, f, jobs, dependents, actor, false)
	return ready, status, started, err
}

// StartFlowDispatch is StartFlow that also dispatches the ready nodes whose jobs name
// no runner in the start's own script call, in one request message (start_flow.lua,
// lib_start's dispatch_ready), for a flow of at most startChunk jobs: no second call,
// and the DAG written once for them. It returns the ready nodes left to the caller's
// dispatch (DispatchStarted: a larger flow's, and jobs pinned to a runner) and how
// many it dispatched.
func (d *DB) StartFlowDispatch(ctx context.Context, f *model.Flow, jobs []*model.Job, dependents map[uint32][]uint32, actor string) (ready []uint32, dispatched int, status string, started bool, err error) {
	return d.startFlow(ctx, f, jobs, dependents, actor, true)
}

func (d *DB) startFlow(ctx context.Context, f *model.Flow, jobs []*model.Job, dependents map[uint32][]uint32, actor string, dispatch bool) (ready []uint32, dispatched int, status string, started bool, err error) {
	if len(jobs) > startChunk {
		ready, status, started, err = d.startFlowChunked(ctx, f, jobs, dependents, actor)
		return ready, 0, status, started, err
	}
	now := time.Now()
	a := &startFlowArgs{FlowKey: keys.Flow(f.ID), DagKey: keys.DAG(f.ID), ResultsKey: keys.FlowResults(f.ID), EventsKey: keys.Events, MsgOutKey: keys.MsgOut,
		Ctx: int64(d.ContextID), Flow: int64(f.ID), Caller: int64(f.CallerID), NowS: now.Unix(), NowMs: now.UnixMilli(), Actor: actor,
		Nodes: make([]startFlowNode, len(jobs))}
	for i, j := range jobs {
		here := dispatch && j.RunnerID == 0 && len(j.Dependends) == 0
		a.Nodes[i] = startFlowNode{ID: int64(j.ID), Dependents: jsonIDs(dependents[j.ID]), N: int64(len(j.Dependends)), Ran: ranBefore(j), Here: here}
		if here && a.Group == nil {
			a.Group = groupFields(d.ContextID, f.ID, f.CallerID, now, 0)
		}
	}
	res, err := a.run(ctx, d)
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOTFOUND") {
			return nil, 0, "", false, notFound("flow %d in context %d", f.ID, d.ContextID)
		}
		return nil, 0, "", false, fmt.Errorf("start flow %d: %w", f.ID, err)
	}
	vals := res.([]any)
	if n, _ := vals[0].(int64); n == 0 {
		st, _ := vals[1].(string)
		return nil, 0, st, false, nil
	}
	if len(vals) < 2 {
		return nil, 0, "", false, fmt.Errorf("start flow %d: unexpected reply %v", f.ID, vals)
	}
	n, _ := vals[1].(int64)
	return parseIDs(vals[2:]), int(n), string(model.FlowStarted), true, nil
}

// ranBefore says whether a job (as loaded: whole, or by LoadStartJobs, which reads the
// fields that every run or end writes) holds fields of an earlier run, which a start
// clears. Skipping the clearing for fresh jobs spares Redis a dozen field scans per node.
func ranBefore(j *model.Job) bool {
	return j.Error != "" || j.ExitCode != 0 || j.Worker != "" || j.StartedAt != 0 || j.FinishedAt != 0 ||
		j.StartedAtMs != 0 || j.FinishedAtMs != 0 || j.StartedAtUs != 0 || j.FinishedAtUs != 0 || j.DispatchedMs != 0 || j.Attempt != 0 || j.StopAsked || j.Fatal
}

// u32s converts the ids of a script's decoded reply.
func u32s(ids []int64) []uint32 {
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

func parseIDs(vals []any) []uint32 {
	out := make([]uint32, 0, len(vals))
	for _, v := range vals {
		switch x := v.(type) {
		case string:
			out = append(out, parseU32(x))
		case int64:
			out = append(out, uint32(x))
		}
	}
	return out
}

// listSep is what goes before the next item of a JSON list being built: its opening
// bracket, then commas.
func listSep(b []byte) byte {
	if len(b) == 0 {
		return '['
	}
	return ','
}

// Dispatched is what Dispatch did with one job.
type Dispatched struct {
	JobID   uint32
	MsgKey  string // "" when not dispatched
	Attempt uint32
	Why     string // why not (e.g. the node was not ready)
}

// requestFields are the field/value pairs of a job request message (without its id):
// its job list names the job (jobRef), and the nodes are left to LoadMessageKey.
func requestFields(ctxID, flowID uint32, j *model.Job, now time.Time, msgTimeout uint32) []any {
	m := requestMessage(ctxID, flowID, now, msgTimeout)
	m.CallerID, m.Message = j.CallerID, "job "+model.JobRef{ContextID: ctxID, CallerID: j.CallerID, ID: j.ID}.String()
	ref := append(append([]byte{'['}, requestRef(j)...), ']')
	return append(localMessageFields(&m), "job", ref, fieldJobRef, "1")
}

// requestMessage is a job request message of context ctxID (of flow flowID, 0: a
// standalone job's) made at now, without its caller, text and job list.
func requestMessage(ctxID, flowID uint32, now time.Time, msgTimeout uint32) model.Message {
	return model.Message{
		ContextID: ctxID, MessageType: model.MessageTypeJob, MessageFormatType: model.FormatText, Timeout: msgTimeout, Status: model.MessageDispatched,
		CreatedAt: now.Unix(), UpdatedAt: now.Unix(), CreatedAtMs: now.UnixMilli(), FlowID: flowID, Kind: model.KindJobRequest,
	}
}

// groupFields are the field/value pairs of a job request message for several jobs of a
// flow, without its id and job_ids (the dispatch script writes those; its job list is
// made from job_ids when it is read, MessageFromHash, and its nodes by
// LoadMessageKey).
func groupFields(ctxID, flowID, callerID uint32, now time.Time, msgTimeout uint32) []any {
	m := model.Message{
		CallerID: callerID, ContextID: ctxID, MessageType: model.MessageTypeJob, MessageFormatType: model.FormatText,
		Message: fmt.Sprintf("jobs of flow %d", flowID), Timeout: msgTimeout, Status: model.MessageDispatched,
		CreatedAt: now.Unix(), UpdatedAt: now.Unix(), CreatedAtMs: now.UnixMilli(), FlowID: flowID, Kind: model.KindJobRequest,
	}
	return append(localMessageFields(&m), fieldJobRef, "1")
}

// RequestNode is the flow node of a job, as its request message lists it.
func RequestNode(j *model.Job) model.FlowNode {
	n := model.FlowNode{ID: j.ID, Depends: j.Dependends, Prerequisites: j.Prerequisites, NodeStatus: model.NodeDispatched}
	if n.Depends == nil {
		n.Depends = []uint32{}
	}
	if n.Prerequisites == nil {
		n.Prerequisites = []string{}
	}
	return n
}

// withoutFields drops the named fields from field/value pairs.
func withoutFields(fields []any, names ...string) []any {
	out := fields[:0]
	for i := 0; i+1 < len(fields); i += 2 {
		if !slices.Contains(names, fields[i].(string)) {
			out = append(out, fields[i], fields[i+1])
		}
	}
	return out
}

// DispatchMany sends ready nodes of a flow (flowID ≠ 0), all of one caller, or one
// standalone job (flowID = 0) to the router in one round trip: a Message of kind
// job_request each, on msg_out.
func (d *DB) DispatchMany(ctx context.Context, flowID, callerID uint32, jobs []*model.Job, actor string, msgTimeout uint32) ([]Dispatched, error) {
	return d.dispatchMany(ctx, flowID, callerID, jobs, actor, msgTimeout, "", "", false)
}

// DispatchStarted is DispatchMany for the nodes a flow's start found ready (StartFlow
// leaves their jobs to their dispatch): readyAt, the start's time, is their ready time.
// The jobs that name no runner, when there are several, go in one request message
// through flow_start_dispatch.lua (the DAG read and written once for them all, where
// dispatch.lua reads and writes each node on its own); the others as DispatchMany.
func (d *DB) DispatchStarted(ctx context.Context, flowID, callerID uint32, jobs []*model.Job, actor string, readyAt time.Time) ([]Dispatched, error) {
	readyMs := strconv.FormatInt(readyAt.UnixMilli(), 10)
	var grouped, own []*model.Job
	var at, ownAt []int // their places in jobs
	for i, j := range jobs {
		if j.RunnerID == 0 {
			grouped, at = append(grouped, j), append(at, i)
		} else {
			own, ownAt = append(own, j), append(ownAt, i)
		}
	}
	if flowID == 0 || len(grouped) < 2 {
		return d.dispatchMany(ctx, flowID, callerID, jobs, actor, 0, readyMs, "", false)
	}
	now := time.Now()
	a := &flowStartDispatchArgs{MsgOutKey: keys.MsgOut, DagKey: keys.DAG(flowID), Ctx: int64(d.ContextID), Flow: int64(flowID), Caller: int64(callerID),
		NowS: now.Unix(), NowMs: now.UnixMilli(), Actor: actor, ReadyMs: readyAt.UnixMilli(), Group: groupFields(d.ContextID, flowID, callerID, now, 0),
		IDs: make([]string, len(grouped))}
	for i, j := range grouped {
		a.IDs[i] = strconv.FormatUint(uint64(j.ID), 10)
	}
	res, err := a.run(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("dispatch %d job(s) of flow %d in context %d: %w", len(grouped), flowID, d.ContextID, err)
	}
	got, err := dispatchedOf(grouped, res)
	if err != nil {
		return nil, fmt.Errorf("dispatch %d job(s) of flow %d in context %d: %w", len(grouped), flowID, d.ContextID, err)
	}
	// in the order of jobs
	out := make([]Dispatched, len(jobs))
	for k, r := range got {
		out[at[k]] = r
	}
	if len(own) > 0 {
		rest, err := d.dispatchMany(ctx, flowID, callerID, own, actor, 0, readyMs, "", false)
		if err != nil {
			return nil, err
		}
		for k, r := range rest {
			out[ownAt[k]] = r
		}
	}
	return out, nil
}

// delayedKey, for standalone jobs, makes the dispatch a release of delayed jobs
// (lua/dispatch.lua; "": any other); requeue one of jobs out of the DLQ (RequeueJob).
func (d *DB) dispatchMany(ctx context.Context, flowID, callerID uint32, jobs []*model.Job, actor string, msgTimeout uint32, readyMs, delayedKey string, requeue bool) ([]Dispatched, error) {
	now := time.Now()
	// The jobs of a flow that name no runner share one message (the router routes each
	// of its jobs); a job pinned to a runner, or a job of no flow, has one of its own.
	groupable := func(j *model.Job) bool { return flowID != 0 && j.RunnerID == 0 }
	n := 0
	for _, j := range jobs {
		if groupable(j) {
			n++
		}
	}
	a := &dispatchArgs{MsgOutKey: keys.MsgOut, Ctx: int64(d.ContextID), Flow: int64(flowID), Caller: int64(callerID), NowS: now.Unix(),
		NowMs: now.UnixMilli(), Actor: actor, ReadyMs: readyMs, Requeue: requeue, Jobs: make([]dispatchJob, 0, len(jobs))}
	if flowID != 0 {
		a.DagKey = keys.DAG(flowID)
	} else if delayedKey != "" {
		a.DagKey = delayedKey // a standalone job's release (the script's dag? key)
	}
	if n > 1 {
		a.Group = groupFields(d.ContextID, flowID, callerID, now, msgTimeout)
	}
	for _, j := range jobs {
		if n > 1 && groupable(j) {
			// the group's message lists its jobs by their ids (job_ids), which the
			// script writes
			a.Jobs = append(a.Jobs, dispatchJob{ID: int64(j.ID), Grouped: true})
			continue
		}
		a.Jobs = append(a.Jobs, dispatchJob{ID: int64(j.ID), Items: requestFields(d.ContextID, flowID, j, now, msgTimeout)})
	}
	res, err := a.run(ctx, d)
	if err == nil {
		var out []Dispatched
		if out, err = dispatchedOf(jobs, res); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("dispatch %d job(s) of context %d: %w", len(jobs), d.ContextID, err)
}

// dispatchedOf reads a dispatch script's reply (lua/dispatch.lua's or
// lua/flow_start_dispatch.lua's: per job its message key and its attempt, or "" and
// why) for jobs; a reply of another length, or an attempt that is no number, is an
// error (the jobs it dispatched are then the sweeps').
func dispatchedOf[R dispatchDispatched | flowStartDispatchDispatched](jobs []*model.Job, res []R) ([]Dispatched, error) {
	if len(res) != len(jobs) {
		return nil, fmt.Errorf("a reply of %d jobs for %d", len(res), len(jobs))
	}
	out := make([]Dispatched, len(jobs))
	for i, j := range jobs {
		r := dispatchDispatched(res[i])
		out[i].JobID = j.ID
		if r.Msg == "" {
			out[i].Why = r.Attempt
			continue
		}
		a, err := strconv.ParseUint(r.Attempt, 10, 32)
		if err != nil || a == 0 {
			return nil, fmt.Errorf("job %d dispatched as %s with attempt %q", j.ID, r.Msg, r.Attempt)
		}
		out[i].MsgKey, out[i].Attempt = r.Msg, uint32(a)
	}
	return out, nil
}

// Dispatch sends one ready node (flowID ≠ 0) or a standalone job (flowID = 0) to the
// router. ok=false (with the reason) when the node was not ready.
func (d *DB) Dispatch(ctx context.Context, flowID uint32, j *model.Job, actor string, msgTimeout uint32) (msgKey string, attempt uint32, ok bool, why string, err error) {
	res, err := d.DispatchMany(ctx, flowID, j.CallerID, []*model.Job{j}, actor, msgTimeout)
	if err != nil {
		return "", 0, false, "", err
	}
	r := res[0]
	return r.MsgKey, r.Attempt, r.MsgKey != "", r.Why, nil
}

// JobEnd is a job's end as reported to the scheduler.
type JobEnd struct {
	FlowID, CallerID, JobID uint32
	Attempt                 uint32
	Status                  model.JobStatus // finished or error
	Error                   string
	Fatal                   bool          // no retry
	Retries                 int           // -1: read from the job hash
	Backoff                 time.Duration // the delay before the next attempt
	Actor                   string
	Retention               time.Duration // how long the ended flow or job is kept (0: forever)
}

// EndResult says what a job's end did.
type EndResult struct {
	Applied      bool     // false: a duplicate or stale report, nothing changed
	Ready        []uint32 // dependents now ready to dispatch
	RetryAt      time.Time
	FlowFinished bool
	FlowStatus   model.FlowStatus
	// Cancelled: the nodes a failure's cascade cancelled in this call (its transitive
	// dependents that had not run; those past CascadeChunk are CascadeFlow's)
	Cancelled int
}

// CompleteNode applies a job's end to its flow's DAG.
func (d *DB) CompleteNode(ctx context.Context, e JobEnd) (EndResult, error) {
	res, errs := d.CompleteNodes(ctx, []JobEnd{e})
	return res[0], errs[0]
}

// CompleteNodes is CompleteNode for several ends of flow jobs in one round trip: the
// ends of one flow are applied by one script, in order, each atomically with the ones
// before it.
func (d *DB) CompleteNodes(ctx context.Context, ends []JobEnd) ([]EndResult, []error) {
	now := time.Now()
	type flowKey struct{ flow, caller uint32 }
	groups := map[flowKey][]int{}
	var order []flowKey
	for i, e := range ends {
		k := flowKey{e.FlowID, e.CallerID}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	calls := make([]Call, len(order))
	for g, k := range order {
		idx := groups[k]
		first := ends[idx[0]]
		a := &completeArgs{DagKey: keys.DAG(k.flow), FlowKey: keys.Flow(k.flow), ResultsKey: keys.FlowResults(k.flow), EventsKey: keys.Events,
			Ctx: int64(d.ContextID), Flow: int64(k.flow), Caller: int64(k.caller), NowS: now.Unix(), NowMs: now.UnixMilli(),
			Actor: first.Actor, RetentionMs: first.Retention.Milliseconds(), Ends: make([]completeEnd, len(idx))}
		for n, i := range idx {
			e := ends[i]
			a.Ends[n] = completeEnd{ID: int64(e.JobID), Attempt: int64(e.Attempt), Status: string(e.Status), Err: e.Error, Fatal: e.Fatal,
				Retries: int64(e.Retries), Backoff: e.Backoff.Milliseconds()}
		}
		calls[g] = a.call()
	}
	out, errs := make([]EndResult, len(ends)), make([]error, len(ends))
	for g, cmd := range d.EvalBatch(ctx, calls) {
		idx := groups[order[g]]
		res, err := cmd.Result()
		var list []completeDone
		if err == nil {
			list, err = decodeCompleteReply(res)
		}
		if err == nil && len(list) != len(idx) {
			err = fmt.Errorf("unexpected reply %v", res)
		}
		for k, i := range idx {
			if err != nil {
				errs[i] = fmt.Errorf("complete job %d:%d:%d: %w", d.ContextID, ends[i].CallerID, ends[i].JobID, err)
				continue
			}
			r := list[k]
			out[i] = endResult(r.Code, r.Status, r.Due, r.Ready)
			out[i].Cancelled = int(r.Cancelled)
		}
	}
	return out, errs
}

// endResult is what a completion script's reply for one end says.
func endResult(code int64, status string, due int64, ready []int64) EndResult {
	r := EndResult{Applied: code != 0, Ready: u32s(ready)}
	if status != "" {
		r.FlowFinished, r.FlowStatus = true, model.FlowStatus(status)
	}
	if code == 2 {
		r.RetryAt = time.UnixMilli(due)
	}
	return r
}

// CompleteStandalone applies the end of a job that belongs to no flow.
func (d *DB) CompleteStandalone(ctx context.Context, e JobEnd) (EndResult, error) {
	res, errs := d.CompleteStandalones(ctx, []JobEnd{e})
	return res[0], errs[0]
}

// CompleteStandalones applies the ends of standalone jobs as CompleteStandalone does,
// each in its own script run, all in one round trip; each end gets its own result or
// error.
func (d *DB) CompleteStandalones(ctx context.Context, ends []JobEnd) ([]EndResult, []error) {
	now := time.Now()
	calls := make([]Call, len(ends))
	for i, e := range ends {
		calls[i] = (&standaloneDoneArgs{JobKey: keys.Job(e.CallerID, e.JobID), EventsKey: keys.Events,
			Ctx: int64(d.ContextID), Caller: int64(e.CallerID), ID: int64(e.JobID), Attempt: int64(e.Attempt), Status: string(e.Status),
			Err: e.Error, Fatal: e.Fatal, Retries: int64(e.Retries), Backoff: e.Backoff.Milliseconds(),
			NowS: now.Unix(), NowMs: now.UnixMilli(), Actor: e.Actor, RetentionMs: e.Retention.Milliseconds()}).call()
	}
	out, errs := make([]EndResult, len(ends)), make([]error, len(ends))
	for i, cmd := range d.EvalBatch(ctx, calls) {
		res, err := cmd.Result()
		var r standaloneDoneDone
		if err == nil {
			r, err = decodeStandaloneDoneReply(res)
		}
		if err != nil {
			errs[i] = fmt.Errorf("complete job %d:%d:%d: %w", d.ContextID, ends[i].CallerID, ends[i].JobID, err)
			continue
		}
		out[i] = endResult(r.Code, r.Status, r.Due, nil)
	}
	return out, errs
}

// DueItem is delayed work taken from coord:due.
type DueItem struct {
	ContextID, FlowID, CallerID, JobID uint32
	// Release: not a retry but the dependents of completed node JobID left to
	// release (ReleaseDependents).
	Release bool
	// Cascade: not a retry but the flow's nodes left to cancel after a failure
	// (CascadeFlow); JobID 0.
	Cascade bool
}

// PopDue removes and returns the delayed work that is due, from the coord:due of every
// server (each holds the delayed work of its own contexts).
func (s *Store) PopDue(ctx context.Context, now time.Time, limit int) ([]DueItem, error) {
	var e errs
	var out []DueItem
	for _, m := range s.popDue(ctx, keys.Due, now, limit, &e) {
		parts := strings.Split(m, ":")
		if len(parts) != 5 || parts[0] != "retry" && parts[0] != "release" && parts[0] != "cascade" {
			continue
		}
		out = append(out, DueItem{parseU32(parts[1]), parseU32(parts[2]), parseU32(parts[3]), parseU32(parts[4]), parts[0] == "release", parts[0] == "cascade"})
	}
	if len(out) == 0 && e.first != nil {
		return nil, fmt.Errorf("pop due work: %w", e.first)
	}
	return out, nil
}

// errs keeps the first error of a walk over the servers.
type errs struct{ first error }

func (e *errs) add(err error) {
	if err != nil && e.first == nil {
		e.first = err
	}
}

// popDue takes up to limit members whose score is at most now from the zset key of
// every server's DB 0. A server that fails is skipped (its members wait for the next
// call); the error is kept in e.
func (s *Store) popDue(ctx context.Context, key string, now time.Time, limit int, e *errs) []string {
	var out []string
	for _, srv := range s.servers {
		if len(out) >= limit {
			break
		}
		due, err := (&popDueArgs{DueKey: key, NowMs: now.UnixMilli(), Limit: int64(limit - len(out))}).run(ctx, srv)
		if err != nil && !errors.Is(err, redis.Nil) {
			e.add(fmt.Errorf("pop %s at %s: %w", key, srv.Name, err))
			continue
		}
		out = append(out, due...)
	}
	return out
}

// nextDue is the earliest score of the zset key over every server's DB 0 (zero if none).
func (s *Store) nextDue(ctx context.Context, key string) (time.Time, error) {
	var next time.Time
	var e errs
	for _, srv := range s.servers {
		z, err := srv.fixed.ZRangeWithScores(ctx, key, 0, 0).Result()
		if err != nil {
			e.add(fmt.Errorf("read %s at %s: %w", key, srv.Name, err))
			continue
		}
		if len(z) > 0 {
			if t := time.UnixMilli(int64(z[0].Score)); next.IsZero() || t.Before(next) {
				next = t
			}
		}
	}
	if next.IsZero() {
		return next, e.first
	}
	return next, nil
}

// dueEach calls take with each member of the sorted set key due by now (its score a
// time in ms), earliest first per server, from every server until limit members were
// taken (take returns whether it took one). An error reading one server is returned
// only when nothing was taken.
func (s *Store) dueEach(ctx context.Context, key string, now time.Time, limit int, take func(srv *Server, member string, score int64) bool) error {
	n := 0
	var e errs
	for _, srv := range s.servers {
		if n >= limit {
			break
		}
		z, err := srv.fixed.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: key, ByScore: true, Start: "-inf",
			Stop: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(limit - n)}).Result()
		if err != nil {
			e.add(fmt.Errorf("read %s at %s: %w", key, srv.Name, err))
			continue
		}
		for _, m := range z {
			if name, _ := m.Member.(string); take(srv, name, int64(m.Score)) {
				n++
			}
		}
	}
	if n == 0 {
		return e.first
	}
	return nil
}

// NextDue returns when the earliest delayed work is due (zero time if none).
func (s *Store) NextDue(ctx context.Context) (time.Time, error) { return s.nextDue(ctx, keys.Due) }

// ActiveFlows returns every started, unfinished flow as (context, flow) pairs, from the
// coord:flows:active of every server.
func (s *Store) ActiveFlows(ctx context.Context) ([][2]uint32, error) {
	var out [][2]uint32
	for _, srv := range s.servers {
		vals, err := srv.fixed.SMembers(ctx, keys.ActiveFlows).Result()
		if err != nil {
			return nil, fmt.Errorf("list active flows at %s: %w", srv.Name, err)
		}
		for _, v := range vals {
			c, f, ok := strings.Cut(v, ":")
			if ok {
				out = append(out, [2]uint32{parseU32(c), parseU32(f)})
			}
		}
	}
	return out, nil
}

// ActiveFlowCount is the number of started, unfinished flows (one SCARD per server).
func (s *Store) ActiveFlowCount(ctx context.Context) (int64, error) {
	var n int64
	for _, srv := range s.servers {
		c, err := srv.fixed.SCard(ctx, keys.ActiveFlows).Result()
		if err != nil {
			return 0, fmt.Errorf("count active flows at %s: %w", srv.Name, err)
		}
		n += c
	}
	return n, nil
}

// SplitRequest replaces a claimed job request message of several jobs (m, claimed by c)
// by one request message each, on msg_out, and releases the claim: for a request the
// claim script could not route whole (one of its jobs is pinned, gone, or of a type no
// local runner serves), so that each job goes its own way.
func (d *DB) SplitRequest(ctx context.Context, c *Claim, m *model.Message) (int, error) {
	now := time.Now()
	a := &splitRequestArgs{MsgOutKey: keys.MsgOut, ProcKey: keys.Processing(c.Consumer), LeasesKey: keys.Leases,
		Ctx: int64(d.ContextID), Caller: int64(m.CallerID), NowS: now.Unix(), NowMs: now.UnixMilli(), Item: c.Item, Member: c.member(),
		Flow: int64(m.FlowID), Jobs: make([]splitRequestPart, len(m.Job))}
	for i := range m.Job {
		j := m.Job[i]
		a.Jobs[i] = splitRequestPart{ID: int64(j.ID), Fields: requestFields(d.ContextID, m.FlowID, &j, now, m.Timeout)}
	}
	n, err := a.run(ctx, d)
	if err != nil {
		return 0, fmt.Errorf("split request %s of context %d: %w", c.Item, d.ContextID, err)
	}
	return int(n), nil
}

// releaseBatch is the most dependents of a completed node one release_dependents call
// makes ready and dispatches: as many as the completion's (ReleaseChunk), about 2 ms of
// Redis on an idle T40 (250 took about 5 ms, 1,000 took 23 ms), so that a call stays
// well under 10 ms while the released jobs run beside it; the 10,000 dependents of one
// node are 100 calls, pipelined (BenchmarkFanOutFanIn10k).
const releaseBatch = ReleaseChunk

// Released is what ReleaseDependents did.
type Released struct {
	Ready      []uint32 // the dependents made ready
	Dispatched int      // how many of them were dispatched (a paused flow's stay ready)
	Calls      int      // the script calls it took
}

// ReleaseDependents makes ready, and dispatches, the dependents of completed node id of
// a flow that its completion left to release (its first ReleaseChunk are its
// completion's; lua/release_dependents.lua): releaseBatch a call, each call atomic and
// short. The first call's reply says how many are left; the calls for them go in one
// round trip (pipelined: each takes the next chunk, and other clients' commands run
// between them). Nothing is left for the caller to dispatch but the dependents of a
// paused flow (or one being cancelled), which stay ready. A call that fails stops it:
// the DAG's rel:<id> keeps what is left, for the next call (the scheduler's safety
// sweep).
func (d *DB) ReleaseDependents(ctx context.Context, flowID, callerID, id uint32) (Released, error) {
	var out Released
	what := func(err error) error {
		return fmt.Errorf("release the dependents of job %d of flow %d in context %d: %w", id, flowID, d.ContextID, err)
	}
	call := func() Call {
		now := time.Now()
		return (&releaseDependentsArgs{MsgOutKey: keys.MsgOut, DagKey: keys.DAG(flowID), Ctx: int64(d.ContextID), Flow: int64(flowID),
			Caller: int64(callerID), ID: int64(id), Max: releaseBatch, NowS: now.Unix(), NowMs: now.UnixMilli(),
			Request: groupFields(d.ContextID, flowID, callerID, now, 0)}).call()
	}
	n := 1
	for n > 0 {
		calls := make([]Call, n)
		for i := range calls {
			calls[i] = call()
		}
		left := int64(0)
		for _, cmd := range d.EvalBatch(ctx, calls) {
			out.Calls++
			res, err := cmd.Result()
			var r releaseDependentsRecord
			if err == nil {
				r, err = decodeReleaseDependentsReply(res)
			}
			if err != nil {
				return out, what(err)
			}
			out.Ready = append(out.Ready, u32s(r.Ready)...)
			out.Dispatched += int(r.Dispatched)
			left = r.Left
		}
		n = int((left + releaseBatch - 1) / releaseBatch)
	}
	return out, nil
}
