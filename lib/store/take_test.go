package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// The finish script's take (Finish.Take): the end of a run claims and starts jobs for
// the finishing runner in the same step, on its runs' slots: a dependent it makes
// ready, else the next jobs of the runs' queue.

// takeRunner is the runner id of the take tests: a wake list of its own (DB 0 is
// shared by the package's tests).
const takeRunner = 41

// takeContext makes context id with runner takeRunner serving sh (its waker of
// queue:sh, its wake list emptied) and the scheduler's settings recorded, as
// applyContext does.
func takeContext(t *testing.T, id uint32) (*store.Store, *store.DB, *redis.Client) {
	t.Helper()
	ctx := context.Background()
	s := open(t)
	db := mustCtx(t, s, id)
	if _, _, err := s.CreateRunner(ctx, id, &model.Runner{ID: takeRunner, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, takeRunner, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	rc := srv.Client(t, int(id))
	if err := rc.SAdd(ctx, keys.Wakers(keys.Queue("sh")), takeRunner).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t, 0).Del(ctx, takeWake()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSchedulerSettings(ctx, time.Hour, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return s, db, rc
}

func takeWake() string { return keys.WakeRunner(takeRunner, keys.Queue("sh")) }

// finishTaking finishes run (successfully) with Apply, offering a take of one job as
// worker w1, and returns what the script applied.
func finishTaking(t *testing.T, db *store.DB, run store.Started) store.Applied {
	t.Helper()
	return finishTakingUpTo(t, db, run, 1)
}

// finishTakingUpTo is finishTaking with a take of up to max jobs.
func finishTakingUpTo(t *testing.T, db *store.DB, run store.Started, max int) store.Applied {
	t.Helper()
	take := &store.Take{Worker: "w1", RunnerID: takeRunner, Queues: []string{keys.Queue("sh")}, Max: max, Lease: time.Minute}
	fs := []store.Finish{{DB: db, Claim: run.Claim, Job: run.Job, Outcome: store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"v": "1"}}, Apply: true, Take: take}}
	oks, errs, applied := store.FinishJobsApplied(context.Background(), fs)
	if errs[0] != nil || !oks[0] {
		t.Fatalf("finish: %v %v", oks[0], errs[0])
	}
	if applied.Taken == nil {
		t.Fatal("a take was offered: Applied.Taken is nil")
	}
	return applied
}

// The dependent a run's end makes ready is claimed and started for the finishing
// worker by the finish itself, exactly once: it is off its queue (a claim finds
// nothing), started under the take's claim (the processing list, a lease, its started
// event), its hash returned with its dependency's result readable, no wake token left
// behind; its run's end is taken as the claim's.
func TestFinishTakesDependent(t *testing.T) {
	s, db, rc := takeContext(t, 43)
	ctx := context.Background()
	_, jobs := dagFlow(t, s, db, 2, map[int][]int{1: {0}})
	a, b := jobs[0], jobs[1]
	run := claimSh(t, db, 1)
	if run[0].Job.ID != a.ID {
		t.Fatalf("claimed job %d, want a (%d)", run[0].Job.ID, a.ID)
	}
	applied := finishTaking(t, db, run[0])
	tk := applied.Taken
	if tk.Err != nil || len(tk.Started) != 1 || applied.Dispatched != 1 {
		t.Fatalf("taken %+v (dispatched %d), want b started", tk, applied.Dispatched)
	}
	st := tk.Started[0]
	if st.Outcome != store.StartRun || st.Job == nil || st.Job.ID != b.ID || st.Job.Status != model.JobStarted ||
		st.Claim.Consumer != "w1" || st.Claim.Queue != keys.Queue("sh") || st.Claim.Item != keys.Job(1, b.ID) || !st.Claim.Taken {
		t.Fatalf("taken %+v job %+v, want b started by w1 from queue:sh", st, st.Job)
	}
	checkTakenState(t, db, rc, a.ID, b.ID, st.Claim.ID)
	ok, err := db.FinishJob(ctx, st.Claim, st.Job, store.JobOutcome{Status: model.JobFinished})
	if err != nil || !ok {
		t.Fatalf("b's end under the take's claim: %v %v", ok, err)
	}
}

// checkTakenState: job b, taken under claim by w1, is started in its hash, off its
// queue, on w1's processing list, with no wake token left and no claim to take it
// again, its start evented; its dependency a's result is there for its start.
func checkTakenState(t *testing.T, db *store.DB, rc *redis.Client, aID, bID uint32, claim string) {
	t.Helper()
	ctx := context.Background()
	a, b := &model.Job{ID: aID}, &model.Job{ID: bID}
	h := rc.HMGet(ctx, keys.Job(1, b.ID), "status", "worker", "claim").Val()
	if h[0] != string(model.JobStarted) || h[1] != "w1" || h[2] != claim {
		t.Fatalf("b's hash %v, want started by w1 under claim %s", h, claim)
	}
	if n := rc.LLen(ctx, keys.Queue("sh")).Val(); n != 0 {
		t.Fatalf("queue:sh holds %d items: b was taken", n)
	}
	if pos, err := rc.LPos(ctx, keys.Processing("w1"), keys.Job(1, b.ID), redis.LPosArgs{}).Result(); err != nil || pos < 0 {
		t.Fatalf("b not on w1's processing list: %v", err)
	}
	if n := srv.Client(t, 0).LLen(ctx, takeWake()).Val(); n != 0 {
		t.Fatalf("runner %d's wake list holds %d tokens: the take leaves none for the job it took", takeRunner, n)
	}
	again, err := db.ClaimStarts(ctx, keys.Queue("sh"), "w2", time.Minute, []string{""}, store.Wake{})
	if err != nil || len(again) != 0 {
		t.Fatalf("a claim after the take got %+v %v: b would run twice", again, err)
	}
	// the dependency's result is there for the start (HERO_DEP_<id>_v)
	if res := rc.HGet(ctx, keys.Job(1, a.ID), "result").Val(); res == "" {
		t.Fatal("a's result missing")
	}
	if !hasStartedEvent(t, db, b.ID) {
		t.Fatal("no job_started event for b")
	}
}

// hasStartedEvent says whether the context's events hold job id's start.
func hasStartedEvent(t *testing.T, db *store.DB, id uint32) bool {
	t.Helper()
	evs, err := db.ReadEvents(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == string(model.EventJobStarted) && e.JobID == id {
			return true
		}
	}
	return false
}

// Fairness between contexts: while another context's token waits on the runner's
// wake list of the queue, the take takes nothing; the dependent waits on its queue
// with its token behind the other context's.
func TestFinishTakeYieldsToOtherContexts(t *testing.T) {
	s, db, rc := takeContext(t, 44)
	ctx := context.Background()
	_, jobs := dagFlow(t, s, db, 2, map[int][]int{1: {0}})
	b := jobs[1]
	run := claimSh(t, db, 1)
	// the wake list as the claim of a woken runner leaves it, then context 45's token
	if err := srv.Client(t, 0).Del(ctx, takeWake()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t, 0).RPush(ctx, takeWake(), "45").Err(); err != nil {
		t.Fatal(err)
	}
	applied := finishTaking(t, db, run[0])
	if len(applied.Taken.Started) != 0 || applied.Taken.Err != nil || applied.Dispatched != 1 {
		t.Fatalf("taken %+v: another context waits, nothing is taken", applied.Taken)
	}
	if q := rc.LRange(ctx, keys.Queue("sh"), 0, -1).Val(); len(q) != 1 || q[0] != keys.Job(1, b.ID) {
		t.Fatalf("queue:sh %v, want b", q)
	}
	if w := srv.Client(t, 0).LRange(ctx, takeWake(), 0, -1).Val(); len(w) != 2 || w[0] != "45" || w[1] != "44" {
		t.Fatalf("wake list %v, want context 45's token first, then 44's", w)
	}
}

// A runner that dies right after the finish that took a dependent (it never runs
// it): the take's claim is a lease like a claim's; its expiry puts the job back on
// its queue, and another worker's claim runs it, once.
func TestFinishTakeLeaseExpires(t *testing.T) {
	s, db, rc := takeContext(t, 46)
	ctx := context.Background()
	_, jobs := dagFlow(t, s, db, 2, map[int][]int{1: {0}})
	b := jobs[1]
	run := claimSh(t, db, 1)
	if st := finishTaking(t, db, run[0]).Taken.Started; len(st) != 1 || st[0].Job.ID != b.ID {
		t.Fatalf("taken %+v, want b", st)
	}
	moved, err := db.RequeueExpired(ctx, time.Now().Add(2*time.Minute), 100)
	if err != nil || len(moved) != 1 || moved[0].Item != keys.Job(1, b.ID) {
		t.Fatalf("requeued %+v %v, want b once", moved, err)
	}
	got, err := db.ClaimStarts(ctx, keys.Queue("sh"), "w2", time.Minute, []string{"", ""}, store.Wake{})
	if err != nil || len(got) != 1 || got[0].Outcome != store.StartRun || got[0].Job.ID != b.ID {
		t.Fatalf("claim after the expiry: %+v %v, want b to run", got, err)
	}
	if w := rc.HGet(ctx, keys.Job(1, b.ID), "worker").Val(); w != "w2" {
		t.Fatalf("b runs on %q, want w2", w)
	}
	again, err := db.ClaimStarts(ctx, keys.Queue("sh"), "w3", time.Minute, []string{""}, store.Wake{})
	if err != nil || len(again) != 0 {
		t.Fatalf("a second claim got %+v %v: b would run twice", again, err)
	}
}

// A claim of a few jobs returns, with each started script's hash, what its start
// reads (Claim.Reads): its context's job limits, its flow's env_vars and its
// dependencies' results, as stored; and the take's claim does too.
func TestClaimReturnsStartReads(t *testing.T) {
	s, db, rc := takeContext(t, 47)
	ctx := context.Background()
	if err := rc.HSet(ctx, keys.Context(47), "job_defaults", model.EncodeField(&model.JobLimits{Pids: 79})).Err(); err != nil {
		t.Fatal(err)
	}
	f, jobs := dagFlow(t, s, db, 3, map[int][]int{1: {0}, 2: {1}})
	if err := rc.HSet(ctx, keys.Flow(f.ID), "env_vars", model.EncodeField(map[string]string{"FROM_FLOW": "h"})).Err(); err != nil {
		t.Fatal(err)
	}
	a, b := jobs[0], jobs[1]
	run := claimSh(t, db, 1)
	rd := run[0].Claim.Reads
	if rd == nil || rd.JobDefaults != model.EncodeField(&model.JobLimits{Pids: 79}) || rd.JobMax != "" ||
		rd.FlowEnv != model.EncodeField(map[string]string{"FROM_FLOW": "h"}) || len(rd.DepResults) != 0 {
		t.Fatalf("a's claim reads %+v, want the context's defaults and the flow's env_vars", rd)
	}
	// b, taken by a's end: its reads hold a's result
	tk := finishTaking(t, db, run[0]).Taken
	if len(tk.Started) != 1 || tk.Started[0].Job.ID != b.ID {
		t.Fatalf("taken %+v, want b", tk.Started)
	}
	rd = tk.Started[0].Claim.Reads
	want := rc.HGet(ctx, keys.Job(1, a.ID), "result").Val()
	if rd == nil || len(rd.DepResults) != 1 || rd.DepResults[0] != want || !strings.Contains(want, `"v":"1"`) {
		t.Fatalf("b's reads %+v, want a's result %s", rd, want)
	}
}

// The end of a standalone run, which makes nothing ready, takes the next jobs of its
// queue on its slots, oldest first, each once: off the queue, started by w1 under the
// take's claims; the job left on the queue keeps a wake token of its context (a claim
// still finds it without a sweep).
func TestFinishTakesTheNextJobsOfItsQueue(t *testing.T) {
	s, db, rc := takeContext(t, 48)
	ctx := context.Background()
	subs := make([]store.Submission, 4)
	for i := range subs {
		subs[i] = store.Submission{Job: shJob(7, 0, "true"), Actor: "7"}
	}
	out, err := s.SubmitGuarded(ctx, 48, subs, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := claimSh(t, db, 1)
	if run[0].Job.ID != out[0].Job.ID {
		t.Fatalf("claimed job %d, want the first (%d)", run[0].Job.ID, out[0].Job.ID)
	}
	tk := finishTakingUpTo(t, db, run[0], 2).Taken
	if tk.Err != nil || len(tk.Started) != 2 {
		t.Fatalf("taken %+v, want the next two jobs started", tk)
	}
	for i, st := range tk.Started {
		want := out[i+1].Job.ID
		if st.Outcome != store.StartRun || st.Job == nil || st.Job.ID != want || st.Job.Status != model.JobStarted ||
			st.Claim.Consumer != "w1" || !st.Claim.Taken || st.Claim.Item != keys.Job(7, want) {
			t.Fatalf("taken %d: %+v job %+v, want job %d started by w1", i, st, st.Job, want)
		}
		if h := rc.HMGet(ctx, keys.Job(7, want), "status", "worker", "claim").Val(); h[0] != string(model.JobStarted) || h[1] != "w1" || h[2] != st.Claim.ID {
			t.Fatalf("job %d's hash %v, want started by w1 under claim %s", want, h, st.Claim.ID)
		}
	}
	if q := rc.LRange(ctx, keys.Queue("sh"), 0, -1).Val(); len(q) != 1 || q[0] != keys.Job(7, out[3].Job.ID) {
		t.Fatalf("queue:sh %v, want only the fourth job", q)
	}
	if w := srv.Client(t, 0).LRange(ctx, takeWake(), 0, -1).Val(); len(w) == 0 || w[0] != "48" {
		t.Fatalf("wake list %v: the fourth job waits, its context's token must too", w)
	}
	again := claimSh(t, db, 1)
	if again[0].Job.ID != out[3].Job.ID {
		t.Fatalf("claim after the take got job %d, want the fourth (%d)", again[0].Job.ID, out[3].Job.ID)
	}
}

// The take of a standalone run's end yields to another context waiting on the
// runner's wake list of the queue, as a dependent's does.
func TestFinishTakeOfItsQueueYieldsToOtherContexts(t *testing.T) {
	s, db, rc := takeContext(t, 49)
	ctx := context.Background()
	subs := []store.Submission{{Job: shJob(7, 0, "true"), Actor: "7"}, {Job: shJob(7, 0, "true"), Actor: "7"}}
	out, err := s.SubmitGuarded(ctx, 49, subs, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := claimSh(t, db, 1)
	if err := srv.Client(t, 0).Del(ctx, takeWake()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t, 0).RPush(ctx, takeWake(), "50", "49").Err(); err != nil {
		t.Fatal(err)
	}
	tk := finishTakingUpTo(t, db, run[0], 2).Taken
	if len(tk.Started) != 0 || tk.Err != nil {
		t.Fatalf("taken %+v: another context waits, nothing is taken", tk)
	}
	if q := rc.LRange(ctx, keys.Queue("sh"), 0, -1).Val(); len(q) != 1 || q[0] != keys.Job(7, out[1].Job.ID) {
		t.Fatalf("queue:sh %v, want the second job", q)
	}
}

// The take yields to another queue waiting for the runner too (a token on its wake
// list of that queue): the slot is left to the claims, which go by the lists' order,
// so that a queue with a backlog does not keep the runner's slots from run to run.
func TestFinishTakeYieldsToOtherQueues(t *testing.T) {
	s, db, rc := takeContext(t, 51)
	ctx := context.Background()
	subs := []store.Submission{{Job: shJob(7, 0, "true"), Actor: "7"}, {Job: shJob(7, 0, "true"), Actor: "7"}}
	out, err := s.SubmitGuarded(ctx, 51, subs, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := claimSh(t, db, 1)
	other := keys.WakeRunner(takeRunner, keys.Queue("py"))
	if err := srv.Client(t, 0).RPush(ctx, other, "51").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Client(t, 0).Del(context.Background(), other) })
	take := &store.Take{Worker: "w1", RunnerID: takeRunner, Queues: []string{keys.Queue("sh"), keys.Queue("py")}, Max: 2, Lease: time.Minute}
	fs := []store.Finish{{DB: db, Claim: run[0].Claim, Job: run[0].Job, Outcome: store.JobOutcome{Status: model.JobFinished}, Apply: true, Take: take}}
	oks, errs, applied := store.FinishJobsApplied(ctx, fs)
	if errs[0] != nil || !oks[0] {
		t.Fatalf("finish: %v %v", oks[0], errs[0])
	}
	if applied.Taken == nil || len(applied.Taken.Started) != 0 || applied.Taken.Err != nil {
		t.Fatalf("taken %+v: queue:py waits for the runner, nothing is taken", applied.Taken)
	}
	if q := rc.LRange(ctx, keys.Queue("sh"), 0, -1).Val(); len(q) != 1 || q[0] != keys.Job(7, out[1].Job.ID) {
		t.Fatalf("queue:sh %v, want the second job", q)
	}
}
