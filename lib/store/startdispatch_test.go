package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A small flow's start dispatches its ready nodes whose jobs name no runner in its own
// script call (StartFlowDispatch: start_flow.lua with lib_start's dispatch_ready): one
// call, the jobs on their queue in one request message, each job and node dispatched
// with attempt 1 and the start's time as its ready time, the flow.started event before
// their job.dispatched ones; a job pinned to a runner is left ready to the caller's
// dispatch, a job with a dependency waits. No job's empty result is written (a fresh
// job's is not stored). A start again changes nothing.
func TestStartFlowDispatchesItsReadyJobs(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	ids := startDispatchJobs(t, s)
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 1, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, deps := planStart(t, db, f)
	last, err := db.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queued, before := rdb.LLen(ctx, "queue:sh").Val(), fcalls(t)
	ready, dispatched, st, started, err := db.StartFlowDispatch(ctx, f, jobs, deps, "1")
	if err != nil || !started || st != string(model.FlowStarted) {
		t.Fatalf("start: %s, %v, %v", st, started, err)
	}
	if n := fcalls(t) - before; n != 1 {
		t.Errorf("%d script calls to start and dispatch a flow of %d jobs; want 1", n, len(ids))
	}
	if dispatched != 3 || !slices.Equal(ready, ids[3:4]) {
		t.Errorf("dispatched %d, left ready %v; want 3 and the pinned job %d", dispatched, ready, ids[3])
	}
	if n := rdb.LLen(ctx, "queue:sh").Val() - queued; n != 3 {
		t.Errorf("%d jobs queued; want 3", n)
	}
	fl, err := db.LoadFlow(ctx, f.ID)
	if err != nil || fl.Status != model.FlowStarted {
		t.Fatalf("flow: %+v, %v", fl, err)
	}
	msgs := rdb.SCard(ctx, keys.FlowMessages(f.ID)).Val()
	if msgs != 1 {
		t.Errorf("%d request messages of the flow; want 1 for its 3 jobs", msgs)
	}
	checkStartDispatched(t, db, fl, ids)
	checkStartEvents(t, db, f.ID, ids[:3], last)
	// started already: nothing more
	if _, n, _, again, err := db.StartFlowDispatch(ctx, f, jobs, deps, "1"); err != nil || again || n != 0 {
		t.Errorf("a start again: started %v, dispatched %d, %v", again, n, err)
	}
	if n := rdb.LLen(ctx, "queue:sh").Val() - queued; n != 3 {
		t.Errorf("after a start again: %d jobs queued; want 3", n)
	}
}

// checkStartDispatched checks the jobs and nodes of TestStartFlowDispatchesItsReadyJobs's
// flow f after its start: ids[:3] dispatched by it, ids[3] (pinned) left ready,
// ids[4] (a dependent) waiting.
func checkStartDispatched(t *testing.T, db *store.DB, fl *model.Flow, ids []uint32) {
	t.Helper()
	ctx := context.Background()
	rdb := srv.Client(t, int(db.ContextID))
	for i, id := range ids {
		j, err := db.LoadJob(ctx, 1, id)
		if err != nil {
			t.Fatal(err)
		}
		node := rdb.HMGet(ctx, keys.DAG(fl.ID), "s:"+u32(id), "a:"+u32(id)).Val()
		if rdb.HExists(ctx, keys.Job(1, id), "result").Val() {
			t.Errorf("job %d: its empty result written into its hash (a fresh job's is left out)", id)
		}
		switch {
		case i < 3:
			if j.Status != model.JobDispatched || j.Attempt != 1 || j.ReadyAtMs != fl.StartedAtMs || j.DispatchedMs < fl.StartedAtMs || len(j.Result) != 0 {
				t.Errorf("job %d: %s, attempt %d, ready at %d, dispatched at %d (flow started at %d), result %v", id, j.Status, j.Attempt, j.ReadyAtMs, j.DispatchedMs, fl.StartedAtMs, j.Result)
			}
			if node[0] != string(model.NodeDispatched) || node[1] != "1" {
				t.Errorf("node %d: %v; want dispatched, attempt 1", id, node)
			}
		case i == 3:
			if j.Attempt != 0 || node[0] != string(model.NodeReady) {
				t.Errorf("pinned job %d: attempt %d, node %v; want ready, left to its dispatch", id, j.Attempt, node)
			}
		default:
			if j.Status != model.JobWaitingForPrerequisites || node[0] != string(model.NodePending) {
				t.Errorf("dependent job %d: %s, node %v", id, j.Status, node)
			}
		}
	}
}

// checkStartEvents checks the events after the event id last: flow.started, then a
// job.dispatched of each job of ids (a first attempt), in order.
func checkStartEvents(t *testing.T, db *store.DB, flow uint32, ids []uint32, last string) {
	t.Helper()
	ctx := context.Background()
	evs, err := db.ReadEvents(ctx, last, 100)
	if err != nil || len(evs) != len(ids)+1 {
		t.Fatalf("%d events after the start (%v); want flow.started and 3 job.dispatched", len(evs), err)
	}
	if evs[0].Type != string(model.EventFlowStarted) {
		t.Errorf("first event %+v; want flow.started", evs[0])
	}
	for i, e := range evs[1:] {
		if e.Type != string(model.EventJobDispatched) || e.JobID != ids[i] || e.FlowID != flow || e.Status != "dispatched" || e.Detail != "attempt 1" {
			t.Errorf("event %d: %+v", i+1, e)
		}
	}
}

