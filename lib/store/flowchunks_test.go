package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
)

// nodeStates reads a flow's node states (s:<id> of its DAG) and its jobs' statuses
// and errors.
func nodeStates(t *testing.T, db *store.DB, f *model.Flow) (nodes map[uint32]string, jobs map[uint32][2]string, dag map[string]string) {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, int(db.ContextID))
	dag = rc.HGetAll(ctx, keys.DAG(f.ID)).Val()
	nodes = map[uint32]string{}
	for _, id := range f.Jobs {
		nodes[id] = dag[fmt.Sprint("s:", id)]
	}
	cmds := make([]*redis.SliceCmd, len(f.Jobs))
	if _, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range f.Jobs {
			cmds[i] = p.HMGet(ctx, keys.Job(1, id), "status", "error")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	jobs = map[uint32][2]string{}
	for i, id := range f.Jobs {
		v := cmds[i].Val()
		st, _ := v[0].(string)
		e, _ := v[1].(string)
		jobs[id] = [2]string{st, e}
	}
	return nodes, jobs, dag
}

// checkCancelled checks a cancelled flow whose nodes had not started: every node
// cancelled, every job error with the cancel's reason, the flow ended error with no
// cancel under way (no cancelling, no hold), and not active.
func checkCancelled(t *testing.T, db *store.DB, f *model.Flow) {
	t.Helper()
	ctx := context.Background()
	nodes, jobs, dag := nodeStates(t, db, f)
	for _, id := range f.Jobs {
		if nodes[id] != string(model.NodeCancelled) || jobs[id][0] != string(model.JobError) || jobs[id][1] != "cancelled by actor op" {
			t.Fatalf("job %d after the cancel: node %q, job %v", id, nodes[id], jobs[id])
		}
	}
	if dag["terminal"] != fmt.Sprint(len(f.Jobs)) || dag["cancelled"] != fmt.Sprint(len(f.Jobs)) || dag["hold"] != "" {
		t.Fatalf("the DAG's counters: terminal %q cancelled %q hold %q", dag["terminal"], dag["cancelled"], dag["hold"])
	}
	g, err := db.LoadFlow(ctx, f.ID)
	if err != nil || g.Status != model.FlowError || g.CancelledBy != "op" {
		t.Fatalf("the flow after its cancel: %+v, %v", g, err)
	}
	if v := srv.Client(t, int(db.ContextID)).HGet(ctx, keys.Flow(f.ID), "cancelling").Val(); v != "" {
		t.Fatalf("cancelling %q left", v)
	}
	if srv.Client(t, 0).SIsMember(ctx, keys.ActiveFlows, fmt.Sprintf("%d:%d", db.ContextID, f.ID)).Val() {
		t.Fatal("the cancelled flow is still active")
	}
}

// checkRetried checks a cancelled flow retried: every node of the first layer ready
// (its job dispatched), every other pending (its job waiting), the counters at 0, the
// flow started with no retry under way.
func checkRetried(t *testing.T, db *store.DB, f *model.Flow, layers [][]uint32) {
	t.Helper()
	ctx := context.Background()
	nodes, jobs, dag := nodeStates(t, db, f)
	for l, ids := range layers {
		for _, id := range ids {
			want, wantJob := model.NodePending, model.JobWaitingForPrerequisites
			if l == 0 {
				want, wantJob = model.NodeReady, model.JobDispatched
			}
			if nodes[id] != string(want) || jobs[id][0] != string(wantJob) || jobs[id][1] != "" {
				t.Fatalf("layer %d, job %d after the retry: node %q, job %v", l, id, nodes[id], jobs[id])
			}
		}
	}
	if dag["terminal"] != "0" || dag["cancelled"] != "0" || dag["failed"] != "0" || dag["hold"] != "" {
		t.Fatalf("the DAG's counters: terminal %q cancelled %q failed %q hold %q", dag["terminal"], dag["cancelled"], dag["failed"], dag["hold"])
	}
	g, err := db.LoadFlow(ctx, f.ID)
	if err != nil || g.Status != model.FlowStarted || g.CancelledBy != "" || g.Error != "" {
		t.Fatalf("the flow after its retry: %+v, %v", g, err)
	}
	if v := srv.Client(t, int(db.ContextID)).HGet(ctx, keys.Flow(f.ID), "retrying").Val(); v != "" {
		t.Fatalf("retrying %q left", v)
	}
	if !srv.Client(t, 0).SIsMember(ctx, keys.ActiveFlows, fmt.Sprintf("%d:%d", db.ContextID, f.ID)).Val() {
		t.Fatal("the retried flow is not active")
	}
}

