package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A dispatch of a flow's nodes ready at its start (lua/flow_start_dispatch.lua,
// lib_start's dispatch_ready) reads each job once (one HMGET of its status, its
// creation time and the fields its routing needs, which lib_route then takes instead
// of reading them again), the DAG once for all the nodes (their status, retry and
// attempt: no HINCRBY, no read per node), and the events' cap once a call (no
// ZCARD per event); and what it writes is as before: each job dispatched with attempt
// 1 on its queue, each node dispatched with attempt 1, one job.dispatched event each.
// A dispatch again changes nothing (the nodes are no longer ready).
func TestDispatchReadsEachJobOnce(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	var ids []uint32
	for range 6 {
		j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 1, Script: "true", ScriptType: "sh"}, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 1, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := db.LoadJobs(ctx, 1, f.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := store.PlanDAG(f, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := db.StartFlow(ctx, f, jobs, deps, "1"); err != nil {
		t.Fatal(err)
	}
	queued := rdb.LLen(ctx, "queue:sh").Val()
	events := countEvents(t, model.EventJobDispatched, "")
	last, err := db.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	entries := rdb.XLen(ctx, keys.Events).Val()
	calls := map[string]int{}
	for _, c := range []string{"hget", "hmget", "hincrby", "zcard", "zscore"} {
		calls[c] = commandCalls(t, 1, c)
	}
	out, err := db.DispatchStarted(ctx, f.ID, 1, jobs, "scheduler", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for c, want := range map[string]int{"hget": 0, "hmget": len(ids) + 1, "hincrby": 0, "zcard": 1, "zscore": 0} {
		if n := commandCalls(t, 1, c) - calls[c]; n != want {
			t.Errorf("%s calls: %d; want %d", c, n, want)
		}
	}
	if len(out) != len(ids) {
		t.Fatalf("%d dispatched of %d", len(out), len(ids))
	}
	for _, id := range ids {
		j, err := db.LoadJob(ctx, 1, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != model.JobDispatched || j.Attempt != 1 {
			t.Errorf("job %d: %s, attempt %d; want dispatched, attempt 1", id, j.Status, j.Attempt)
		}
		node := rdb.HMGet(ctx, keys.DAG(f.ID), "s:"+u32(id), "a:"+u32(id)).Val()
		if node[0] != string(model.NodeDispatched) || node[1] != "1" {
			t.Errorf("node %d: %v; want dispatched, attempt 1", id, node)
		}
	}
	if n := rdb.LLen(ctx, "queue:sh").Val() - queued; n != int64(len(ids)) {
		t.Errorf("%d jobs queued; want %d", n, len(ids))
	}
	if n := countEvents(t, model.EventJobDispatched, "") - events; n != len(ids) {
		t.Errorf("%d job.dispatched events; want %d", n, len(ids))
	}
	checkDispatchEvents(t, db, f.ID, ids, last, rdb.XLen(ctx, keys.Events).Val()-entries)
	again, err := db.DispatchStarted(ctx, f.ID, 1, jobs, "scheduler", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range again {
		if d.MsgKey != "" {
			t.Errorf("job %d dispatched again: %+v", ids[i], d)
		}
	}
	if n := rdb.LLen(ctx, "queue:sh").Val() - queued; n != int64(len(ids)) {
		t.Errorf("after a dispatch again: %d jobs queued; want %d", n, len(ids))
	}
}

// checkDispatchEvents checks the events of a dispatch of the jobs ids of flow flow (by
// the scheduler, each a first attempt) after the event id last, which wrote entries
// stream entries: two (lua/lib_state.lua's ev_flush), each event read back in the
// jobs' order, each a position to read on from.
func checkDispatchEvents(t *testing.T, db *store.DB, flow uint32, ids []uint32, last string, entries int64) {
	t.Helper()
	if entries != 2 {
		t.Errorf("%d stream entries for the dispatch of %d jobs; want 2", entries, len(ids))
	}
	evs, err := db.ReadEvents(context.Background(), last, 1000)
	if err != nil || len(evs) != len(ids) {
		t.Fatalf("%d events after the dispatch (%v); want %d", len(evs), err, len(ids))
	}
	for i, e := range evs {
		if e.Type != string(model.EventJobDispatched) || e.JobID != ids[i] || e.FlowID != flow || e.Actor != "scheduler" || e.Status != "dispatched" || e.Detail != "attempt 1" {
			t.Errorf("event %d: %+v", i, e)
		}
	}
	checkEventIDsIncrease(t, evs)
	for i := range evs {
		checkReadOnFrom(t, db, evs, i)
	}
}

// A dispatch reads no job's id (route_fields' first, which only said that the job
// exists): the job's status, which it reads along, says so. A job whose hash holds no
// id field is routed all the same (it went to the router before, as a job missing).
func TestDispatchReadsNoJobID(t *testing.T) {
	s, db := shContextID(t, 60)
	ctx := context.Background()
	rdb := srv.Client(t, 60)
	var ids []uint32
	for range 3 {
		j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 60, Script: "true", ScriptType: "sh"}, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 60, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, _ := storetestStart(t, db, f)
	for _, id := range ids {
		rdb.HDel(ctx, keys.Job(1, id), "id")
	}
	if _, err := db.DispatchStarted(ctx, f.ID, 1, jobs, "scheduler", time.Now()); err != nil {
		t.Fatal(err)
	}
	if n := rdb.LLen(ctx, keys.Queue("sh")).Val(); n != int64(len(ids)) {
		t.Errorf("%d jobs on queue:sh (msg_out %v); want %d", n, rdb.LRange(ctx, keys.MsgOut, 0, -1).Val(), len(ids))
	}
}
