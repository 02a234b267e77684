package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

var srv *redistest.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// openFlushed opens a store on the test's Redis, flushed.
func openFlushed(t *testing.T) *store.Store {
	t.Helper()
	srv.Flush(t)
	st, err := store.Open(context.Background(), store.Options{URL: srv.URL, ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// withFlow opens a store on a flushed Redis with context ctxID and a flow (not
// started) of n independent sh jobs.
func withFlow(t *testing.T, ctxID uint32, n int) (*store.Store, *model.Flow, []uint32) {
	t.Helper()
	st := openFlushed(t)
	ctx := context.Background()
	if _, _, err := st.CreateContext(ctx, &model.Context{ID: ctxID, Admins: []uint32{1}}, "operator"); err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	for range n {
		j, _, err := st.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: ctxID, Script: "true", ScriptType: "sh"}, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	f, _, err := st.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: ctxID, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	return st, f, ids
}

// JobsDone applies a group of ends (the flow finishes); a group with one bad end is
// refused whole, naming it, and changes nothing.
func TestJobsDone(t *testing.T) {
	ctx := context.Background()
	st, f, ids := withFlow(t, 4, 3)
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), retryBase: time.Second, retryCap: time.Second, sweepEvery: time.Minute})
	h := &handler{eng: e}
	if _, err := e.startFlow(ctx, 4, f.ID, "1", time.Time{}); err != nil {
		t.Fatal(err)
	}
	rc := srv.Client(t, 4)
	node := func(id uint32) string {
		return rc.HGet(ctx, keys.DAG(f.ID), "s:"+strconv.FormatUint(uint64(id), 10)).Val()
	}
	end := func(id uint32, st string) *herov1.JobDoneRequest {
		return &herov1.JobDoneRequest{ContextId: 4, FlowId: f.ID, CallerId: 1, JobId: id, Attempt: 1, Status: st}
	}

	_, err := h.JobsDone(ctx, &herov1.JobsDoneRequest{Ends: []*herov1.JobDoneRequest{end(ids[0], "finished"), end(ids[1], "running")}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ends[1].status") {
		t.Fatalf("a group with a bad status: %v", err)
	}
	if s := node(ids[0]); s != "dispatched" {
		t.Fatalf("a refused group changed node %d to %q", ids[0], s)
	}

	if _, err := h.JobsDone(ctx, &herov1.JobsDoneRequest{Ends: []*herov1.JobDoneRequest{end(ids[0], "finished"), end(ids[1], "finished"), end(ids[2], "finished")}}); err != nil {
		t.Fatal(err)
	}
	fl, err := st.Ctx(4)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fl.LoadFlow(ctx, f.ID)
	if err != nil || got.Status != model.FlowFinished {
		t.Fatalf("flow after every end: %+v %v", got, err)
	}
	// The same group again changes nothing (each end is already applied).
	if _, err := h.JobsDone(ctx, &herov1.JobsDoneRequest{Ends: []*herov1.JobDoneRequest{end(ids[0], "finished"), end(ids[1], "error")}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := fl.LoadFlow(ctx, f.ID); got.Status != model.FlowFinished {
		t.Fatalf("a repeated report changed the flow to %q", got.Status)
	}
}

// A start retried after its reply was lost gets the flow even when it has ended since;
// a flow cancelled before it was ever started is refused.
func TestStartRetriedAfterTheEnd(t *testing.T) {
	ctx := context.Background()
	st, f, ids := withFlow(t, 4, 1)
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), retryBase: time.Second, retryCap: time.Second, sweepEvery: time.Minute})
	h := &handler{eng: e}
	if _, err := e.startFlow(ctx, 4, f.ID, "1", time.Time{}); err != nil {
		t.Fatal(err)
	}
	end := &herov1.JobDoneRequest{ContextId: 4, FlowId: f.ID, CallerId: 1, JobId: ids[0], Attempt: 1, Status: "finished"}
	if _, err := h.JobsDone(ctx, &herov1.JobsDoneRequest{Ends: []*herov1.JobDoneRequest{end}}); err != nil {
		t.Fatal(err)
	}
	got, err := e.startFlow(ctx, 4, f.ID, "1", time.Time{})
	if err != nil || got.Status != model.FlowFinished {
		t.Fatalf("a start retried after the end: %+v %v", got, err)
	}

	db, err := st.Ctx(4)
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := st.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 4, Script: "true", ScriptType: "sh"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	never, _, err := st.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 4, Jobs: []uint32{j.ID}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CancelFlow(ctx, never.ID, "1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := e.startFlow(ctx, 4, never.ID, "1", time.Time{}); !errors.Is(err, errAlreadyEnded) {
		t.Fatalf("starting a flow cancelled before its start: %v", err)
	}
}