// A flow of 20,000 jobs (20 layers of 1,000) is cancelled and retried in chunks of
// CancelChunk jobs, one short script call each (and one to begin, one to end the
// retry), never one call over the whole flow; the cancel and the retry mean what
// they mean whole. A cancel and a retry interrupted midway (their process stopped)
// show as under way — the cancelled flow still started with cancelled_by set, the
// retried one still error —, keep the flow's nodes from being dispatched meanwhile
// (the DAG's hold), and are finished where they were by ResumeFlowWork (the
// scheduler's safety sweep).
func TestBigFlowCancelAndRetryInChunks(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 35)
	widths := make([]int, 20)
	for i := range widths {
		widths[i] = 1000
	}
	f, layers := createLayers(t, s, 35, widths...)
	n := len(f.Jobs)
	chunks := (n + store.CancelChunk - 1) / store.CancelChunk
	storetest.StartFlow(t, db, f)

	cancelAndRetryWhole(t, db, f, layers, chunks)
	cancelAndRetryInterrupted(t, db, f, layers)
}

// cancelAndRetryWhole: a cancel, then a retry, each in chunks, in one call each.
func cancelAndRetryWhole(t *testing.T, db *store.DB, f *model.Flow, layers [][]uint32, chunks int) {
	ctx := context.Background()
	n := len(f.Jobs)
	before := fcalls(t)
	stopping, ended, err := db.CancelFlow(ctx, f.ID, "op", 0)
	if err != nil || ended || len(stopping) != 0 {
		t.Fatalf("cancel: stopping %v, ended %v, %v", stopping, ended, err)
	}
	if calls := fcalls(t) - before; calls != chunks+1 {
		t.Errorf("%d script calls to cancel a flow of %d jobs, want %d (begin, %d chunks)", calls, n, chunks+1, chunks)
	}
	checkCancelled(t, db, f)
	if _, ended, err := db.CancelFlow(ctx, f.ID, "op", 0); err != nil || !ended {
		t.Fatalf("a second cancel: ended %v, %v", ended, err)
	}

	// a whole retry
	before = fcalls(t)
	ready, err := db.RetryFlow(ctx, f.ID, "op")
	if err != nil {
		t.Fatal(err)
	}
	if calls := fcalls(t) - before; calls != chunks+2 {
		t.Errorf("%d script calls to retry a flow of %d jobs, want %d (begin, %d chunks, commit)", calls, n, chunks+2, chunks)
	}
	if !slices.Equal(ready, layers[0]) {
		t.Fatalf("the retry made %d nodes ready, want the first layer's %d", len(ready), len(layers[0]))
	}
	checkRetried(t, db, f, layers)
}

// cancelAndRetryInterrupted: a cancel, then a retry, each interrupted midway and
// finished by ResumeFlowWork.
func cancelAndRetryInterrupted(t *testing.T, db *store.DB, f *model.Flow, layers [][]uint32) {
	ctx := context.Background()
	rc := srv.Client(t, int(db.ContextID))
	// a cancel interrupted after 3 chunks: under way, and no node dispatched meanwhile
	if err := db.CancelPart(ctx, f.ID, "op", 3); err != nil {
		t.Fatal(err)
	}
	g, err := db.LoadFlow(ctx, f.ID)
	if err != nil || g.Status != model.FlowStarted || g.CancelledBy != "op" {
		t.Fatalf("a cancel under way: the flow %+v, %v", g, err)
	}
	if v := rc.HGet(ctx, keys.Flow(f.ID), "cancelling").Val(); v != fmt.Sprint(3*store.CancelChunk, " nodes") {
		t.Fatalf("a cancel under way: cancelling %q", v)
	}
	late := layers[0][len(layers[0])-1] // in a chunk not done yet: still ready
	jobs, err := db.LoadDispatchJobs(ctx, 1, []uint32{late})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0); err != nil || res[0].MsgKey != "" || res[0].Why != "held" {
		t.Fatalf("a dispatch while the cancel is under way: %+v, %v", res, err)
	}
	w, err := db.ResumeFlowWork(ctx, f.ID, "scheduler", 0)
	if err != nil || !w.Cancelled || w.Retried {
		t.Fatalf("resume: %+v, %v", w, err)
	}
	checkCancelled(t, db, f)
	retryInterrupted(t, db, f, layers, jobs)
}

// retryInterrupted: a retry interrupted midway, no node dispatched (jobs: one of the
// first layer's) until ResumeFlowWork finishes it.
func retryInterrupted(t *testing.T, db *store.DB, f *model.Flow, layers [][]uint32, jobs []*model.Job) {
	ctx := context.Background()
	// a retry interrupted after 5 chunks: still error, no node dispatched meanwhile
	part, err := db.RetryPart(ctx, f.ID, 5)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := db.LoadFlow(ctx, f.ID); err != nil || g.Status != model.FlowError {
		t.Fatalf("a retry under way: the flow %+v, %v", g, err)
	}
	if res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0); err != nil || res[0].MsgKey != "" {
		t.Fatalf("a dispatch while the retry is under way: %+v, %v", res, err)
	}
	w, err := db.ResumeFlowWork(ctx, f.ID, "scheduler", 0)
	if err != nil || !w.Retried || w.Cancelled {
		t.Fatalf("resume: %+v, %v", w, err)
	}
	if got := append(part, w.Ready...); !slices.Equal(got, layers[0]) {
		t.Fatalf("the retry's parts made %d nodes ready, want the first layer's %d", len(got), len(layers[0]))
	}
	checkRetried(t, db, f, layers)
	if res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0); err != nil || res[0].MsgKey == "" {
		t.Fatalf("a dispatch after the retry: %+v, %v", res, err)
	}
	if w, err := db.ResumeFlowWork(ctx, f.ID, "scheduler", 0); err != nil || w.Cancelled || w.Retried || w.Cascaded {
		t.Fatalf("resume with nothing under way: %+v, %v", w, err)
	}
}