// startDispatchJobs creates TestStartFlowDispatchesItsReadyJobs's jobs in context 1: three
// independent sh jobs, one pinned to runner 1, one after the first.
func startDispatchJobs(t *testing.T, s *store.Store) []uint32 {
	t.Helper()
	ctx := context.Background()
	var ids []uint32
	for i := range 5 {
		j := &model.Job{CallerID: 1, ContextID: 1, Script: "true", ScriptType: "sh"}
		switch i {
		case 3:
			j.RunnerID = 1 // pinned: a message of its own, by the caller's dispatch
		case 4:
			j.Dependends = []uint32{ids[0]}
		}
		c, _, err := s.CreateJob(ctx, j, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	return ids
}

// A batch of new jobs (CreateJobs, one create.lua call) takes its ids together (one
// INCRBY, one EXISTS of their keys), adds its index entries in one ZADD per index and
// its job.created events in two stream entries, each read back as the job's own event
// (its key as detail), in order. An id taken among those the counter gives (a job
// created with it) is skipped, one INCR each, as before.
func TestCreateJobsTakeIDsAndEventsTogether(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 27)
	ctx := context.Background()
	rc := srv.Client(t, 27)
	batch := func(n int) []uint32 {
		t.Helper()
		js := make([]*model.Job, n)
		for i := range js {
			js[i] = &model.Job{CallerID: 1, ContextID: 27, Script: "true", ScriptType: "sh"}
		}
		var ids []uint32
		for _, r := range s.CreateJobs(ctx, js, "1") {
			if r.Err != nil || !r.Created {
				t.Fatalf("create: %+v", r)
			}
			ids = append(ids, r.Job.ID)
		}
		return ids
	}
	last, err := db.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	entries := rc.XLen(ctx, keys.Events).Val()
	calls := map[string]int{}
	for _, c := range []string{"incr", "incrby", "exists", "zadd", "xadd"} {
		calls[c] = commandCalls(t, 27, c)
	}
	ids := batch(10)
	for c, want := range map[string]int{"incr": 0, "incrby": 1, "exists": 1, "zadd": 2, "xadd": 2} {
		if n := commandCalls(t, 27, c) - calls[c]; n != want {
			t.Errorf("%s calls: %d; want %d", c, n, want)
		}
	}
	if n := rc.XLen(ctx, keys.Events).Val() - entries; n != 2 {
		t.Errorf("%d stream entries for 10 jobs created; want 2", n)
	}
	evs, err := db.ReadEvents(ctx, last, 100)
	if err != nil || len(evs) != len(ids) {
		t.Fatalf("%d events (%v); want %d", len(evs), err, len(ids))
	}
	for i, e := range evs {
		if e.Type != string(model.EventJobCreated) || e.Actor != "1" || e.Detail != keys.Job(1, ids[i]) || (i > 0 && ids[i] != ids[i-1]+1) {
			t.Errorf("event %d: %+v (job %d)", i, e, ids[i])
		}
	}
	checkEventIDsIncrease(t, evs)
	for _, id := range ids {
		if rc.ZScore(ctx, keys.JobIndex, fmt.Sprintf("1:%d", id)).Err() != nil || rc.ZScore(ctx, keys.StatusIndex(keys.JobIndex, "dispatched"), fmt.Sprintf("1:%d", id)).Err() != nil {
			t.Errorf("job %d not in its indexes", id)
		}
	}
	// an id the counter gives next taken: each job then takes the next free id
	next := ids[len(ids)-1] + 2
	if _, _, err := s.CreateJob(ctx, &model.Job{ID: next, CallerID: 1, ContextID: 27, Script: "taken", ScriptType: "sh"}, "1"); err != nil {
		t.Fatal(err)
	}
	more := batch(3)
	if want := []uint32{next - 1, next + 1, next + 2}; !slices.Equal(more, want) {
		t.Errorf("ids %v; want %v (%d taken)", more, want, next)
	}
	if v := rc.HGet(ctx, keys.Job(1, next), "script").Val(); v != "taken" {
		t.Errorf("job %d's script %q", next, v)
	}
}

// The DAG hash of a large flow (256 jobs or more) is a hash table from the first call
// of its start in chunks, not a listpack whose every insert scans it whole until it
// passes Redis's limit; a smaller chunked flow's stays a listpack.
func TestBigFlowDAGIsAHashTableFromItsStart(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 28)
	ctx := context.Background()
	rc := srv.Client(t, 28)
	for _, c := range []struct {
		width int
		want  string
	}{{300, "hashtable"}, {store.StartChunk + 20, "listpack"}} {
		f, _ := createLayers(t, s, 28, c.width)
		jobs, deps := planStart(t, db, f)
		if _, err := db.StartPart(ctx, f, jobs, deps, "t"); err != nil {
			t.Fatal(err)
		}
		if enc := rc.ObjectEncoding(ctx, keys.DAG(f.ID)).Val(); enc != c.want {
			t.Errorf("a flow of %d jobs: its DAG after its start's first chunk is a %s, want a %s", c.width, enc, c.want)
		}
		if rc.HExists(ctx, keys.DAG(f.ID), "ht").Val() {
			t.Error("the field that converted the DAG is left")
		}
	}
}

