package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/sandbox"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
)

var srv *redistest.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// testCtx is the context the tests' runner serves.
const testCtx = 5

// harness is one test's store, context and runner (run by start until the test ends).
type harness struct {
	t    *testing.T
	s    *store.Store
	db   *store.DB
	cfg  *Config
	r    *runner
	dir  string // a directory the (unsandboxed) jobs may write pid files into
	stop context.CancelFunc
	done chan struct{}
}

// newHarness makes context testCtx with runner 1's record, and a runner configured
// from flags as the binary is (args add to the defaults), unsandboxed.
func newHarness(t *testing.T, args ...string) *harness {
	t.Helper()
	srv.Flush(t)
	ctx := context.Background()
	s, err := store.Open(ctx, store.Options{URL: srv.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if _, _, err := s.CreateContext(ctx, &model.Context{ID: testCtx, Admins: []uint32{1}}, "operator"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateRunner(ctx, testCtx, &model.Runner{ID: 1, Local: true}, "operator"); err != nil {
		t.Fatal(err)
	}
	db, err := s.Ctx(testCtx)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	cfg := &Config{}
	fs := config.NewFlagSet("runner", summary)
	cfg.RegisterFlags(fs)
	fs.SetEnvLookup(func(string) (string, bool) { return "", false })
	base := []string{"--redis-url", srv.URL, "--runner-id", "1", "--contexts", strconv.Itoa(testCtx), "--worker-id", "test-runner",
		"--sandbox", "none", "--sandbox-uid", "0", "--work-dir", work, "--interpreters", "sh=/bin/sh", "--concurrency", "4"}
	if err := fs.Parse(append(base, args...), io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(ctx, cfg.Sandbox.Options())
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(runnerParams{store: s, log: zerolog.Nop(), reg: prometheus.NewRegistry(), cfg: cfg, sandbox: sb})
	return &harness{t: t, s: s, db: db, cfg: cfg, r: r, dir: t.TempDir()}
}

// start runs the runner until the test ends (or shutdown), and waits until it
// serves the test's context.
func (h *harness) start() {
	h.t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	h.stop, h.done = stop, make(chan struct{})
	go func() {
		defer close(h.done)
		_ = h.r.run(ctx)
	}()
	h.t.Cleanup(h.shutdown)
	h.waitFor("the runner serves its context", time.Minute, func() bool {
		return slices.Contains(h.r.servedContexts(), testCtx)
	})
}

// shutdown stops the runner as SIGTERM does and waits for its drain to end.
func (h *harness) shutdown() {
	h.stop()
	<-h.done
}

// waitFor waits until cond holds, failing the test after the deadline.
func (h *harness) waitFor(what string, deadline time.Duration, cond func() bool) {
	h.t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			h.t.Fatalf("timed out after %s waiting until %s", deadline, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// submit makes a one-job flow of an sh script, starts it and puts the job on the sh
// queue with its wake token, as the router does.
func (h *harness) submit(script string, timeout uint32) *model.Job {
	return h.submitJob(&model.Job{Script: script, Timeout: timeout})
}

// submitJob is submit of a job made by the caller (its caller, context and script
// type are set here).
func (h *harness) submitJob(j *model.Job) *model.Job {
	h.t.Helper()
	ctx := context.Background()
	j.CallerID, j.ContextID, j.ScriptType = 1, testCtx, "sh"
	j, _, err := h.s.CreateJob(ctx, j, "1")
	if err != nil {
		h.t.Fatal(err)
	}
	f, _, err := h.s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: testCtx, Jobs: []uint32{j.ID}}, "1")
	if err != nil {
		h.t.Fatal(err)
	}
	storetest.StartFlow(h.t, h.db, f)
	if err := h.db.Enqueue(ctx, keys.Queue("sh"), keys.Job(1, j.ID)); err != nil {
		h.t.Fatal(err)
	}
	return j
}

// job reads a job back.
func (h *harness) job(id uint32) *model.Job {
	h.t.Helper()
	j, err := h.db.LoadJob(context.Background(), 1, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return j
}

// waitStatus waits until a job has one of the statuses and returns it.
func (h *harness) waitStatus(id uint32, deadline time.Duration, statuses ...model.JobStatus) *model.Job {
	h.t.Helper()
	var j *model.Job
	h.waitFor(fmt.Sprintf("job %d is %v", id, statuses), deadline, func() bool {
		j = h.job(id)
		return slices.Contains(statuses, j.Status)
	})
	return j
}

// pidScript writes its shell's pid into the harness directory, then runs body (exec
// keeps the pid).
func (h *harness) pidScript(name, body string) string {
	return fmt.Sprintf("echo $$ > %s\nexec %s\n", filepath.Join(h.dir, name), body)
}

// pid reads a pid written by pidScript, waiting for it.
func (h *harness) pid(name string) int {
	h.t.Helper()
	var pid int
	h.waitFor("the job wrote its pid", time.Minute, func() bool {
		b, err := os.ReadFile(filepath.Join(h.dir, name))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// gone says whether a process has ended (and was reaped).
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// leaseExpiry is the lease expiry (Unix ms) of the claim on a job, 0 when none holds it.
func (h *harness) leaseExpiry(id uint32) float64 {
	h.t.Helper()
	rc := srv.Client(h.t, testCtx)
	ms, err := rc.ZRangeWithScores(context.Background(), keys.Leases, 0, -1).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, m := range ms {
		if strings.Contains(fmt.Sprint(m.Member), keys.Job(1, id)) {
			return m.Score
		}
	}
	return 0
}

// A job on a served queue is claimed, run, and its end written: the result file's
// pairs and stdout in the result, this process named as its worker, nothing left on
// the queue or in the leases.
func TestClaimRunsTheJobAndWritesItsEnd(t *testing.T) {
	h := newHarness(t)
	h.start()
	j := h.submit("echo out; echo ANSWER=42 >> \"$HERO_RESULT_FILE\"; echo CTX=$HERO_CONTEXT_ID >> \"$HERO_RESULT_FILE\"", 0)
	got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError)
	if got.Status != model.JobFinished || got.Result["output"] != "out\n" || got.Result["ANSWER"] != "42" || got.Result["CTX"] != strconv.Itoa(testCtx) {
		t.Fatalf("job after its run: status %s error %q result %v", got.Status, got.Error, got.Result)
	}
	if got.Worker != "test-runner" {
		t.Fatalf("job's worker %q, want the runner's --worker-id test-runner", got.Worker)
	}
	rc := srv.Client(t, testCtx)
	if n := rc.LLen(context.Background(), keys.Queue("sh")).Val(); n != 0 {
		t.Fatalf("%d items left on the queue after the claim", n)
	}
	if n := rc.ZCard(context.Background(), keys.Leases).Val(); n != 0 {
		t.Fatalf("%d leases left after the job's end", n)
	}
	if n := testutil.ToFloat64(h.r.m.finished.WithLabelValues("sh")); n != 1 {
		t.Fatalf("hero_jobs_finished_total{script_type=sh} = %v, want 1", n)
	}
}

// One claim loop (--claim-loops 1) runs every job queued: it claims again as slots
// free up, more jobs than slots waiting. No job is left on the queue or under a lease.
func TestOneClaimLoopRunsEveryJob(t *testing.T) {
	h := newHarness(t, "--claim-loops", "1")
	var ids []uint32
	for range 12 { // three times --concurrency 4
		ids = append(ids, h.submit("true", 0).ID)
	}
	h.start()
	for _, id := range ids {
		if got := h.waitStatus(id, time.Minute, model.JobFinished, model.JobError); got.Status != model.JobFinished {
			t.Fatalf("job %d: %s (%s)", id, got.Status, got.Error)
		}
	}
	rc := srv.Client(t, testCtx)
	if n := rc.LLen(context.Background(), keys.Queue("sh")).Val(); n != 0 {
		t.Fatalf("%d items left on the queue", n)
	}
	if n := rc.ZCard(context.Background(), keys.Leases).Val(); n != 0 {
		t.Fatalf("%d leases left after the jobs' ends", n)
	}
}

// A claim takes only jobs of the queues it serves: a python job waits on its queue
// while the runner (sh only) runs the sh job behind it.
func TestClaimTakesOnlyServedQueues(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	py, _, err := h.s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: testCtx, Script: "print(1)", ScriptType: "python"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := h.s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: testCtx, Jobs: []uint32{py.ID}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	storetest.StartFlow(t, h.db, f)
	if err := h.db.Enqueue(ctx, keys.Queue("python"), keys.Job(1, py.ID)); err != nil {
		t.Fatal(err)
	}
	sh := h.submit("true", 0)
	h.waitStatus(sh.ID, time.Minute, model.JobFinished)
	if got := h.job(py.ID); got.Status != model.JobDispatched || got.Worker != "" {
		t.Fatalf("python job taken by an sh-only runner: status %s worker %q", got.Status, got.Worker)
	}
	if n := srv.Client(t, testCtx).LLen(ctx, keys.Queue("python")).Val(); n != 1 {
		t.Fatalf("python queue holds %d items, want its job still waiting", n)
	}
}

// A run longer than the lease keeps its lease: the runner pushes the expiry out every
// heartbeat, so that a sweep after the first lease would have ended finds nothing to
// requeue, and the job runs once.
func TestLeaseIsExtendedWhileTheJobRuns(t *testing.T) {
	h := newHarness(t, "--lease", "1s", "--heartbeat", "200ms")
	h.start()
	j := h.submit("sleep 2.5; echo done", 0)
	h.waitStatus(j.ID, time.Minute, model.JobStarted)
	first := h.leaseExpiry(j.ID)
	if first == 0 {
		t.Fatal("no lease held on the started job")
	}
	h.waitFor("the lease is extended past its first expiry", time.Minute, func() bool {
		return h.leaseExpiry(j.ID) > first+500
	})
	// The first lease has ended by now: a sweep would requeue the job if it had not
	// been extended.
	h.waitFor("the first lease's expiry has passed", time.Minute, func() bool {
		return float64(time.Now().UnixMilli()) > first+100
	})
	moved, err := h.db.RequeueExpired(context.Background(), time.Now(), 100)
	if err != nil || len(moved) != 0 {
		t.Fatalf("sweep after the first lease's expiry moved %v (%v): the lease was not extended", moved, err)
	}
	got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError)
	if got.Status != model.JobFinished || got.Result["output"] != "done\n" {
		t.Fatalf("job after a run longer than its lease: status %s error %q result %v", got.Status, got.Error, got.Result)
	}
	if n := testutil.ToFloat64(h.r.m.started.WithLabelValues("sh")); n != 1 {
		t.Fatalf("the job was started %v times, want once", n)
	}
}

// A lease found lost at an extension (it expired, and another claim took the job)
// stops the run here: its process group is killed and no end is written.
func TestLostLeaseStopsTheRun(t *testing.T) {
	h := newHarness(t, "--lease", "1s", "--heartbeat", "200ms")
	h.start()
	j := h.submit(h.pidScript("lost", "sleep 30"), 0)
	h.waitStatus(j.ID, time.Minute, model.JobStarted)
	pid := h.pid("lost")
	// What a sweep and another runner's claim do once a lease expired: the claim is
	// gone, and the job names another.
	rc := srv.Client(t, testCtx)
	members := rc.ZRange(context.Background(), keys.Leases, 0, -1).Val()
	if len(members) != 1 {
		t.Fatalf("leases %v, want the job's one", members)
	}
	if err := rc.ZRem(context.Background(), keys.Leases, members[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.HSet(context.Background(), keys.Job(1, j.ID), "claim", "another-runners-claim").Err(); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the run stops", time.Minute, func() bool { return gone(pid) && h.r.core.Len() == 0 })
	h.waitFor("the lost lease is counted", time.Minute, func() bool { return testutil.ToFloat64(h.r.m.lostLeases) == 1 })
	if got := h.job(j.ID); got.Status != model.JobStarted || got.Error != "" {
		t.Fatalf("a run whose lease was lost wrote an end: status %s error %q", got.Status, got.Error)
	}
}

// A lease that expired and was swept while the job still ran here (the runner was
// stopped or cut off from Redis past its lease, issue 43), with no other claim on the
// job since, is taken back: the run goes on, its end is recorded once, and the queued
// copy the sweep made never starts a second run. With a free slot the runner's claim
// meets the queued copy first (and takes the claim back); with none, the renewal does.
func TestSweptLeaseIsTakenBack(t *testing.T) {
	for _, tc := range []struct{ concurrency, how string }{{"4", ""}, {"1", "renewal"}} {
		t.Run("concurrency-"+tc.concurrency, func(t *testing.T) { testSweptLeaseIsTakenBack(t, tc.concurrency, tc.how) })
	}
}

func testSweptLeaseIsTakenBack(t *testing.T, concurrency, how string) {
	h := newHarness(t, "--lease", "2s", "--heartbeat", "200ms", "--concurrency", concurrency)
	h.start()
	release := filepath.Join(h.dir, "release")
	j := h.submit(h.pidScript("swept", fmt.Sprintf("sh -c 'while [ ! -e %s ]; do sleep 0.02; done; echo done'", release)), 0)
	h.waitStatus(j.ID, time.Minute, model.JobStarted)
	pid := h.pid("swept")
	// What a sweep does to a lease that expired: the job goes back on its queue (with
	// its wake token), still naming its claim.
	moved, err := h.db.RequeueExpired(context.Background(), time.Now().Add(time.Hour), 100)
	if err != nil || len(moved) != 1 {
		t.Fatalf("sweep: %v %v", moved, err)
	}
	h.waitFor("the lease is taken back", time.Minute, func() bool {
		return h.leaseExpiry(j.ID) > 0 && srv.Client(t, testCtx).LLen(context.Background(), keys.Queue("sh")).Val() == 0
	})
	retaken := testutil.ToFloat64(h.r.m.retaken.WithLabelValues("renewal")) + testutil.ToFloat64(h.r.m.retaken.WithLabelValues("claim"))
	if how != "" && testutil.ToFloat64(h.r.m.retaken.WithLabelValues(how)) != 1 {
		retaken = -1
	}
	if gone(pid) || retaken != 1 || testutil.ToFloat64(h.r.m.lostLeases) != 0 {
		t.Fatalf("after the re-take: run gone %v, leases retaken %v (by %s: %v), lost %v", gone(pid), retaken, how,
			testutil.ToFloat64(h.r.m.retaken.WithLabelValues(how)), testutil.ToFloat64(h.r.m.lostLeases))
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError)
	if got.Status != model.JobFinished || got.Result["output"] != "done\n" || got.Attempt > 1 {
		t.Fatalf("job after the re-take: status %s error %q result %v attempt %d", got.Status, got.Error, got.Result, got.Attempt)
	}
	if n := testutil.ToFloat64(h.r.m.started.WithLabelValues("sh")); n != 1 {
		t.Fatalf("the job was started %v times, want once", n)
	}
	rc := srv.Client(t, testCtx)
	if q, l := rc.LLen(context.Background(), keys.Queue("sh")).Val(), rc.ZCard(context.Background(), keys.Leases).Val(); q != 0 || l != 0 {
		t.Fatalf("after the end: %d queued, %d leases", q, l)
	}
}

// A stop request (the job's worker's control list, as RequestStop pushes it) kills
// the running job's process group; the job ends in error "stopped", fatal.
func TestStopRequestKillsTheRunningJob(t *testing.T) {
	h := newHarness(t)
	h.start()
	j := h.submit(h.pidScript("stop", "sleep 30"), 0)
	h.waitStatus(j.ID, time.Minute, model.JobStarted)
	pid := h.pid("stop")
	worker, _, err := h.db.RequestStop(context.Background(), 1, j.ID, "1")
	if err != nil || worker != "test-runner" {
		t.Fatalf("stop request: worker %q, %v", worker, err)
	}
	got := h.waitStatus(j.ID, time.Minute, model.JobError, model.JobFinished)
	if got.Status != model.JobError || got.Error != "stopped" || !got.Fatal {
		t.Fatalf("stopped job: status %s error %q fatal %v", got.Status, got.Error, got.Fatal)
	}
	h.waitFor("the job's process is gone", time.Minute, func() bool { return gone(pid) })
	if h.r.stop(model.JobRef{ContextID: testCtx, CallerID: 1, ID: j.ID}, "stopped") {
		t.Fatal("stop found the ended job still running")
	}
}

// A job's timeout kills its process group: error "timeout". The script writes its pid
// first; on a loaded machine the 1 s timeout may kill it before it does (there is
// then no process to look for), so the pid is read after the end, not waited for.
func TestTimeoutKillsTheRun(t *testing.T) {
	h := newHarness(t)
	h.start()
	j := h.submit(h.pidScript("timeout", "sleep 300"), 1)
	got := h.waitStatus(j.ID, time.Minute, model.JobError, model.JobFinished)
	if got.Status != model.JobError || got.Error != "timeout" {
		t.Fatalf("job over its timeout: status %s error %q", got.Status, got.Error)
	}
	b, err := os.ReadFile(filepath.Join(h.dir, "timeout"))
	if err != nil {
		t.Logf("the timeout came before the script wrote its pid: %v", err)
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Logf("the timeout came while the script wrote its pid: %q", b)
		return
	}
	h.waitFor("the job's process is gone", time.Minute, func() bool { return gone(pid) })
}

// At shutdown a running job that ends within --shutdown-timeout finishes, and its end
// is written.
func TestDrainLetsRunningJobsFinish(t *testing.T) {
	h := newHarness(t, "--shutdown-timeout", "20s")
	h.start()
	// The job's script writes its pid first: the shutdown comes once the job runs (a
	// job claimed but not yet started is handed back, not drained).
	j := h.submit(fmt.Sprintf("echo $$ > %s\nsleep 0.5\necho drained\n", filepath.Join(h.dir, "drain")), 0)
	h.waitStatus(j.ID, time.Minute, model.JobStarted)
	h.pid("drain")
	h.shutdown()
	got := h.job(j.ID)
	if got.Status != model.JobFinished || got.Result["output"] != "drained\n" {
		t.Fatalf("job running at shutdown: status %s error %q result %v", got.Status, got.Error, got.Result)
	}
}

// At shutdown a job still running after --shutdown-timeout is stopped (its process
// group killed) and handed back to its queue for another runner, with no end written.
func TestDrainHandsBackJobsOverTheTimeout(t *testing.T) {
	h := newHarness(t, "--shutdown-timeout", "300ms")
	h.start()
	j := h.submit(h.pidScript("drain", "sleep 600"), 0)
	h.waitStatus(j.ID, time.Minute, model.JobStarted)
	pid := h.pid("drain")
	start := time.Now()
	h.shutdown()
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("shutdown took %s with a 300ms drain (the job sleeps 600 s)", d)
	}
	h.waitFor("the job's process is gone", time.Minute, func() bool { return gone(pid) })
	ctx := context.Background()
	rc := srv.Client(t, testCtx)
	items, err := rc.LRange(ctx, keys.Queue("sh"), 0, -1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if !slices.Contains(items, keys.Job(1, j.ID)) {
		t.Fatalf("queue %v after the drain: the job was not handed back", items)
	}
	if n := rc.ZCard(ctx, keys.Leases).Val(); n != 0 {
		t.Fatalf("%d leases held after the hand-back", n)
	}
	if got := h.job(j.ID); got.Status == model.JobFinished || got.Status == model.JobError {
		t.Fatalf("a handed-back job got an end: status %s error %q", got.Status, got.Error)
	}
}

// A runner that is shutting down takes no dependent at a job's end (the take): the
// drain lets the running job finish, and its dependent, made ready by that end, waits
// on its queue for another runner rather than starting here.
func TestDrainTakesNoDependent(t *testing.T) {
	h := newHarness(t, "--shutdown-timeout", "20s")
	ctx := context.Background()
	if err := h.s.SetSchedulerSettings(ctx, time.Hour, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	h.start()
	a, _, err := h.s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: testCtx, ScriptType: "sh",
		Script: fmt.Sprintf("echo $$ > %s\nsleep 0.5\n", filepath.Join(h.dir, "drain"))}, "1")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := h.s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: testCtx, ScriptType: "sh", Script: "echo b", Dependends: []uint32{a.ID}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := h.s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: testCtx, Jobs: []uint32{a.ID, b.ID}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	storetest.StartFlow(t, h.db, f)
	if _, err := h.db.DispatchMany(ctx, f.ID, 1, []*model.Job{a}, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	if err := h.db.Enqueue(ctx, keys.Queue("sh"), keys.Job(1, a.ID)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(a.ID, time.Minute, model.JobStarted)
	h.pid("drain")
	h.shutdown()
	if got := h.job(a.ID); got.Status != model.JobFinished {
		t.Fatalf("job a after the drain: %s %q", got.Status, got.Error)
	}
	if got := h.job(b.ID); got.Status != model.JobDispatched {
		t.Fatalf("job b after the drain: %s (worker %q), want dispatched, waiting for another runner", got.Status, got.Worker)
	}
	items, err := srv.Client(t, testCtx).LRange(ctx, keys.Queue("sh"), 0, -1).Result()
	if err != nil || !slices.Contains(items, keys.Job(1, b.ID)) {
		t.Fatalf("queue %v (%v): b not on it", items, err)
	}
}

// A run's end is written while another one's finish call is in flight (the finisher
// holds up to two calls; the second starts beside a small one at once): each job's
// events stay in order (started, then its end), and the end held back is written
// once its call goes on.
func TestEndWrittenWhileAnotherFinishIsInFlight(t *testing.T) {
	h := newHarness(t)
	held, release := make(chan struct{}), make(chan struct{})
	var first *model.Job
	h.r.finisher.Close()
	h.r.finisher = newFinisher(func(ctx context.Context, fs []store.Finish) ([]bool, []error) {
		for _, f := range fs {
			if first != nil && f.Job.ID == first.ID {
				close(held)
				<-release // this call stays in flight until the test lets it go
			}
		}
		return h.r.writeEnds(ctx, fs)
	})
	first = h.submit("true", 0)
	h.start()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the runner's shutdown, which waits for the call
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("timed out waiting for the first job's finish call")
	}
	second := h.submit("true", 0)
	if got := h.waitStatus(second.ID, time.Minute, model.JobFinished, model.JobError); got.Status != model.JobFinished {
		t.Fatalf("second job: %s (%s)", got.Status, got.Error)
	}
	if got := h.job(first.ID); got.Status != model.JobStarted {
		t.Fatalf("first job %s while its finish call is held, want started", got.Status)
	}
	free()
	if got := h.waitStatus(first.ID, time.Minute, model.JobFinished, model.JobError); got.Status != model.JobFinished {
		t.Fatalf("first job: %s (%s)", got.Status, got.Error)
	}
	evs, err := h.db.ReadEvents(context.Background(), "0", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range evs {
		if e.Type == "job.started" || e.Type == "job.finished" {
			order = append(order, fmt.Sprintf("%s %d", e.Type, e.JobID))
		}
	}
	want := []string{"job.started " + strconv.Itoa(int(first.ID)), "job.started " + strconv.Itoa(int(second.ID)),
		"job.finished " + strconv.Itoa(int(second.ID)), "job.finished " + strconv.Itoa(int(first.ID))}
	if !slices.Equal(order, want) {
		t.Fatalf("events %v, want %v", order, want)
	}
}

// The ends of runs take the next jobs of their queue on their own slots (the finish
// script's take): the jobs run without claims of their own, never more at once than
// --concurrency, and every slot is free again once they have all ended.
func TestEndsTakeTheNextJobsOnTheirSlots(t *testing.T) {
	h := newHarness(t, "--concurrency", "3", "--claim-loops", "1")
	if err := h.s.SetSchedulerSettings(context.Background(), time.Hour, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// Each job counts the jobs running beside it (their marker directories).
	script := fmt.Sprintf(`d=%s; mkdir "$d/run.$$"; ls "$d" | grep -c '^run\.' >> "$d/counts.$$"; sleep 0.02; rmdir "$d/run.$$"`, h.dir)
	var jobs []*model.Job
	for range 8 {
		jobs = append(jobs, h.submit(script, 0))
	}
	h.start()
	for _, j := range jobs {
		if got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError); got.Status != model.JobFinished {
			t.Fatalf("job %d: %s (%s)", j.ID, got.Status, got.Error)
		}
	}
	if n := testutil.ToFloat64(h.r.m.taken); n == 0 {
		t.Fatal("no job was taken by an end: each waited for a claim of its own")
	}
	counts, err := filepath.Glob(filepath.Join(h.dir, "counts.*"))
	if err != nil || len(counts) != len(jobs) {
		t.Fatalf("%d jobs counted their neighbours (%v), want %d", len(counts), err, len(jobs))
	}
	for _, c := range counts {
		raw, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.Atoi(strings.TrimSpace(string(raw))); n < 1 || n > 3 {
			t.Fatalf("a job ran with %d running (%s), want at most --concurrency 3", n, raw)
		}
	}
	// Idle, the one claim loop holds the one slot it waits for a wake-up with.
	h.waitFor("every slot but the claim loop's is free again", time.Minute, func() bool { return len(h.r.slots) == 1 && h.r.core.Len() == 0 })
	if n := h.r.passed.size(); n != 0 {
		t.Fatalf("%d passed slots left unclaimed by their workers", n)
	}
	// The runner still claims: a job submitted now runs (a slot lost would stall it
	// once both were).
	last := h.submit("true", 0)
	if got := h.waitStatus(last.ID, time.Minute, model.JobFinished, model.JobError); got.Status != model.JobFinished {
		t.Fatalf("job after the takes: %s (%s)", got.Status, got.Error)
	}
}
