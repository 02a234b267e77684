package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// crashFlow is a chain 1 → 2 → 3 plus an independent job 4; job 1 runs long enough
// for a service to be killed while it runs.
func crashFlow(t *testing.T, c *harness.Client, flowID uint32, firstSleep string) {
	createFlow(t, c, flowID, nil,
		jobSpec{id: 1, typ: "sh", script: "sleep " + firstSleep + "; echo one; echo V=1 > $HERO_RESULT_FILE"},
		jobSpec{id: 2, typ: "sh", script: "echo two $HERO_DEP_1_V; echo V=2 > $HERO_RESULT_FILE", deps: []uint32{1}},
		jobSpec{id: 3, typ: "python", script: "import os; print('three', os.environ['HERO_DEP_2_V'])", deps: []uint32{2}},
		jobSpec{id: 4, typ: "sh", script: "echo four"},
	)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": flowID}, nil)
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, 1).Status == "started" }) {
		t.Fatal("job 1 never started")
	}
}

func checkCrashFlow(t *testing.T, s *harness.Stack, c *harness.Client, flowID uint32, wantStarts1 int) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t)
			for _, p := range []*harness.Proc{s.Router, s.Scheduler} {
				for _, l := range strings.Split(p.Output(), "\n") {
					if !strings.Contains(l, "listening") {
						t.Logf("%s: %s", p.Name, l)
					}
				}
			}
		}
	})
	f := c.WaitFlow(t, ctx1, flowID, 90*time.Second)
	if f.Status != "finished" {
		t.Fatalf("flow after the crash: %+v", f)
	}
	if f.Result["3.output"] != "three 2\n" || f.Result["2.output"] != "two 1\n" {
		t.Errorf("results: %v", f.Result)
	}
	evs := events(t, c)
	for _, id := range []uint32{1, 2, 3, 4} {
		if n := countEvents(evs, "job.finished", id); n != 1 {
			t.Errorf("job %d finished %d times", id, n)
		}
		if j := loadJob(t, c, id); j.Status != "finished" || j.Attempt != 1 {
			t.Errorf("job %d: %+v", id, j)
		}
	}
	if wantStarts1 > 0 {
		if n := countEvents(evs, "job.started", 1); n != wantStarts1 {
			t.Errorf("job 1 started %d times, want %d", n, wantStarts1)
		}
	}
	if countEvents(evs, "flow.finished", 0) != 1 {
		t.Errorf("flow.finished events: %d", countEvents(evs, "flow.finished", 0))
	}
}

// Acceptance (core 6): kill -9 of the scheduler mid-flow.
func TestKillSchedulerMidFlow(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	crashFlow(t, c, 60, "2")
	s.Scheduler.Kill()
	// Job 1 ends while the scheduler is down: the router keeps the result and retries.
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, 1).Status == "finished" }) {
		t.Fatal("job 1 did not finish")
	}
	s.Start("scheduler")
	checkCrashFlow(t, s, c, 60, 1)
}

// Acceptance (core 6): kill -9 of the router mid-flow.
func TestKillRouterMidFlow(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	crashFlow(t, c, 61, "2")
	s.Router.Kill()
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, 1).Status == "finished" }) {
		t.Fatal("job 1 did not finish")
	}
	s.Start("router")
	checkCrashFlow(t, s, c, 61, 1)
}

// Acceptance (core 6; issue 17, 3): kill -9 of the runner mid-job; restarted under its
// default worker id, it takes its job back at once (with a 10-minute lease: within the
// test's minute is not by the lease's expiry), runs it again, and the flow finishes,
// every job once.
func TestKillRunnerMidFlow(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--lease", "10m", "--heartbeat", "5s"}})
	crashFlow(t, c, 62, "3")
	dead := loadJob(t, c, 1).Worker
	s.Runner.Kill()
	restart := time.Now()
	s.Start("runner")
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, 1).StartedAtMs > restart.UnixMilli() }) {
		t.Fatal("job 1 was not started again")
	}
	if took := time.UnixMilli(loadJob(t, c, 1).StartedAtMs).Sub(restart); took > time.Minute {
		t.Errorf("the restarted runner took job 1 back after %v, want at once (the lease is 10 minutes)", took)
	}
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Runner.WaitLog(wctx, "took back jobs held before a restart"); err != nil {
		t.Error(err)
	}
	checkCrashFlow(t, s, c, 62, 2)
	if w := loadJob(t, c, 1).Worker; w != dead || !strings.HasPrefix(w, "runner-") {
		t.Errorf("job 1 finished on %q; want the default worker id of the killed runner, %q", w, dead)
	}
}

// Acceptance (issue 17, 3): two live runners under one worker id: the second is
// refused at start with an error that says why.
func TestSecondRunnerWithSameIDRefused(t *testing.T) {
	s, _ := newStack(t, harness.StackOptions{})
	p, err := harness.StartProc(s.BinDir, "runner", s.RedisURL, harness.Options{Args: s.Args["runner"]})
	if p != nil {
		p.Kill()
	}
	if err == nil || !strings.Contains(err.Error(), "in use by a live process") || !strings.Contains(err.Error(), "--worker-id") {
		t.Fatalf("a second runner with the same worker id: %v", err)
	}
}

// dumpState logs what a stuck flow left in Redis, to diagnose a failure.
func dumpState(t *testing.T) {
	ctx := context.Background()
	c1, c0 := redisSrv.Client(t, 1), redisSrv.Client(t, 0)
	for _, k := range redisSrv.Keys(t, 1) {
		switch c1.Type(ctx, k).Val() {
		case "list":
			t.Logf("db1 %s = %v", k, c1.LRange(ctx, k, 0, -1).Val())
		case "zset":
			t.Logf("db1 %s = %v", k, c1.ZRangeWithScores(ctx, k, 0, -1).Val())
		case "hash":
			if strings.HasPrefix(k, "coord:dag") {
				t.Logf("db1 %s = %v", k, c1.HGetAll(ctx, k).Val())
			}
			if strings.HasPrefix(k, "message:") || strings.HasPrefix(k, "job:") {
				m := c1.HGetAll(ctx, k).Val()
				t.Logf("db1 %s status=%s kind=%s updated_at=%s worker=%s", k, m["status"], m["kind"], m["updated_at"], m["worker"])
			}
		}
	}
	for _, k := range redisSrv.Keys(t, 0) {
		if c0.Type(ctx, k).Val() == "list" {
			t.Logf("db0 %s = %v", k, c0.LRange(ctx, k, 0, -1).Val())
		}
	}
}
