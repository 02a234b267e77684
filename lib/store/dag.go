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
//	r:<id>   dependencies not yet completed
//	a:<id>   attempts dispatched so far
//	p:<id>   the node's dependencies (JSON list)
//	d:<id>   the node's dependents (JSON list)
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
	return g, nil
}

// PlanError is a DAG that cannot run, with the reason.
type PlanError struct{ Msg string }

func (e *PlanError) Error() string { return e.Msg }

// PlanDAG checks a flow's jobs form a DAG that can run: every dependency is a job of
// the flow, there is no cycle, every job is of the flow's context and caller. It
// returns the nodes' dependents.
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
		if !j.ScriptType.Valid() {
			return nil, &PlanError{fmt.Sprintf("job %d: script_type %q is not a known script type", j.ID, j.ScriptType)}
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

// startFlowScript: KEYS flow, dag, flowres, events; ARGV ctx, flow, caller, now_s,
// now_ms, actor, then per node: id, depends JSON, dependents JSON, dependency count,
// and 1 when the job holds fields of an earlier run to clear (0: a fresh job).
// Returns {1, ready ids…} when started, {0, status} when the flow was not dispatched.
var startFlowScript = newLibScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if st ~= 'dispatched' then return {0, st} end
local ctx, flow, caller, now_s, now_ms, actor = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local dag = KEYS[2]
redis.call('DEL', dag, KEYS[3])
local total = (#ARGV - 6) / 5
redis.call('HSET', dag, 'caller', caller, 'total', total, 'terminal', 0, 'failed', 0)
-- The nodes' fields go into the DAG hash a few hundred at a time (unpack's limit).
-- Attempt counters (a:) and a ready node's count of dependencies left (r:) start
-- absent, read as 0.
local kv = {}
local function put(...)
  for _, v in ipairs({...}) do kv[#kv + 1] = v end
  if #kv >= 400 then redis.call('HSET', dag, unpack(kv)); kv = {} end
end
local out = {1}
for i = 7, #ARGV, 5 do
  local id, deps, dependents, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local jk = 'job:' .. caller .. ':' .. id
  if ARGV[i + 4] == '1' then
    redis.call('HDEL', jk, 'error', 'exit_code', 'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms', 'dispatched_at_ms', 'attempt', 'stop_requested', 'fatal')
  end
  if n == 0 then
    -- A fresh job is marked (status, empty result, ready time) by its dispatch, which
    -- follows at once: the start holds Redis for the whole flow, so it does only what
    -- must be atomic. One that ran before is marked here (its status may already say
    -- dispatched, which its dispatch would take as marked).
    put('s:' .. id, 'ready', 'p:' .. id, deps, 'd:' .. id, dependents)
    if ARGV[i + 4] == '1' then set_job(caller, id, 'dispatched', 'result', '{}', 'updated_at', now_s, 'ready_at_ms', now_ms) end
    out[#out + 1] = id
  else
    put('s:' .. id, 'pending', 'r:' .. id, ARGV[i + 3], 'p:' .. id, deps, 'd:' .. id, dependents)
    set_job(caller, id, 'waiting_for_prerequisites', 'result', '{}', 'updated_at', now_s)
  end
end
if #kv > 0 then redis.call('HSET', dag, unpack(kv)) end
set_flow(flow, 'started', 'started_at', now_s, 'started_at_ms', now_ms, 'updated_at', now_s)
redis.call('HDEL', KEYS[1], 'error', 'failed_job', 'finished_at', 'finished_at_ms', 'cancelled_by')
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ` + strconv.Itoa(EventsMaxLen) + `, '*', 'type', 'flow.started', 'actor', actor, 'time_ms', now_ms, 'flow_id', flow, 'caller_id', caller, 'status', 'started')
redis.call('SELECT', 0)
redis.call('SADD', 'coord:flows:active', ctx .. ':' .. flow)
return out
`)

// StartFlow writes the DAG state of a planned flow and marks it started. It returns
// the ids of the nodes ready to dispatch, whose jobs it leaves as they are: their
// dispatch (DispatchStarted) marks them. A flow that is not in status dispatched is
// not touched; its status is returned with started=false.
func (d *DB) StartFlow(ctx context.Context, f *model.Flow, jobs []*model.Job, dependents map[uint32][]uint32, actor string) (ready []uint32, status string, started bool, err error) {
	now := time.Now()
	args := []any{d.ContextID, f.ID, f.CallerID, now.Unix(), now.UnixMilli(), actor}
	for _, j := range jobs {
		args = append(args, j.ID, jsonIDs(j.Dependends), jsonIDs(dependents[j.ID]), len(j.Dependends), boolArg(ranBefore(j)))
	}
	res, err := d.Eval(ctx, startFlowScript, []string{keys.Flow(f.ID), keys.DAG(f.ID), keys.FlowResults(f.ID), keys.Events}, args...)
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOTFOUND") {
			return nil, "", false, notFound("flow %d in context %d", f.ID, d.ContextID)
		}
		return nil, "", false, fmt.Errorf("start flow %d: %w", f.ID, err)
	}
	vals := res.([]any)
	if n, _ := vals[0].(int64); n == 0 {
		st, _ := vals[1].(string)
		return nil, st, false, nil
	}
	return parseIDs(vals[1:]), string(model.FlowStarted), true, nil
}

// ranBefore says whether a job (as loaded) holds fields of an earlier run, which a
// start clears. Skipping the clearing for fresh jobs spares Redis a dozen field scans
// per node.
func ranBefore(j *model.Job) bool {
	return j.Error != "" || j.ExitCode != 0 || j.Worker != "" || j.StartedAt != 0 || j.FinishedAt != 0 ||
		j.StartedAtMs != 0 || j.FinishedAtMs != 0 || j.DispatchedMs != 0 || j.Attempt != 0 || j.StopAsked || j.Fatal
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

// dispatchScript sends ready nodes (or one standalone job) to the router: ARGV ctx,
// flow (0: a standalone job), caller, now_s, now_ms, actor, the start time (ms) of the
// flow whose start found these nodes ready ("": nodes made ready since; see
// DispatchStarted), the number g of the field/
// value items of a group message (0: none) and those g items (all but its id, job,
// nodes and job_ids), then, when g > 0, the group's job list and node list as JSON
// arrays (every grouped job's JSON and node JSON, in order), then per job its id,
// whether it goes in the group message (1) or in a message of its own (0), and the
// number n of items that follow with them: for a message of its own its field/value
// items; for the group, where its job's and its node's JSON start and end in the two
// lists (1-based, inclusive). For each job: it checks the node is ready (and its retry
// due), marks node and job dispatched and records the event; a job of its own gets its
// message stored and pushed on msg_out at once; the group's jobs share one message
// (its job and nodes lists hold the jobs dispatched — the lists given when that is
// every grouped job, else cut from them — job_ids their ids), stored and pushed after
// them. One wake token per message. Returns per job {message key, attempt} or
// {"", why}.
var dispatchScript = newLibScript(`
local ctx, flow, caller, now_s, now_ms, actor = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local ready_ms = ARGV[7]
if ready_ms == '' then ready_ms = nil end
local ng = tonumber(ARGV[8])
local gfirst, glast = 9, 8 + ng
local gjson, gnjson = '', ''
local i = glast + 1
if ng > 0 then gjson, gnjson = ARGV[i], ARGV[i + 1]; i = i + 2 end
local dag = ''
if flow ~= '0' then dag = 'coord:dag:' .. flow end
local out, pushed = {}, 0
local gspans, gids, gslots = {}, {}, {}
local ngrouped = 0
while i <= #ARGV do
  local id, grouped, nf = ARGV[i], ARGV[i + 1] == '1', tonumber(ARGV[i + 2])
  local first, last = i + 3, i + 2 + nf
  i = last + 1
  if grouped then ngrouped = ngrouped + 1 end
  local jk = 'job:' .. caller .. ':' .. id
  local attempt, why
  local jst = redis.call('HGET', jk, 'status')
  if not jst then
    why = 'job missing'
  elseif dag ~= '' then
    local node = redis.call('HMGET', dag, 's:' .. id, 'due:' .. id)
    local s, due = node[1], node[2]
    if s ~= 'ready' then
      why = s or 'no node'
    elseif due and tonumber(due) > tonumber(now_ms) then
      why = 'not due'
    else
      attempt = int(redis.call('HINCRBY', dag, 'a:' .. id, 1))
      redis.call('HSET', dag, 's:' .. id, 'dispatched')
      if due then redis.call('HDEL', dag, 'due:' .. id) end
    end
  elseif jst == 'started' or jst == 'finished' then
    why = jst
  else
    attempt = int(redis.call('HINCRBY', jk, 'attempt', 1))
  end
  if why then
    out[#out + 1] = {'', why}
  else
    if ready_ms then
      -- A node ready at its flow's start: the start left its job to this dispatch.
      redis.call('HSET', jk, 'status', 'dispatched', 'attempt', attempt, 'dispatched_at_ms', now_ms, 'updated_at', now_s, 'result', '{}', 'ready_at_ms', ready_ms)
    else
      redis.call('HSET', jk, 'status', 'dispatched', 'attempt', attempt, 'dispatched_at_ms', now_ms, 'updated_at', now_s)
    end
    index_job(caller .. ':' .. id, jst, 'dispatched')
    event('job.dispatched', actor, now_ms, flow, id, caller, 'dispatched', 'attempt ' .. attempt)
    if grouped then
      gspans[#gspans + 1] = first
      gids[#gids + 1] = id
      out[#out + 1] = {'', tonumber(attempt)}
      gslots[#gslots + 1] = #out
    else
      local mk = store_message(caller, first, now_ms, last)
      track_msg(caller, id, mk)
      redis.call('LPUSH', 'msg_out', mk)
      pushed = pushed + 1
      out[#out + 1] = {mk, tonumber(attempt)}
    end
  end
end
if #gids > 0 then
  if #gids < ngrouped then
    -- Some grouped jobs were not dispatched: the lists of those that were.
    local js, ns = {}, {}
    for k, f in ipairs(gspans) do
      js[k] = string.sub(gjson, tonumber(ARGV[f]), tonumber(ARGV[f + 1]))
      ns[k] = string.sub(gnjson, tonumber(ARGV[f + 2]), tonumber(ARGV[f + 3]))
    end
    gjson, gnjson = '[' .. table.concat(js, ',') .. ']', '[' .. table.concat(ns, ',') .. ']'
  end
  local mk = store_message(caller, gfirst, now_ms, glast, {'job', gjson, 'nodes', gnjson, 'job_ids', table.concat(gids, ' ')})
  track_msg(caller, gids[1], mk, flow)
  for _, n in ipairs(gslots) do out[n][1] = mk end
  redis.call('LPUSH', 'msg_out', mk)
  pushed = pushed + 1
end
wake_msg_out(ctx, pushed)
return out
`)

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

// requestFields are the field/value pairs of a job request message (without its id).
func requestFields(ctxID, flowID uint32, j *model.Job, now time.Time, msgTimeout uint32) []any {
	m := model.Message{
		CallerID: j.CallerID, ContextID: ctxID, MessageType: model.MessageTypeJob, MessageFormatType: model.FormatText,
		Message: "job " + j.GlobalKey(), Timeout: msgTimeout, Job: []model.Job{*j}, Status: model.MessageDispatched,
		CreatedAt: now.Unix(), UpdatedAt: now.Unix(), CreatedAtMs: now.UnixMilli(), FlowID: flowID, Kind: model.KindJobRequest,
		Nodes: []model.FlowNode{requestNode(j)},
	}
	return withoutFields(model.HashFields(&m), "id")
}

// groupFields are the field/value pairs of a job request message for several jobs of a
// flow, without its id, job, nodes and job_ids (the dispatch script writes those).
func groupFields(ctxID, flowID, callerID uint32, now time.Time, msgTimeout uint32) []any {
	m := model.Message{
		CallerID: callerID, ContextID: ctxID, MessageType: model.MessageTypeJob, MessageFormatType: model.FormatText,
		Message: fmt.Sprintf("jobs of flow %d", flowID), Timeout: msgTimeout, Status: model.MessageDispatched,
		CreatedAt: now.Unix(), UpdatedAt: now.Unix(), CreatedAtMs: now.UnixMilli(), FlowID: flowID, Kind: model.KindJobRequest,
	}
	return withoutFields(model.HashFields(&m), "id", "job", "nodes")
}

// requestNode is the flow node of a job, as its request message lists it.
func requestNode(j *model.Job) model.FlowNode {
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
	return d.dispatchMany(ctx, flowID, callerID, jobs, actor, msgTimeout, "")
}

// DispatchStarted is DispatchMany for the nodes a flow's start found ready (StartFlow
// leaves their jobs to their dispatch): readyAt, the start's time, is their ready time.
func (d *DB) DispatchStarted(ctx context.Context, flowID, callerID uint32, jobs []*model.Job, actor string, readyAt time.Time) ([]Dispatched, error) {
	return d.dispatchMany(ctx, flowID, callerID, jobs, actor, 0, strconv.FormatInt(readyAt.UnixMilli(), 10))
}

func (d *DB) dispatchMany(ctx context.Context, flowID, callerID uint32, jobs []*model.Job, actor string, msgTimeout uint32, readyMs string) ([]Dispatched, error) {
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
	args := []any{d.ContextID, flowID, callerID, now.Unix(), now.UnixMilli(), actor, readyMs}
	var list, nodes []byte // the group's job and node lists, built as the jobs are added
	if n > 1 {
		g := groupFields(d.ContextID, flowID, callerID, now, msgTimeout)
		args = append(args, len(g))
		args = append(args, g...)
		args = append(args, nil, nil) // the lists, set below
	} else {
		args = append(args, 0)
	}
	for _, j := range jobs {
		if n > 1 && groupable(j) {
			js, err := json.Marshal(j)
			if err != nil {
				return nil, fmt.Errorf("dispatch job %d: %w", j.ID, err)
			}
			node, err := json.Marshal(requestNode(j))
			if err != nil {
				return nil, fmt.Errorf("dispatch job %d: %w", j.ID, err)
			}
			list = append(append(list, listSep(list)), js...)
			nodes = append(append(nodes, listSep(nodes)), node...)
			// 1-based inclusive spans, as Lua's string.sub takes them
			args = append(args, j.ID, 1, 4, len(list)-len(js)+1, len(list), len(nodes)-len(node)+1, len(nodes))
			continue
		}
		fields := requestFields(d.ContextID, flowID, j, now, msgTimeout)
		args = append(args, j.ID, 0, len(fields))
		args = append(args, fields...)
	}
	if n > 1 {
		g := args[7].(int)
		args[8+g] = append(list, ']')
		args[9+g] = append(nodes, ']')
	}
	res, err := d.Eval(ctx, dispatchScript, nil, args...)
	if err != nil {
		return nil, fmt.Errorf("dispatch %d job(s) of context %d: %w", len(jobs), d.ContextID, err)
	}
	vals, _ := res.([]any)
	out := make([]Dispatched, len(jobs))
	for i, j := range jobs {
		out[i].JobID = j.ID
	}
	for i, v := range vals {
		if i >= len(out) {
			break
		}
		pair, _ := v.([]any)
		if len(pair) != 2 {
			continue
		}
		mk, _ := pair[0].(string)
		if mk == "" {
			out[i].Why, _ = pair[1].(string)
			continue
		}
		a, _ := pair[1].(int64)
		out[i].MsgKey, out[i].Attempt = mk, uint32(a)
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
}

// completeScript applies ends of jobs of one flow, in order, each as CompleteNode
// describes: KEYS dag, flow, flowres, events; ARGV ctx, flow, caller, now_s, now_ms,
// actor, retention ms, then per end: job id, attempt, status, error, fatal, retries,
// backoff ms. Returns per end {code, flow status or "", retry due ms, ready ids…};
// code 0 = nothing changed, 1 = applied, 2 = retry scheduled.
var completeScript = newLibScript(finalizeLua + `
local dag, fk, rk, ek = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ctx, flow, caller, now_s, now_ms, actor, retention_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local maxlen = ` + strconv.Itoa(EventsMaxLen) + `
-- (A flow's jobs are not published on coord:jobdone one by one: a client waits for the
-- flow, whose end finalize publishes on coord:flowdone.)
local function complete(id, attempt, status, err, fatal, retries, backoff)
local jk = 'job:' .. caller .. ':' .. id
local node = redis.call('HMGET', dag, 's:' .. id, 'a:' .. id, 'd:' .. id, 'total')
local s = node[1]
if not s then return {0, '', 0} end
if s == 'completed' or s == 'failed' or s == 'cancelled' or s == 'pending' or s == 'ready' then return {0, '', 0} end
local a = tonumber(node[2] or '0')
if attempt ~= a then return {0, '', 0} end
local jf = redis.call('HMGET', jk, 'retries', 'stop_requested', 'fatal', 'result', 'finished_at_ms', 'retry_after_ms')
if retries < 0 then retries = tonumber(jf[1] or '0') or 0 end
if jf[2] == '1' or jf[3] == '1' then fatal = true end
local out = {1, '', 0}
local terminal
if status == 'finished' then
  redis.call('HSET', dag, 's:' .. id, 'completed')
  terminal = redis.call('HINCRBY', dag, 'terminal', 1)
  local res = jf[4]
  if res and res ~= '' then
    local ok, m = pcall(cjson.decode, res)
    if ok and type(m) == 'table' then
      local kv = {}
      for k, v in pairs(m) do
        if type(v) ~= 'string' then v = cjson.encode(v) end
        kv[#kv + 1] = id .. '.' .. k
        kv[#kv + 1] = v
        if #kv >= 400 then redis.call('HSET', rk, unpack(kv)); kv = {} end -- unpack's stack limit
      end
      if #kv > 0 then redis.call('HSET', rk, unpack(kv)) end
    end
  end
  local fin = jf[5] or now_ms
  local deps = cjson.decode(node[3] or '[]')
  for _, d in ipairs(deps) do
    d = int(d)
    local r = redis.call('HINCRBY', dag, 'r:' .. d, -1)
    if r <= 0 and redis.call('HGET', dag, 's:' .. d) == 'pending' then
      redis.call('HSET', dag, 's:' .. d, 'ready')
      set_job(caller, d, 'dispatched', 'ready_at_ms', fin, 'updated_at', now_s)
      out[#out + 1] = d
    end
  end
else
  if (not fatal) and a <= retries then
    local ra = tonumber(jf[6] or '')
    if ra then backoff = ra; redis.call('HDEL', jk, 'retry_after_ms') end
    local due = tonumber(now_ms) + backoff
    redis.call('HSET', dag, 's:' .. id, 'ready', 'due:' .. id, due, 'e:' .. id, err)
    redis.call('XADD', ek, 'MAXLEN', '~', maxlen, '*', 'type', 'job.retried', 'actor', actor, 'time_ms', now_ms, 'flow_id', flow, 'job_id', id, 'caller_id', caller, 'status', 'error',
      'detail', 'attempt ' .. a .. ' failed: ' .. err .. '; attempt ' .. (a + 1) .. ' in ' .. backoff .. ' ms')
    redis.call('SELECT', 0)
    redis.call('ZADD', 'coord:due', due, 'retry:' .. ctx .. ':' .. flow .. ':' .. caller .. ':' .. id)
    redis.call('SELECT', tonumber(ctx)) -- the next end of this call is in the context's DB
    return {2, '', due}
  end
  terminal = redis.call('HINCRBY', dag, 'terminal', 1)
  if redis.call('HGET', fk, 'cancelled_by') then
    -- the flow was cancelled: this is one of the running jobs it stopped
    redis.call('HSET', dag, 's:' .. id, 'cancelled', 'e:' .. id, redis.call('HGET', fk, 'error') or err)
  else
    redis.call('HSET', dag, 's:' .. id, 'failed', 'e:' .. id, err)
    redis.call('HINCRBY', dag, 'failed', 1)
    if not redis.call('HGET', fk, 'failed_job') then
      redis.call('HSET', fk, 'failed_job', id, 'error', 'job ' .. id .. ' failed: ' .. err, 'updated_at', now_s)
    end
    dead_letter(caller, id, flow, now_ms, actor, err)
  end
  -- Cancel the transitive dependents that have not run.
  local queue = cjson.decode(redis.call('HGET', dag, 'd:' .. id) or '[]')
  local reason = 'cancelled: job ' .. id .. ' failed'
  local i = 1
  while i <= #queue do
    local d = int(queue[i])
    i = i + 1
    local ds = redis.call('HGET', dag, 's:' .. d)
    if ds == 'pending' or ds == 'ready' then
      redis.call('HSET', dag, 's:' .. d, 'cancelled', 'e:' .. d, reason)
      redis.call('HDEL', dag, 'due:' .. d)
      terminal = redis.call('HINCRBY', dag, 'terminal', 1)
      set_job(caller, d, 'error', 'error', reason, 'updated_at', now_s)
      redis.call('XADD', ek, 'MAXLEN', '~', maxlen, '*', 'type', 'job.cancelled', 'actor', actor, 'time_ms', now_ms, 'flow_id', flow, 'job_id', d, 'caller_id', caller, 'status', 'error', 'detail', reason)
      for _, x in ipairs(cjson.decode(redis.call('HGET', dag, 'd:' .. d) or '[]')) do
        queue[#queue + 1] = x
      end
    end
  end
end
if terminal >= tonumber(node[4]) then
  out[2] = finalize(dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor, retention_ms)
end
return out
end
local res = {}
for i = 8, #ARGV, 7 do
  res[#res + 1] = complete(ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3], ARGV[i + 4] == '1', tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]))
end
return res
`)

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
		args := make([]any, 0, 7+7*len(idx))
		args = append(args, d.ContextID, k.flow, k.caller, now.Unix(), now.UnixMilli(), first.Actor, first.Retention.Milliseconds())
		for _, i := range idx {
			e := ends[i]
			args = append(args, e.JobID, e.Attempt, string(e.Status), e.Error, boolArg(e.Fatal), e.Retries, e.Backoff.Milliseconds())
		}
		calls[g] = Call{Script: completeScript, Keys: []string{keys.DAG(k.flow), keys.Flow(k.flow), keys.FlowResults(k.flow), keys.Events}, Args: args}
	}
	out, errs := make([]EndResult, len(ends)), make([]error, len(ends))
	for g, cmd := range d.EvalBatch(ctx, calls) {
		idx := groups[order[g]]
		res, err := cmd.Result()
		list, _ := res.([]any)
		if err == nil && len(list) != len(idx) {
			err = fmt.Errorf("unexpected reply %v", res)
		}
		for k, i := range idx {
			if err != nil {
				errs[i] = fmt.Errorf("complete job %d:%d:%d: %w", d.ContextID, ends[i].CallerID, ends[i].JobID, err)
				continue
			}
			vals, _ := list[k].([]any)
			if len(vals) < 3 {
				errs[i] = fmt.Errorf("complete job %d:%d:%d: unexpected reply %v", d.ContextID, ends[i].CallerID, ends[i].JobID, list[k])
				continue
			}
			out[i] = parseEnd(vals)
		}
	}
	return out, errs
}

func parseEnd(vals []any) EndResult {
	code, _ := vals[0].(int64)
	r := EndResult{Applied: code != 0}
	if st, _ := vals[1].(string); st != "" {
		r.FlowFinished, r.FlowStatus = true, model.FlowStatus(st)
	}
	if code == 2 {
		due, _ := vals[2].(int64)
		r.RetryAt = time.UnixMilli(due)
	}
	r.Ready = parseIDs(vals[3:])
	return r
}

// standaloneDoneScript: a standalone job's end. KEYS job, events; ARGV ctx, caller, id,
// attempt, status, error, fatal, retries, backoff ms, now_s, now_ms, actor, retention ms.
var standaloneDoneScript = newLibScript(`
local jk, ek = KEYS[1], KEYS[2]
local ctx, caller, id, attempt, status, err = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local fatal, retries, backoff, now_s, now_ms, actor = ARGV[7] == '1', tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10], ARGV[11], ARGV[12]
if retries < 0 then retries = tonumber(redis.call('HGET', jk, 'retries') or '0') or 0 end
if redis.call('HGET', jk, 'stop_requested') == '1' or redis.call('HGET', jk, 'fatal') == '1' then fatal = true end
local a = tonumber(redis.call('HGET', jk, 'attempt') or '0')
if a ~= attempt then return {0, '', 0} end
if redis.call('HGET', jk, 'done_attempt') == tostring(a) then return {0, '', 0} end
redis.call('HSET', jk, 'done_attempt', a)
if status ~= 'finished' and (not fatal) and a <= retries then
  local ra = tonumber(redis.call('HGET', jk, 'retry_after_ms') or '')
  if ra then backoff = ra; redis.call('HDEL', jk, 'retry_after_ms') end
  local due = tonumber(now_ms) + backoff
  redis.call('XADD', ek, 'MAXLEN', '~', ` + strconv.Itoa(EventsMaxLen) + `, '*', 'type', 'job.retried', 'actor', actor, 'time_ms', now_ms, 'job_id', id, 'caller_id', caller, 'status', 'error',
    'detail', 'attempt ' .. a .. ' failed: ' .. err .. '; attempt ' .. (a + 1) .. ' in ' .. backoff .. ' ms')
  redis.call('SELECT', 0)
  redis.call('ZADD', 'coord:due', due, 'retry:' .. ctx .. ':0:' .. caller .. ':' .. id)
  return {2, '', due}
end
if status ~= 'finished' then dead_letter(caller, id, '0', now_ms, actor, err) end
local retention_ms = tonumber(ARGV[13]) or 0
local keep = tonumber(redis.call('HGET', 'context:' .. ctx, 'retention_seconds') or '0') or 0
if keep > 0 then retention_ms = keep * 1000 end
redis.call('SELECT', 0)
if retention_ms > 0 then
  redis.call('ZADD', 'coord:expire', tonumber(now_ms) + retention_ms, ctx .. ':job:' .. caller .. ':' .. id)
end
redis.call('PUBLISH', 'coord:jobdone', ctx .. ':' .. caller .. ':' .. id)
return {1, '', 0}
`)

// CompleteStandalone applies the end of a job that belongs to no flow.
func (d *DB) CompleteStandalone(ctx context.Context, e JobEnd) (EndResult, error) {
	now := time.Now()
	fatal := "0"
	if e.Fatal {
		fatal = "1"
	}
	res, err := d.Eval(ctx, standaloneDoneScript, []string{keys.Job(e.CallerID, e.JobID), keys.Events},
		d.ContextID, e.CallerID, e.JobID, e.Attempt, string(e.Status), e.Error, fatal, e.Retries, e.Backoff.Milliseconds(),
		now.Unix(), now.UnixMilli(), e.Actor, e.Retention.Milliseconds())
	if err != nil {
		return EndResult{}, fmt.Errorf("complete job %d:%d:%d: %w", d.ContextID, e.CallerID, e.JobID, err)
	}
	return parseEnd(res.([]any)), nil
}

// DueItem is delayed work taken from coord:due.
type DueItem struct {
	ContextID, FlowID, CallerID, JobID uint32
}

// popDueScript: KEYS a due-time zset of DB 0 (coord:due, coord:expire or
// coord:remote_due); ARGV now ms, limit. Removes and returns the members due by now
// (at most limit). Reply: the members, earliest first.
var popDueScript = NewScript(`
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(items) do redis.call('ZREM', KEYS[1], m) end
return items
`)

// PopDue removes and returns the delayed work that is due, from the coord:due of every
// server (each holds the delayed work of its own contexts).
func (s *Store) PopDue(ctx context.Context, now time.Time, limit int) ([]DueItem, error) {
	var e errs
	var out []DueItem
	for _, m := range s.popDue(ctx, keys.Due, now, limit, &e) {
		parts := strings.Split(m, ":")
		if len(parts) != 5 || parts[0] != "retry" {
			continue
		}
		out = append(out, DueItem{parseU32(parts[1]), parseU32(parts[2]), parseU32(parts[3]), parseU32(parts[4])})
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
		res, err := popDueScript.Run(ctx, srv.fixed, []string{key}, now.UnixMilli(), limit-len(out)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			e.add(fmt.Errorf("pop %s at %s: %w", key, srv.Name, err))
			continue
		}
		vals, _ := res.([]any)
		for _, v := range vals {
			if m, ok := v.(string); ok {
				out = append(out, m)
			}
		}
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

// splitRequestScript replaces a claimed job request of several jobs by one request
// each: KEYS msg_out, processing list, leases; ARGV ctx, caller, now_s, now_ms, the
// claimed message's key, its lease member, the flow, then per job its id, the number n of its
// message's field/value items and those n items. The new messages go on msg_out (a
// wake token each); the claimed one is marked processed and its claim released.
var splitRequestScript = newLibScript(`
local mo, proc, leases = KEYS[1], KEYS[2], KEYS[3]
local ctx, caller, now_s, now_ms, item, member, flow = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
-- Only while the claim holds the message: a second run of this script (a retry after
-- a lost answer) or a claim lost meanwhile splits nothing again.
if redis.call('LREM', proc, 1, item) == 0 then return 0 end
local i, pushed = 8, 0
while i <= #ARGV do
  local id, nf = ARGV[i], tonumber(ARGV[i + 1])
  local first, last = i + 2, i + 1 + nf
  i = last + 1
  local mk = store_message(caller, first, now_ms, last)
  track_msg(caller, id, mk, flow)
  redis.call('LPUSH', mo, mk)
  pushed = pushed + 1
end
redis.call('HSET', item, 'status', 'processed', 'updated_at', now_s)
redis.call('ZREM', leases, member)
wake_msg_out(ctx, pushed)
return pushed
`)

// SplitRequest replaces a claimed job request message of several jobs (m, claimed by c)
// by one request message each, on msg_out, and releases the claim: for a request the
// claim script could not route whole (one of its jobs is pinned, gone, or of a type no
// local runner serves), so that each job goes its own way.
func (d *DB) SplitRequest(ctx context.Context, c *Claim, m *model.Message) (int, error) {
	now := time.Now()
	args := []any{d.ContextID, m.CallerID, now.Unix(), now.UnixMilli(), c.Item, c.member(), m.FlowID}
	for i := range m.Job {
		j := m.Job[i]
		fields := requestFields(d.ContextID, m.FlowID, &j, now, m.Timeout)
		args = append(args, j.ID, len(fields))
		args = append(args, fields...)
	}
	res, err := d.Eval(ctx, splitRequestScript, []string{keys.MsgOut, keys.Processing(c.Consumer), keys.Leases}, args...)
	if err != nil {
		return 0, fmt.Errorf("split request %s of context %d: %w", c.Item, d.ContextID, err)
	}
	n, _ := res.(int64)
	return int(n), nil
}
