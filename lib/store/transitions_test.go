package store_test

// Direct tests of the transitions (lua/*.lua) that only the e2e suite reached before:
// cancel, delete, flow retry, the DLQ's requeue, the remote ones (materialise, a
// remote result, an inbound message, the acknowledgement) and a plain status change.
// Each checks the script's effect on the keys it names and its refusals.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// member is a job's member in the job indexes and the DLQ ("<caller>:<id>").
func member(j *model.Job) string { return itoa(j.CallerID) + ":" + itoa(j.ID) }

// eventTypes lists the types of a context's events, oldest first.
func eventTypes(t *testing.T, db *store.DB) []string {
	t.Helper()
	evs, err := db.ReadEvents(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// context10 opens the store with context 10 and returns it, with clients of the
// context's DB and of DB 0.
func context10(t *testing.T) (*store.Store, *store.DB, *redis.Client, *redis.Client) {
	t.Helper()
	s := open(t)
	return s, mustCtx(t, s, 10), srv.Client(t, 10), srv.Client(t, 0)
}

// wantEvent fails the test unless the context's stream holds an event of the type.
func wantEvent(t *testing.T, db *store.DB, typ model.EventType) {
	t.Helper()
	if !hasEvent(t, db, typ) {
		t.Fatalf("no %s event among %v", typ, eventTypes(t, db))
	}
}

func hasEvent(t *testing.T, db *store.DB, typ model.EventType) bool {
	t.Helper()
	for _, e := range eventTypes(t, db) {
		if e == string(typ) {
			return true
		}
	}
	return false
}

// inZSet reports whether m is a member of the sorted set key.
func inZSet(t *testing.T, c *redis.Client, key, m string) bool {
	t.Helper()
	err := c.ZScore(context.Background(), key, m).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return err == nil
}

func exists(t *testing.T, c *redis.Client, key string) bool {
	t.Helper()
	return c.Exists(context.Background(), key).Val() == 1
}

// standaloneJob creates a job of no flow (caller 1, script type sh).
func standaloneJob(t *testing.T, s *store.Store, db *store.DB) *model.Job {
	t.Helper()
	j, _, err := s.CreateJob(context.Background(), &model.Job{CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "sh"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// failStandalone dispatches a standalone job and ends its attempt in error with no
// retry left: it goes to the DLQ, and its retention starts.
func failStandalone(t *testing.T, db *store.DB, j *model.Job) {
	t.Helper()
	ctx := context.Background()
	if _, _, ok, why, err := db.Dispatch(ctx, 0, j, "scheduler", 0); err != nil || !ok {
		t.Fatalf("dispatch job %d: %v %s", j.ID, err, why)
	}
	if err := db.SetJobStatus(ctx, j.CallerID, j.ID, model.JobError, "error", "boom"); err != nil {
		t.Fatal(err)
	}
	res, err := db.CompleteStandalone(ctx, store.JobEnd{CallerID: j.CallerID, JobID: j.ID, Attempt: 1, Status: model.JobError, Error: "boom", Actor: "scheduler", Retention: time.Hour})
	if err != nil || !res.Applied {
		t.Fatalf("end job %d: %+v %v", j.ID, res, err)
	}
}

func TestCancelFlowNotStarted(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	a, b := standaloneJob(t, s, db), standaloneJob(t, s, db)
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 10, Jobs: []uint32{a.ID, b.ID}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	stopping, ended, err := db.CancelFlow(ctx, f.ID, "7", time.Hour)
	if err != nil || ended || len(stopping) != 0 {
		t.Fatalf("cancel: stopping %v, ended %v, %v", stopping, ended, err)
	}
	if st := c.HGet(ctx, keys.Flow(f.ID), "status").Val(); st != string(model.FlowError) {
		t.Fatalf("flow status %q, want error", st)
	}
	if by := c.HGet(ctx, keys.Flow(f.ID), "cancelled_by").Val(); by != "7" {
		t.Fatalf("cancelled_by %q", by)
	}
	for _, j := range []*model.Job{a, b} {
		h := c.HGetAll(ctx, keys.Job(1, j.ID)).Val()
		if h["status"] != string(model.JobError) || h["error"] != "cancelled by actor 7" {
			t.Fatalf("job %d after the cancel: %v", j.ID, h)
		}
		if !inZSet(t, c, keys.StatusIndex(keys.JobIndex, "error"), member(j)) || inZSet(t, c, keys.StatusIndex(keys.JobIndex, "dispatched"), member(j)) {
			t.Fatalf("job %d is not indexed as error only", j.ID)
		}
	}
	if !inZSet(t, c, keys.StatusIndex(keys.FlowIndex, "error"), itoa(f.ID)) {
		t.Fatal("the flow is not in the error index")
	}
	if !inZSet(t, srv.Client(t, 0), keys.Expire, "10:flow:"+itoa(f.ID)) {
		t.Fatal("the cancelled flow's retention did not start")
	}
	wantEvent(t, db, model.EventFlowCancelled)
	wantEvent(t, db, model.EventFlowError)
	// A flow that has ended is left alone; one that does not exist is refused.
	if _, ended, err := db.CancelFlow(ctx, f.ID, "7", time.Hour); err != nil || !ended {
		t.Fatalf("cancel of an ended flow: ended %v, %v", ended, err)
	}
	if _, _, err := db.CancelFlow(ctx, 999, "7", time.Hour); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancel of a missing flow: %v", err)
	}
}

func TestCancelFlowStopsRunningJobs(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	f, jobs := flowWith(t, s, db, 3)
	if _, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	enqueueJobs(t, db, "queue:sh", jobs[:1])
	claim, outcome, _, err := db.ClaimStart(ctx, "queue:sh", "w1", time.Minute, "")
	if err != nil || claim == nil || outcome != store.StartRun {
		t.Fatalf("claim start: %v %v %v", claim, outcome, err)
	}
	running := jobs[0]
	stopping, ended, err := db.CancelFlow(ctx, f.ID, "7", time.Hour)
	if err != nil || ended || len(stopping) != 1 || stopping[0] != running.ID {
		t.Fatalf("cancel: stopping %v (want [%d]), ended %v, %v", stopping, running.ID, ended, err)
	}
	// The flow waits for its running job; the others are cancelled at once.
	if st := c.HGet(ctx, keys.Flow(f.ID), "status").Val(); st != string(model.FlowStarted) {
		t.Fatalf("flow status %q, want started until its running job stops", st)
	}
	dag := c.HGetAll(ctx, keys.DAG(f.ID)).Val()
	for _, j := range jobs[1:] {
		if dag["s:"+itoa(j.ID)] != string(model.NodeCancelled) {
			t.Fatalf("node %d: %q, want cancelled", j.ID, dag["s:"+itoa(j.ID)])
		}
		if h := c.HGetAll(ctx, keys.Job(1, j.ID)).Val(); h["status"] != "error" || h["stop_requested"] != "1" {
			t.Fatalf("job %d: %v", j.ID, h)
		}
	}
	if dag["terminal"] != "2" || dag["s:"+itoa(running.ID)] != string(model.NodeRunning) {
		t.Fatalf("DAG %v", dag)
	}
	if c.HGet(ctx, keys.Job(1, running.ID), "stop_requested").Val() != "1" {
		t.Fatal("the running job has no stop request")
	}
	ctl := srv.Client(t, 0).LRange(ctx, keys.StopList("w1"), 0, -1).Val()
	if len(ctl) != 1 || ctl[0] != "10:1:"+itoa(running.ID) {
		t.Fatalf("stop list of w1: %v", ctl)
	}
	// Its end finishes the flow: error, cancelled.
	res, err := db.CompleteNode(ctx, store.JobEnd{FlowID: f.ID, CallerID: 1, JobID: running.ID, Attempt: 1, Status: model.JobError, Error: "stopped", Retries: -1, Actor: "scheduler"})
	if err != nil || !res.Applied || res.FlowStatus != model.FlowError {
		t.Fatalf("end of the stopped job: %+v %v", res, err)
	}
	if s := c.HGet(ctx, keys.DAG(f.ID), "s:"+itoa(running.ID)).Val(); s != string(model.NodeCancelled) {
		t.Fatalf("the stopped node is %q, want cancelled", s)
	}
	if inZSet(t, c, keys.DLQ, member(running)) {
		t.Fatal("a job stopped by a cancel went to the DLQ")
	}
}

func TestDeleteJob(t *testing.T) {
	s, db, c, c0 := context10(t)
	ctx := context.Background()
	j := standaloneJob(t, s, db)
	failStandalone(t, db, j)
	jk := keys.Job(1, j.ID)
	if err := db.AppendLog(ctx, 1, j.ID, []byte("out"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.LPush(ctx, "queue:sh", jk).Err(); err != nil {
		t.Fatal(err)
	}
	msgs := jobMsgs(t, c, 1, j.ID) // by number: message:1:<n>
	if len(msgs) != 1 || !exists(t, c, "message:1:"+msgs[0]) || !inZSet(t, c, keys.DLQ, member(j)) || !inZSet(t, c0, keys.Expire, "10:job:"+member(j)) {
		t.Fatalf("before the delete: messages %v, DLQ and retention expected", msgs)
	}
	msgs[0] = "message:1:" + msgs[0]
	if err := db.DeleteJob(ctx, 1, j.ID, false, "7"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{jk, keys.JobLog(1, j.ID), keys.JobMessages(1, j.ID), msgs[0]} {
		if exists(t, c, k) {
			t.Fatalf("%s is left after the delete", k)
		}
	}
	for _, z := range []string{keys.JobIndex, keys.StatusIndex(keys.JobIndex, "error"), keys.DLQ} {
		if inZSet(t, c, z, member(j)) {
			t.Fatalf("the job is left in %s", z)
		}
	}
	if c.LLen(ctx, "queue:sh").Val() != 0 || c.LLen(ctx, keys.MsgOut).Val() != 0 {
		t.Fatal("the job's queue entry or its message's is left")
	}
	if inZSet(t, c0, keys.Expire, "10:job:"+member(j)) {
		t.Fatal("the job's retention entry is left")
	}
	wantEvent(t, db, model.EventJobDeleted)
	if err := db.DeleteJob(ctx, 1, j.ID, false, "7"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete of a missing job: %v", err)
	}
}

func TestDeleteJobRefusals(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	f, jobs := flowWith(t, s, db, 1)
	if err := db.DeleteJob(ctx, 1, jobs[0].ID, true, "7"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete of a flow's job: %v, want a conflict", err)
	}
	_ = f
	j := standaloneJob(t, s, db)
	if err := db.SetJobStatus(ctx, 1, j.ID, model.JobStarted); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteJob(ctx, 1, j.ID, false, "7"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete of a running job: %v, want a conflict", err)
	}
	if !exists(t, c, keys.Job(1, j.ID)) || !exists(t, c, keys.Job(1, jobs[0].ID)) {
		t.Fatal("a refused delete removed the job")
	}
	if err := db.DeleteJob(ctx, 1, j.ID, true, "7"); err != nil || exists(t, c, keys.Job(1, j.ID)) {
		t.Fatalf("forced delete of a running job: %v", err)
	}
}

func TestDeleteFlow(t *testing.T) {
	s, db, c, c0 := context10(t)
	ctx := context.Background()
	f, jobs := flowWith(t, s, db, 2)
	if err := db.DeleteFlow(ctx, f.ID, false, "7"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete of a started flow: %v, want a conflict", err)
	}
	if !exists(t, c, keys.Flow(f.ID)) {
		t.Fatal("a refused delete removed the flow")
	}
	if err := c.SAdd(ctx, keys.FlowMessages(f.ID), "message:1:77").Err(); err != nil {
		t.Fatal(err)
	}
	c.HSet(ctx, "message:1:77", "id", 77)
	c.HSet(ctx, keys.FlowResults(f.ID), "x", "1")
	if err := db.DeleteFlow(ctx, f.ID, true, "7"); err != nil {
		t.Fatal(err)
	}
	gone := []string{keys.Flow(f.ID), keys.DAG(f.ID), keys.FlowResults(f.ID), keys.FlowMessages(f.ID), "message:1:77"}
	for _, j := range jobs {
		gone = append(gone, keys.Job(1, j.ID))
	}
	for _, k := range gone {
		if exists(t, c, k) {
			t.Fatalf("%s is left after the delete", k)
		}
	}
	if inZSet(t, c, keys.FlowIndex, itoa(f.ID)) || inZSet(t, c, keys.StatusIndex(keys.FlowIndex, "started"), itoa(f.ID)) {
		t.Fatal("the flow is left in its indexes")
	}
	if c0.SIsMember(ctx, keys.ActiveFlows, "10:"+itoa(f.ID)).Val() {
		t.Fatal("the flow is left among the active flows")
	}
	wantEvent(t, db, model.EventFlowDeleted)
	if err := db.DeleteFlow(ctx, f.ID, true, "7"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete of a missing flow: %v", err)
	}
}

func TestDeleteRunner(t *testing.T) {
	s, db, c, c0 := context10(t)
	ctx := context.Background()
	r, _, err := s.CreateRunner(ctx, 10, &model.Runner{ID: 4, Pubkey: pkA, Address: "a"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, r.ID, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, r.ID, []string{"pyx"}); err != nil {
		t.Fatal(err)
	}
	if !c.SIsMember(ctx, keys.Wakers("queue:sh"), "4").Val() || !c.SIsMember(ctx, keys.Wakers("queue:exec:pyx"), "4").Val() {
		t.Fatal("the runner did not join its queues' wakers")
	}
	pinned := keys.PinnedQueue(4, "sh")
	c.LPush(ctx, pinned, "job:1:1")
	c0.RPush(ctx, keys.WakeRunner(4, "queue:sh"), "10", "11")
	if err := db.DeleteRunner(ctx, 4, false, "7"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete of a runner with pinned jobs: %v, want a conflict", err)
	}
	if !exists(t, c, keys.Runner(4)) {
		t.Fatal("a refused delete removed the runner")
	}
	if err := db.DeleteRunner(ctx, 4, true, "7"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keys.Runner(4), pinned, keys.RunnerProcs(4)} {
		if exists(t, c, k) {
			t.Fatalf("%s is left after the delete", k)
		}
	}
	if c.SIsMember(ctx, keys.Wakers("queue:sh"), "4").Val() || c.SIsMember(ctx, keys.Wakers("queue:exec:pyx"), "4").Val() {
		t.Fatal("the runner is left among its queues' wakers")
	}
	if n := c.HGet(ctx, keys.ScriptTypes, "sh").Val(); n != "" {
		t.Fatalf("script type sh still counted %q", n)
	}
	if w := c0.LRange(ctx, keys.WakeRunner(4, "queue:sh"), 0, -1).Val(); len(w) != 1 || w[0] != "11" {
		t.Fatalf("wake list after the delete: %v, want the other context's token only", w)
	}
	if c0.SIsMember(ctx, keys.RunnerContexts(4), "10").Val() || inZSet(t, c, keys.RunnerIndex, "4") {
		t.Fatal("the runner is left in its indexes")
	}
	wantEvent(t, db, model.EventRunnerDeleted)
	if err := db.DeleteRunner(ctx, 4, true, "7"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete of a missing runner: %v", err)
	}
}

// failFlow starts, dispatches and ends a flow of two jobs: the first finishes (with a
// result), the second fails with no retry left, so the flow ends error. It returns the
// flow and its two jobs.
func failFlow(t *testing.T, s *store.Store, db *store.DB) (f *model.Flow, ok, bad *model.Job) {
	t.Helper()
	ctx := context.Background()
	f, jobs := flowWith(t, s, db, 2)
	if _, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	ok, bad = jobs[0], jobs[1]
	srv.Client(t, 10).HSet(ctx, keys.Job(1, ok.ID), "result", `{"k":"v"}`)
	res, errs := db.CompleteNodes(ctx, []store.JobEnd{
		{FlowID: f.ID, CallerID: 1, JobID: ok.ID, Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler", Retention: time.Hour},
		{FlowID: f.ID, CallerID: 1, JobID: bad.ID, Attempt: 1, Status: model.JobError, Error: "boom", Retries: -1, Actor: "scheduler", Retention: time.Hour},
	})
	if errs[0] != nil || errs[1] != nil || res[1].FlowStatus != model.FlowError {
		t.Fatalf("ends: %+v %v", res, errs)
	}
	return f, ok, bad
}

func TestRetryFlow(t *testing.T) {
	s, db, c, c0 := context10(t)
	ctx := context.Background()
	f, ok, bad := failFlow(t, s, db)
	if !inZSet(t, c, keys.DLQ, member(bad)) || !inZSet(t, c0, keys.Expire, "10:flow:"+itoa(f.ID)) {
		t.Fatal("the failed flow's job is not in the DLQ, or its retention did not start")
	}
	// what its run left (as a runner's start and finish write it)
	c.HSet(ctx, keys.Job(1, bad.ID), "worker", "w1", "started_at", 5, "started_at_ms", 5000, "started_at_us", 5000000, "finished_at", 6, "finished_at_ms", 6000, "finished_at_us", 6000000)
	ready, err := db.RetryFlow(ctx, f.ID, "7")
	if err != nil || len(ready) != 1 || ready[0] != bad.ID {
		t.Fatalf("retry: ready %v (want [%d]), %v", ready, bad.ID, err)
	}
	dag := c.HGetAll(ctx, keys.DAG(f.ID)).Val()
	if dag["s:"+itoa(bad.ID)] != string(model.NodeReady) || dag["a:"+itoa(bad.ID)] != "0" || dag["s:"+itoa(ok.ID)] != "" ||
		dag["terminal"] != "1" || dag["failed"] != "0" {
		t.Fatalf("DAG after the retry: %v", dag)
	}
	h := c.HGetAll(ctx, keys.Job(1, bad.ID)).Val()
	if h["status"] != string(model.JobDispatched) || h["error"] != "" || h["attempt"] != "" {
		t.Fatalf("the retried job: %v", h)
	}
	for _, k := range []string{"worker", "started_at", "started_at_ms", "started_at_us", "finished_at", "finished_at_ms", "finished_at_us"} {
		if v, ok := h[k]; ok {
			t.Fatalf("the retried job keeps %s=%q of its failed run", k, v)
		}
	}
	if fh := c.HGetAll(ctx, keys.Flow(f.ID)).Val(); fh["status"] != string(model.FlowStarted) || fh["error"] != "" || fh["failed_job"] != "" || fh["result"] != "" {
		t.Fatalf("the retried flow: %v", fh)
	}
	if v := c.HGet(ctx, keys.FlowResults(f.ID), itoa(ok.ID)+".k").Val(); v != "v" {
		t.Fatalf("the completed job's result is not back in the flow's results: %q", v)
	}
	if inZSet(t, c, keys.DLQ, member(bad)) || inZSet(t, c0, keys.Expire, "10:flow:"+itoa(f.ID)) || !c0.SIsMember(ctx, keys.ActiveFlows, "10:"+itoa(f.ID)).Val() {
		t.Fatal("the retried flow is still in the DLQ or under retention, or not active")
	}
	wantEvent(t, db, model.EventFlowRetried)
}

// Only a flow that failed after it started can be retried.
func TestRetryFlowRefusals(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	f, _ := flowWith(t, s, db, 1)
	if _, err := db.RetryFlow(ctx, f.ID, "7"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("retry of a running flow: %v, want a conflict", err)
	}
	g, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 10, Jobs: []uint32{standaloneJob(t, s, db).ID}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CancelFlow(ctx, g.ID, "7", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RetryFlow(ctx, g.ID, "7"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("retry of a flow that never started: %v, want a conflict", err)
	}
	if st := c.HGet(ctx, keys.Flow(g.ID), "status").Val(); st != string(model.FlowError) {
		t.Fatalf("a refused retry changed the flow: %q", st)
	}
	if _, err := db.RetryFlow(ctx, 999, "7"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("retry of a missing flow: %v", err)
	}
}

// A dead-lettered standalone job is requeued in one step: out of the DLQ and of its
// retention, its run's fields dropped, and dispatched again with attempt 1 (a job not
// in the DLQ is refused, changing nothing).
func TestRequeueJobFromTheDLQ(t *testing.T) {
	s, db, c, c0 := context10(t)
	ctx := context.Background()
	j := standaloneJob(t, s, db)
	if _, _, ok, why, err := db.Dispatch(ctx, 0, j, "scheduler", 0); err != nil || !ok {
		t.Fatalf("dispatch: %v %s", err, why)
	}
	if _, err := db.RequeueJob(ctx, j, "7"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "not in the dead-letter queue") {
		t.Fatalf("requeue of a dispatched job: %v, want a conflict", err)
	}
	if err := db.SetJobStatus(ctx, j.CallerID, j.ID, model.JobError, "error", "boom"); err != nil {
		t.Fatal(err)
	}
	res, err := db.CompleteStandalone(ctx, store.JobEnd{CallerID: 1, JobID: j.ID, Attempt: 1, Status: model.JobError, Error: "boom", Actor: "scheduler", Retention: time.Hour})
	if err != nil || !res.Applied || !inZSet(t, c, keys.DLQ, member(j)) {
		t.Fatalf("end: %+v %v, and the job in the DLQ", res, err)
	}
	c.HSet(ctx, keys.Job(1, j.ID), "worker", "w1", "started_at", 5, "started_at_ms", 5000, "started_at_us", 5000000, "finished_at", 6, "finished_at_ms", 6000, "finished_at_us", 6000000)
	d, err := db.RequeueJob(ctx, j, "7")
	if err != nil || d.MsgKey == "" || d.Attempt != 1 {
		t.Fatalf("requeue: %+v %v; want dispatched, attempt 1", d, err)
	}
	h := c.HGetAll(ctx, keys.Job(1, j.ID)).Val()
	for _, k := range []string{"worker", "started_at", "started_at_ms", "started_at_us", "finished_at", "finished_at_ms", "finished_at_us", "done_attempt", "error", "dlq_at_ms"} {
		if v, ok := h[k]; ok {
			t.Fatalf("the requeued job keeps %s=%q of its failed run", k, v)
		}
	}
	if h["status"] != string(model.JobDispatched) || h["attempt"] != "1" || h["result"] != "{}" {
		t.Fatalf("the requeued job: %v", h)
	}
	if inZSet(t, c, keys.DLQ, member(j)) || inZSet(t, c0, keys.Expire, "10:job:"+member(j)) {
		t.Fatal("the requeued job is still in the DLQ or under retention")
	}
	if !inZSet(t, c, keys.StatusIndex(keys.JobIndex, "dispatched"), member(j)) || inZSet(t, c, keys.StatusIndex(keys.JobIndex, "error"), member(j)) {
		t.Fatal("the requeued job is not indexed as dispatched only")
	}
	wantEvent(t, db, model.EventJobRequeued)
	if _, err := db.RequeueJob(ctx, j, "7"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second requeue: %v, want a conflict", err)
	}
	if _, err := db.RequeueJob(ctx, &model.Job{ID: 999, CallerID: 1, Script: "true", ScriptType: "sh"}, "7"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("requeue of a missing job: %v", err)
	}
}

func TestMaterializeJob(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	remote := func(msg string) *model.Job {
		return &model.Job{ID: 50, CallerID: 3, Script: "true", ScriptType: "sh", Origin: &model.Origin{PK: pkB, ContextID: 2, MsgKey: msg}}
	}
	created, err := db.MaterializeJob(ctx, remote("message:3:1"))
	if err != nil || !created {
		t.Fatalf("materialise: %v %v", created, err)
	}
	jk := keys.Job(3, 50)
	if h := c.HGetAll(ctx, jk).Val(); h["status"] != string(model.JobDispatched) || h["context_id"] != "10" {
		t.Fatalf("the materialised job: %v", h)
	}
	if !inZSet(t, c, keys.JobIndex, "3:50") || !inZSet(t, c, keys.StatusIndex(keys.JobIndex, "dispatched"), "3:50") || !hasEvent(t, db, model.EventJobCreated) {
		t.Fatal("the materialised job is not indexed, or has no event")
	}
	// The same request again changes nothing; a retry of it by its origin replaces it.
	c.HSet(ctx, jk, "status", "started")
	if created, err := db.MaterializeJob(ctx, remote("message:3:1")); err != nil || created {
		t.Fatalf("a duplicate request: created %v, %v", created, err)
	}
	if c.HGet(ctx, jk, "status").Val() != "started" {
		t.Fatal("a duplicate request changed the job")
	}
	c.ZAdd(ctx, keys.StatusIndex(keys.JobIndex, "started"), redis.Z{Score: 1, Member: "3:50"})
	if created, err := db.MaterializeJob(ctx, remote("message:3:2")); err != nil || !created {
		t.Fatalf("the origin's retry: created %v, %v", created, err)
	}
	if c.HGet(ctx, jk, "status").Val() != string(model.JobDispatched) || inZSet(t, c, keys.StatusIndex(keys.JobIndex, "started"), "3:50") {
		t.Fatal("the origin's retry did not replace the job")
	}
	// A local job with that key is not overwritten.
	local, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 10, Script: "true", ScriptType: "sh"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	j := remote("message:3:3")
	j.CallerID, j.ID = 1, local.ID
	if _, err := db.MaterializeJob(ctx, j); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("materialise over a local job: %v, want a conflict", err)
	}
	if c.HGet(ctx, keys.Job(1, local.ID), "origin").Val() != "" {
		t.Fatal("the local job was overwritten")
	}
}

func TestApplyRemoteResult(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	j := standaloneJob(t, s, db)
	if _, _, ok, why, err := db.Dispatch(ctx, 0, j, "scheduler", 0); err != nil || !ok {
		t.Fatalf("dispatch: %v %s", err, why)
	}
	end := &model.Job{ID: j.ID, CallerID: 1, Attempt: 2, Status: model.JobFinished, Result: map[string]string{"k": "v"}, ExitCode: 0}
	if ok, err := db.ApplyRemoteResult(ctx, end, "node-b"); err != nil || ok {
		t.Fatalf("a result for another attempt: %v %v, want ignored", ok, err)
	}
	if c.HGet(ctx, keys.Job(1, j.ID), "status").Val() != string(model.JobDispatched) {
		t.Fatal("a result for another attempt changed the job")
	}
	end.Attempt = 1
	if ok, err := db.ApplyRemoteResult(ctx, end, "node-b"); err != nil || !ok {
		t.Fatalf("the result: %v %v", ok, err)
	}
	h := c.HGetAll(ctx, keys.Job(1, j.ID)).Val()
	if h["status"] != string(model.JobFinished) || h["worker"] != "node-b" || h["result"] != `{"k":"v"}` {
		t.Fatalf("the job after its remote result: %v", h)
	}
	if !inZSet(t, c, keys.StatusIndex(keys.JobIndex, "finished"), member(j)) || inZSet(t, c, keys.StatusIndex(keys.JobIndex, "dispatched"), member(j)) {
		t.Fatal("the job is not indexed as finished only")
	}
	end.Status, end.Error = model.JobError, "late"
	if ok, err := db.ApplyRemoteResult(ctx, end, "node-b"); err != nil || ok {
		t.Fatalf("a second result: %v %v, want ignored", ok, err)
	}
}

func TestAcceptInboundAndAck(t *testing.T) {
	_, db, c, c0 := context10(t)
	ctx := context.Background()
	m := &model.Message{CallerID: 3, Kind: "job_request"}
	dedup := store.InboundKey(pkB, "message:3:1")
	mk, dup, err := db.AcceptInbound(ctx, m, dedup, time.Minute)
	if err != nil || dup || mk == "" {
		t.Fatalf("accept: %q %v %v", mk, dup, err)
	}
	if h := c.HGetAll(ctx, mk).Val(); h["status"] != string(model.MessageDispatched) || h["caller_id"] != "3" {
		t.Fatalf("the inbound message: %v", h)
	}
	if q := c.LRange(ctx, keys.MsgIn, 0, -1).Val(); len(q) != 1 || q[0] != mk {
		t.Fatalf("msg_in: %v", q)
	}
	if w := c0.LRange(ctx, keys.WakeMsgIn, 0, -1).Val(); len(w) != 1 || w[0] != "10" {
		t.Fatalf("the routers' wake list: %v", w)
	}
	if !inZSet(t, c0, keys.Busy, "10") {
		t.Fatal("the context is not marked busy")
	}
	if _, dup, err := db.AcceptInbound(ctx, m, dedup, time.Minute); err != nil || !dup {
		t.Fatalf("the same message again: duplicate %v, %v", dup, err)
	}
	if n := c.LLen(ctx, keys.MsgIn).Val(); n != 1 {
		t.Fatalf("a duplicate was queued: msg_in holds %d", n)
	}
	// The acknowledgement moves a dispatched message once.
	if acked, err := db.AckMessage(ctx, mk); err != nil || !acked {
		t.Fatalf("ack: %v %v", acked, err)
	}
	if h := c.HGetAll(ctx, mk).Val(); h["status"] != string(model.MessageAcknowledged) || h["acked_at_ms"] == "" {
		t.Fatalf("the acknowledged message: %v", h)
	}
	if acked, err := db.AckMessage(ctx, mk); err != nil || acked {
		t.Fatalf("a second ack: %v %v, want ignored", acked, err)
	}
	if acked, err := db.AckMessage(ctx, "message:3:999"); err != nil || acked || exists(t, c, "message:3:999") {
		t.Fatalf("ack of a missing message: %v %v", acked, err)
	}
}

func TestSetJobStatusKeepsTheIndexes(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	j := standaloneJob(t, s, db)
	if err := db.SetJobStatus(ctx, 1, j.ID, model.JobStarted, "worker", "w9"); err != nil {
		t.Fatal(err)
	}
	if h := c.HGetAll(ctx, keys.Job(1, j.ID)).Val(); h["status"] != "started" || h["worker"] != "w9" {
		t.Fatalf("job: %v", h)
	}
	if !inZSet(t, c, keys.StatusIndex(keys.JobIndex, "started"), member(j)) || inZSet(t, c, keys.StatusIndex(keys.JobIndex, "dispatched"), member(j)) {
		t.Fatal("the job is not indexed as started only")
	}
	if err := db.SetJobStatus(ctx, 1, 999, model.JobStarted); err != nil || exists(t, c, keys.Job(1, 999)) {
		t.Fatalf("a missing job: %v (it must not be created)", err)
	}
}

func TestCheckBusy(t *testing.T) {
	s, db, c, c0 := context10(t)
	ctx := context.Background()
	c0.ZAdd(ctx, keys.Busy, redis.Z{Score: 1, Member: "10"})
	st, err := db.CheckBusy(ctx, false)
	if err != nil || len(st.Lists) != 0 || st.Leases != 0 {
		t.Fatalf("an empty context: %+v %v", st, err)
	}
	if !inZSet(t, c0, keys.Busy, "10") {
		t.Fatal("a check without tidy changed coord:busy")
	}
	if _, err := db.CheckBusy(ctx, true); err != nil || inZSet(t, c0, keys.Busy, "10") {
		t.Fatalf("a tidy check of an empty context left it busy (%v)", err)
	}
	if _, _, err := s.CreateRunner(ctx, 10, &model.Runner{ID: 4, Pubkey: pkA, Address: "a"}, "1"); err != nil {
		t.Fatal(err)
	}
	c.LPush(ctx, keys.MsgOut, "message:1:1")
	c.LPush(ctx, keys.PinnedQueue(4, "sh"), "job:1:1", "job:1:2")
	c.ZAdd(ctx, keys.Leases, redis.Z{Score: 1, Member: "w\tqueue:sh\tjob:1:3\tc"})
	st, err = db.CheckBusy(ctx, true)
	if err != nil || st.Lists[keys.MsgOut] != 1 || st.Lists[keys.PinnedQueue(4, "sh")] != 2 || len(st.Lists) != 2 || st.Leases != 1 {
		t.Fatalf("a context with work: %+v %v", st, err)
	}
	if !inZSet(t, c0, keys.Busy, "10") {
		t.Fatal("a tidy check of a context with work did not mark it busy")
	}
}

func TestRunnerHere(t *testing.T) {
	s, db, _, c0 := context10(t)
	ctx := context.Background()
	c0.SAdd(ctx, keys.RunnerContexts(4), "10")
	if here, err := db.RunnerHere(ctx, 4); err != nil || here {
		t.Fatalf("a runner that is not there: %v %v", here, err)
	}
	if c0.SIsMember(ctx, keys.RunnerContexts(4), "10").Val() {
		t.Fatal("the context stayed in the index of a runner it does not hold")
	}
	if _, _, err := s.CreateRunner(ctx, 10, &model.Runner{ID: 4, Pubkey: pkA, Address: "a"}, "1"); err != nil {
		t.Fatal(err)
	}
	c0.SRem(ctx, keys.RunnerContexts(4), "10")
	if here, err := db.RunnerHere(ctx, 4); err != nil || !here {
		t.Fatalf("a runner that is there: %v %v", here, err)
	}
	if !c0.SIsMember(ctx, keys.RunnerContexts(4), "10").Val() {
		t.Fatal("the context is not in the index of a runner it holds")
	}
}

func TestAnnounceCountsEachNameOncePerRunner(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	for _, id := range []uint32{4, 5} {
		if _, _, err := s.CreateRunner(ctx, 10, &model.Runner{ID: id, Pubkey: pkA, Address: "a"}, "1"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ { // a second announce of the same names counts nothing
		if err := db.AnnounceScriptTypes(ctx, 4, []model.ScriptType{"sh", "python"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AnnounceScriptTypes(ctx, 5, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	counts := c.HGetAll(ctx, keys.ScriptTypes).Val()
	if counts["sh"] != "2" || counts["python"] != "1" || len(counts) != 2 {
		t.Fatalf("script type counts %v, want sh 2, python 1", counts)
	}
	if got := c.HGet(ctx, keys.Runner(4), "script_types").Val(); got != `["sh","python"]` {
		t.Fatalf("runner 4's script types %s", got)
	}
	if w := c.SMembers(ctx, keys.Wakers("queue:sh")).Val(); len(w) != 2 {
		t.Fatalf("wakers of queue:sh %v, want runners 4 and 5", w)
	}
	if err := db.AnnounceScriptTypes(ctx, 99, []model.ScriptType{"sh"}); err == nil {
		t.Fatal("an announce for a missing runner was accepted")
	}
	if c.HGet(ctx, keys.ScriptTypes, "sh").Val() != "2" {
		t.Fatal("a refused announce counted")
	}
}

func TestCompleteStandaloneRetriesThenDeadLetters(t *testing.T) {
	s, db, c, c0 := context10(t)
	ctx := context.Background()
	j := standaloneJob(t, s, db)
	if _, _, ok, why, err := db.Dispatch(ctx, 0, j, "scheduler", 0); err != nil || !ok {
		t.Fatalf("dispatch: %v %s", err, why)
	}
	end := store.JobEnd{CallerID: 1, JobID: j.ID, Attempt: 1, Status: model.JobError, Error: "boom", Retries: 1, Backoff: time.Second, Actor: "scheduler", Retention: time.Hour}
	res, err := db.CompleteStandalone(ctx, end)
	if err != nil || !res.Applied || res.RetryAt.IsZero() {
		t.Fatalf("first failure: %+v %v, want a retry", res, err)
	}
	if !inZSet(t, c0, keys.Due, "retry:10:0:"+member(j)) || inZSet(t, c, keys.DLQ, member(j)) {
		t.Fatal("the retry is not due, or the job went to the DLQ")
	}
	if res, err := db.CompleteStandalone(ctx, end); err != nil || res.Applied {
		t.Fatalf("the same end again: %+v %v, want nothing changed", res, err)
	}
	sub := c0.Subscribe(ctx, keys.JobDone)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, why, err := db.Dispatch(ctx, 0, j, "scheduler", 0); err != nil || !ok {
		t.Fatalf("second dispatch: %v %s", err, why)
	}
	end.Attempt = 2
	if res, err := db.CompleteStandalone(ctx, end); err != nil || !res.Applied || !res.RetryAt.IsZero() {
		t.Fatalf("last failure: %+v %v, want the end", res, err)
	}
	if !inZSet(t, c, keys.DLQ, member(j)) || !inZSet(t, c0, keys.Expire, "10:job:"+member(j)) || !hasEvent(t, db, model.EventJobDeadLettered) {
		t.Fatal("the failed job is not in the DLQ, under retention, or without its event")
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	msg, err := sub.ReceiveMessage(wctx)
	if err != nil || msg.Payload != "10:"+member(j) {
		t.Fatalf("job done notice: %v %v", msg, err)
	}
}

// Several standalone ends in one call: each gets its own outcome (a stale attempt
// changes nothing, the others are applied).
func TestCompleteStandalonesEachItsOwnOutcome(t *testing.T) {
	s, db, _, c0 := context10(t)
	ctx := context.Background()
	var ends []store.JobEnd
	for range 3 {
		j := standaloneJob(t, s, db)
		if _, _, ok, why, err := db.Dispatch(ctx, 0, j, "scheduler", 0); err != nil || !ok {
			t.Fatalf("dispatch: %v %s", err, why)
		}
		ends = append(ends, store.JobEnd{CallerID: 1, JobID: j.ID, Attempt: 1, Status: model.JobFinished, Actor: "scheduler", Retention: time.Hour})
	}
	ends[1].Attempt = 7 // not the job's attempt
	res, errs := db.CompleteStandalones(ctx, ends)
	for i, want := range []bool{true, false, true} {
		if errs[i] != nil || res[i].Applied != want {
			t.Fatalf("end %d: %+v %v, want applied %v", i, res[i], errs[i], want)
		}
		if in := inZSet(t, c0, keys.Expire, "10:job:1:"+strconv.FormatUint(uint64(ends[i].JobID), 10)); in != want {
			t.Fatalf("end %d: under retention %v, want %v", i, in, want)
		}
	}
}

// A node completed after its flow's retry reads as completed, as every completed node
// (its fields leave the DAG hash: lua/lib_complete.lua), in flow.dag's pages
// (LoadDAGNodes) and in the whole DAG (LoadDAG): the console showed it pending.
func TestRetriedNodeCompletedReadsCompleted(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	f, ok, bad := failFlow(t, s, db)
	if _, err := db.RetryFlow(ctx, f.ID, "7"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DispatchMany(ctx, f.ID, 1, []*model.Job{bad}, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	res, errs := db.CompleteNodes(ctx, []store.JobEnd{
		{FlowID: f.ID, CallerID: 1, JobID: bad.ID, Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler", Retention: time.Hour},
	})
	if errs[0] != nil || res[0].FlowStatus != model.FlowFinished {
		t.Fatalf("the retried job's end: %+v %v", res, errs)
	}
	for k := range c.HGetAll(ctx, keys.DAG(f.ID)).Val() {
		if _, id, _ := strings.Cut(k, ":"); id == itoa(bad.ID) {
			t.Errorf("the completed node keeps %s in the DAG hash", k)
		}
	}
	nodes, started, err := db.LoadDAGNodes(ctx, f.ID, []uint32{ok.ID, bad.ID})
	if err != nil || !started {
		t.Fatalf("DAG nodes: %v %v", started, err)
	}
	g, err := db.LoadDAG(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint32{ok.ID, bad.ID} {
		if nodes[id].Status != model.NodeCompleted || g.Nodes[id] == nil || g.Nodes[id].Status != model.NodeCompleted {
			t.Errorf("node %d after the retried flow finished: page %q, DAG %+v (hash %v)", id, nodes[id].Status, g.Nodes[id], c.HGetAll(ctx, keys.DAG(f.ID)).Val())
		}
	}
}