// DispatchStarted of nodes some of whose jobs name a runner: the others go in one
// request message (flow_start_dispatch), each pinned one in its own (dispatch), and
// the outcomes come back in the order of the jobs given.
func TestDispatchStartedMixedKeepsTheOrder(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	ids := startDispatchJobs(t, s) // ids[3] pinned to runner 1, ids[4] after ids[0]
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 1, Jobs: ids[:4]}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, ready := storetestStart(t, db, f)
	if len(ready) != 4 {
		t.Fatalf("ready %v", ready)
	}
	order := []*model.Job{jobs[3], jobs[0], jobs[1], jobs[2]}
	out, err := db.DispatchStarted(ctx, f.ID, 1, order, "scheduler", time.Now())
	if err != nil || len(out) != len(order) {
		t.Fatalf("%d outcomes, %v", len(out), err)
	}
	for i, d := range out {
		if d.JobID != order[i].ID || d.MsgKey == "" || d.Attempt != 1 {
			t.Errorf("outcome %d: %+v; want job %d dispatched", i, d, order[i].ID)
		}
	}
	if out[0].MsgKey == out[1].MsgKey || out[1].MsgKey != out[2].MsgKey || out[2].MsgKey != out[3].MsgKey {
		t.Errorf("messages %v: want the pinned job's own, the others' one", out)
	}
}

// planStart loads flow f's jobs as the scheduler's start does (caller 1) and plans
// its DAG: the jobs and each one's dependents.
func planStart(t *testing.T, db *store.DB, f *model.Flow) ([]*model.Job, map[uint32][]uint32) {
	t.Helper()
	jobs, err := db.LoadStartJobs(context.Background(), 1, f.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := store.PlanDAG(f, jobs)
	if err != nil {
		t.Fatal(err)
	}
	return jobs, deps
}

// storetestStart starts flow f as the scheduler's start does, without its dispatch,
// and returns its jobs (as loaded for the start) and its ready nodes.
func storetestStart(t *testing.T, db *store.DB, f *model.Flow) ([]*model.Job, []uint32) {
	t.Helper()
	ctx := context.Background()
	jobs, deps := planStart(t, db, f)
	ready, _, _, err := db.StartFlow(ctx, f, jobs, deps, "1")
	if err != nil {
		t.Fatal(err)
	}
	return jobs, ready
}

// DispatchStarted (flow_start_dispatch) keeps dispatch's rule for each node
// (lib_dispatch's node_why): a paused flow's, a held flow's and a node whose retry is
// not due stay ready and are answered why; once none holds, they are dispatched.
func TestDispatchStartedKeepsDispatchsRule(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	ids := startDispatchJobs(t, s)
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 1, Jobs: ids[:3]}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, _ := storetestStart(t, db, f)
	rdb := srv.Client(t, int(db.ContextID))
	dag := keys.DAG(f.ID)
	dispatch := func(want string) {
		t.Helper()
		out, err := db.DispatchStarted(ctx, f.ID, 1, jobs, "scheduler", time.Now())
		if err != nil || len(out) != len(jobs) {
			t.Fatalf("%d outcomes, %v", len(out), err)
		}
		for i, d := range out {
			if want != "" && (d.MsgKey != "" || d.Why != want) {
				t.Fatalf("job %d: %+v, want not dispatched: %s", jobs[i].ID, d, want)
			}
			if want == "" && (d.MsgKey == "" || d.Attempt != 1) {
				t.Fatalf("job %d: %+v, want dispatched", jobs[i].ID, d)
			}
			if s := rdb.HGet(ctx, dag, "s:"+u32(jobs[i].ID)).Val(); want != "" && s != string(model.NodeReady) {
				t.Fatalf("job %d's node %q, want it left ready", jobs[i].ID, s)
			}
		}
	}
	if changed, err := db.PauseFlow(ctx, f.ID, "pause", "7", "hold"); err != nil || !changed {
		t.Fatalf("pause: %v %v", changed, err)
	}
	dispatch("paused")
	if changed, err := db.PauseFlow(ctx, f.ID, "resume", "7", "go"); err != nil || !changed {
		t.Fatalf("resume: %v %v", changed, err)
	}
	rdb.HSet(ctx, dag, "hold", "retry")
	dispatch("held")
	rdb.HDel(ctx, dag, "hold")
	later := time.Now().Add(time.Hour).UnixMilli()
	for _, j := range jobs {
		rdb.HSet(ctx, dag, "due:"+u32(j.ID), later)
	}
	dispatch("not due")
	for _, j := range jobs {
		rdb.HDel(ctx, dag, "due:"+u32(j.ID))
	}
	dispatch("")
}