// The safety sweep dispatches the nodes a start found ready when their dispatch never
// happened (a crash in between), and marks their jobs ready as of the flow's start,
// as the start's own dispatch would have.
func TestSweepDispatchesNodesReadyAtTheStart(t *testing.T) {
	ctx := context.Background()
	st, f, ids := withFlow(t, 5, 2)
	db, err := st.Ctx(5)
	if err != nil {
		t.Fatal(err)
	}
	// The start alone, as if the scheduler stopped before dispatching.
	storetest.StartFlow(t, db, f)
	started, err := db.LoadFlow(ctx, f.ID)
	if err != nil || started.StartedAtMs == 0 {
		t.Fatalf("started flow: %+v %v", started, err)
	}
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), retryBase: time.Second, retryCap: time.Second, sweepEvery: time.Minute})
	e.sweep(ctx)
	rc := srv.Client(t, 5)
	for _, id := range ids {
		h := rc.HGetAll(ctx, keys.Job(1, id)).Val()
		node := rc.HGet(ctx, keys.DAG(f.ID), "s:"+strconv.FormatUint(uint64(id), 10)).Val()
		if node != "dispatched" || h["attempt"] != "1" || h["ready_at_ms"] != strconv.FormatInt(started.StartedAtMs, 10) {
			t.Fatalf("job %d after the sweep: node %q, %v (flow started at %d)", id, node, h, started.StartedAtMs)
		}
	}
	if n := rc.LLen(ctx, keys.MsgOut).Val(); n != 1 {
		t.Fatalf("msg_out holds %d messages, want the two jobs' request", n)
	}
}

// A flow may hold handler jobs without a script_type, of an executor named after no
// script type ("mailer#send"): the start plans them, and each of their dispatches —
// the start's, a dependency's end's, a retry's and flow.retry's — puts them on their
// executor's queue, as job.run's does.
func TestFlowOfHandlerJobsWithoutScriptType(t *testing.T) {
	ctx := context.Background()
	st := openFlushed(t)
	if _, _, err := st.CreateContext(ctx, &model.Context{ID: 6, Admins: []uint32{1}}, "operator"); err != nil {
		t.Fatal(err)
	}
	db, err := st.Ctx(6)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateRunner(ctx, 6, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{model.ScriptSh}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"mailer"}); err != nil {
		t.Fatal(err)
	}
	mk := func(j *model.Job) uint32 {
		t.Helper()
		j.CallerID, j.ContextID = 1, 6
		made, _, err := st.CreateJob(ctx, j, "1")
		if err != nil {
			t.Fatal(err)
		}
		return made.ID
	}
	a := mk(&model.Job{ScriptType: model.ScriptSh, Script: "true"})
	b := mk(&model.Job{FunctionName: "mailer#send", Kwargs: []byte(`{"to":"x"}`), Dependends: []uint32{a}, Retries: 1})
	c := mk(&model.Job{FunctionName: "mailer#send", Dependends: []uint32{b}})
	f, _, err := st.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 6, Jobs: []uint32{a, b, c}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), retryBase: time.Millisecond, retryCap: time.Millisecond, sweepEvery: time.Minute})
	if _, err := e.startFlow(ctx, 6, f.ID, "1", time.Time{}); err != nil {
		t.Fatalf("start a flow of handler jobs without script_type: %v", err)
	}
	rc := srv.Client(t, 6)
	queued := func(q string) []string { return rc.LRange(ctx, keys.Queue(q), 0, -1).Val() }
	if got := queued("sh"); !slices.Equal(got, []string{keys.Job(1, a)}) {
		t.Fatalf("queue:sh after the start: %v", got)
	}
	end := func(id, attempt uint32, s model.JobStatus) {
		t.Helper()
		if err := e.jobDone(ctx, 6, store.JobEnd{FlowID: f.ID, CallerID: 1, JobID: id, Attempt: attempt, Status: s, Error: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	end(a, 1, model.JobFinished)
	if got := queued("exec:mailer"); !slices.Equal(got, []string{keys.Job(1, b)}) {
		t.Fatalf("queue:exec:mailer once its dependency finished: %v", got)
	}
	rc.Del(ctx, keys.Queue("exec:mailer")) // as a runner's claim would take it
	end(b, 1, model.JobError)              // a retry is due at once (the backoff is 1 ms)
	deadline := time.Now().Add(time.Minute)
	for len(queued("exec:mailer")) == 0 && time.Now().Before(deadline) {
		e.runDue(ctx)
	}
	if got := queued("exec:mailer"); !slices.Equal(got, []string{keys.Job(1, b)}) {
		t.Fatalf("queue:exec:mailer after the retry: %v", got)
	}
	// Its retries used up, the flow fails; flow.retry dispatches it again.
	rc.Del(ctx, keys.Queue("exec:mailer"))
	end(b, 2, model.JobError)
	if got, err := db.LoadFlow(ctx, f.ID); err != nil || got.Status != model.FlowError {
		t.Fatalf("the flow once job %d failed for good: %+v %v", b, got, err)
	}
	if _, _, err := e.retryFlow(ctx, 6, f.ID, "1"); err != nil {
		t.Fatal(err)
	}
	if got := queued("exec:mailer"); !slices.Equal(got, []string{keys.Job(1, b)}) {
		t.Fatalf("queue:exec:mailer after flow.retry: %v", got)
	}
	if n := rc.LLen(ctx, keys.MsgOut).Val(); n != 0 {
		t.Errorf("msg_out holds %d messages: the jobs a runner here can take go to their queues at once", n)
	}
}
