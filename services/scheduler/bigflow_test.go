package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// logCommands logs every Redis command from here on (SLOWLOG, threshold 0) and
// returns a function that gives the commands logged since, each as its arguments.
func logCommands(t *testing.T) func() [][]string {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, 0)
	for _, kv := range [][2]string{{"slowlog-max-len", "1000000"}, {"slowlog-log-slower-than", "0"}} {
		if err := rc.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = rc.ConfigSet(context.Background(), "slowlog-log-slower-than", "10000").Err() })
	if err := rc.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	return func() [][]string {
		logs, err := rc.SlowLogGet(ctx, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		out := make([][]string, len(logs))
		for i, l := range logs {
			out[i] = l.Args
		}
		return out
	}
}

// checkNoWholeRead fails when one of the commands read the whole DAG hash of flow
// (HGETALL, HKEYS or HVALS: O(flow) in one command).
func checkNoWholeRead(t *testing.T, cmds [][]string, flowID uint32) {
	t.Helper()
	for _, c := range cmds {
		if len(c) < 2 || c[1] != keys.DAG(flowID) {
			continue
		}
		switch strings.ToLower(c[0]) {
		case "hgetall", "hkeys", "hvals":
			t.Fatalf("%s of the whole DAG hash: one command over the whole flow", strings.Join(c, " "))
		}
	}
}

// counterValue reads a counter of the registry with the label outcome.
func counterValue(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A failure whose cascade cancels more nodes than one call examines
// (store.CascadeChunk) counts each of them once as a cancelled end, the ones its own
// call cancelled and the ones the scheduler's cascade calls do, from what the scripts
// report: the DAG is never read whole.
func TestFailureCountsEveryCancelledDependent(t *testing.T) {
	ctx := context.Background()
	st := openFlushed(t)
	if _, _, err := st.CreateContext(ctx, &model.Context{ID: 8, Admins: []uint32{1}}, "operator"); err != nil {
		t.Fatal(err)
	}
	root, _, err := st.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 8, Script: "false", ScriptType: "sh"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	n := 2*store.CascadeChunk + 10
	jobs := make([]*model.Job, n)
	for i := range jobs {
		jobs[i] = &model.Job{CallerID: 1, ContextID: 8, Script: "true", ScriptType: "sh", Dependends: []uint32{root.ID}}
	}
	ids := []uint32{root.ID}
	for _, r := range st.CreateJobs(ctx, jobs, "1") {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, r.Job.ID)
	}
	f, _, err := st.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 8, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: reg, retryBase: time.Second, retryCap: time.Second, sweepEvery: time.Minute})
	h := &handler{eng: e}
	if _, err := e.startFlow(ctx, 8, f.ID, "1", time.Time{}); err != nil {
		t.Fatal(err)
	}
	logged := logCommands(t)
	end := &herov1.JobDoneRequest{ContextId: 8, FlowId: f.ID, CallerId: 1, JobId: root.ID, Attempt: 1, Status: string(model.JobError), Error: "boom"}
	if _, err := h.JobsDone(ctx, &herov1.JobsDoneRequest{Ends: []*herov1.JobDoneRequest{end}}); err != nil {
		t.Fatal(err)
	}
	checkNoWholeRead(t, logged(), f.ID)
	if got := counterValue(t, reg, "hero_job_ends_total", "cancelled"); got != float64(store.CascadeChunk) {
		t.Fatalf("after the failure's own call: %v cancelled ends counted, want %d", got, store.CascadeChunk)
	}
	db, err := st.Ctx(8)
	if err != nil {
		t.Fatal(err)
	}
	// the rest, as the due loop's cascade item makes it
	e.cascade(ctx, db, store.DueItem{ContextID: 8, FlowID: f.ID, CallerID: 1, Cascade: true})
	if got := counterValue(t, reg, "hero_job_ends_total", "cancelled"); got != float64(n) {
		t.Fatalf("%v cancelled ends counted, want the %d dependents", got, n)
	}
	if g, err := db.LoadFlow(ctx, f.ID); err != nil || g.Status != model.FlowError {
		t.Fatalf("the flow after the cascade: %+v, %v", g, err)
	}
}

// A resumed flow's ready nodes are dispatched from the DAG read in bounded pages
// (store.SweepDAG), never with one command over the whole hash; those ready since the
// start get their jobs marked ready as of the flow's start.
func TestResumedFlowDispatchesWithoutReadingTheWholeDAG(t *testing.T) {
	ctx := context.Background()
	st, f, ids := withFlow(t, 9, 300)
	db, err := st.Ctx(9)
	if err != nil {
		t.Fatal(err)
	}
	storetest.StartFlow(t, db, f) // the start alone: its nodes ready, not dispatched
	started, err := db.LoadFlow(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), retryBase: time.Second, retryCap: time.Second, sweepEvery: time.Minute})
	logged := logCommands(t)
	if err := e.dispatchReady(ctx, 9, f.ID); err != nil {
		t.Fatal(err)
	}
	checkNoWholeRead(t, logged(), f.ID)
	rc := srv.Client(t, 9)
	for _, id := range ids {
		node := rc.HGet(ctx, keys.DAG(f.ID), "s:"+strconv.FormatUint(uint64(id), 10)).Val()
		ready := rc.HGet(ctx, keys.Job(1, id), "ready_at_ms").Val()
		if node != string(model.NodeDispatched) || ready != strconv.FormatInt(started.StartedAtMs, 10) {
			t.Fatalf("job %d after the resume's dispatch: node %q, ready_at_ms %q (the flow started at %d)", id, node, ready, started.StartedAtMs)
		}
	}
}