// A failed node's cancel of its transitive dependents examines CascadeChunk of them in
// the completion's call and leaves the others to flow_cascade_chunk calls (the
// flow's cascade list, coord:cascade:<flow>, and coord:due's cascade member), each of
// CascadeChunk; the last ends the flow (error) and the list goes. A cascade
// interrupted midway is finished by ResumeFlowWork.
func TestFailureCascadeInChunks(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 36)
	ctx := context.Background()
	rc := srv.Client(t, 36)
	n := 4*store.CascadeChunk + 100
	f, layers := createLayers(t, s, 36, 1, n)
	jobs, _ := storetest.StartFlow(t, db, f)
	if _, err := db.DispatchStarted(ctx, f.ID, 1, jobs[:1], "scheduler", time.Now()); err != nil {
		t.Fatal(err)
	}
	root := layers[0][0]
	before := fcalls(t)
	res, errs := db.CompleteNodes(ctx, []store.JobEnd{{FlowID: f.ID, CallerID: 1, JobID: root, Attempt: 1, Status: model.JobError, Error: "boom",
		Fatal: true, Retries: -1, Actor: "scheduler"}})
	if errs[0] != nil || !res[0].Applied || res[0].FlowFinished {
		t.Fatalf("the failure: %+v, %v", res[0], errs[0])
	}
	if left := rc.LLen(ctx, keys.FlowCascade(f.ID)).Val(); left != int64(n-store.CascadeChunk) {
		t.Fatalf("the completion left %d nodes to examine, want %d", left, n-store.CascadeChunk)
	}
	due := srv.Client(t, 0).ZRange(ctx, keys.Due, 0, -1).Val()
	if want := fmt.Sprintf("cascade:36:%d:1:0", f.ID); !slices.Contains(due, want) {
		t.Fatalf("coord:due %v, want %s", due, want)
	}
	// one call of the cascade, then the process stops: the sweep finishes it
	if left, err := db.CascadeOnce(ctx, f.ID); err != nil || left != int64(n-2*store.CascadeChunk) {
		t.Fatalf("a cascade call left %d, want %d: %v", left, n-2*store.CascadeChunk, err)
	}
	if g, _ := db.LoadFlow(ctx, f.ID); g.Status != model.FlowStarted {
		t.Fatalf("a cascade under way: the flow is %s, want started", g.Status)
	}
	w, err := db.ResumeFlowWork(ctx, f.ID, "scheduler", 0)
	if err != nil || !w.Cascaded {
		t.Fatalf("resume: %+v, %v", w, err)
	}
	// the completion's call, then one a CascadeChunk of the others
	if calls, want := fcalls(t)-before, (n+store.CascadeChunk-1)/store.CascadeChunk; calls != want {
		t.Errorf("%d script calls for a failure reaching %d nodes, want %d", calls, n, want)
	}
	checkCascaded(t, db, f, layers)
}

// checkCascaded checks TestFailureCascadeInChunks's flow after its cascade: every
// dependent cancelled for the root's failure, the flow ended error, the list gone, and
// nothing left to resume or cascade.
func checkCascaded(t *testing.T, db *store.DB, f *model.Flow, layers [][]uint32) {
	ctx := context.Background()
	rc := srv.Client(t, int(db.ContextID))
	root := layers[0][0]
	nodes, js, _ := nodeStates(t, db, f)
	reason := fmt.Sprintf("cancelled: job %d failed", root)
	for _, id := range layers[1] {
		if nodes[id] != string(model.NodeCancelled) || js[id][0] != string(model.JobError) || js[id][1] != reason {
			t.Fatalf("dependent %d: node %q, job %v", id, nodes[id], js[id])
		}
	}
	g, err := db.LoadFlow(ctx, f.ID)
	if err != nil || g.Status != model.FlowError || !strings.Contains(g.Error, "boom") {
		t.Fatalf("the flow after the cascade: %+v, %v", g, err)
	}
	if rc.Exists(ctx, keys.FlowCascade(f.ID)).Val() != 0 {
		t.Fatal("the cascade list is left")
	}
	if w, err := db.ResumeFlowWork(ctx, f.ID, "scheduler", 0); err != nil || w.Cascaded {
		t.Fatalf("resume with nothing left: %+v, %v", w, err)
	}
	// the due member left for the scheduler finds nothing to do
	if c, err := db.CascadeFlow(ctx, f.ID, "scheduler", 0); err != nil || c.Status != "" || c.Calls != 1 || c.Cancelled != 0 {
		t.Fatalf("a cascade with nothing left: %+v, %v", c, err)
	}
}
