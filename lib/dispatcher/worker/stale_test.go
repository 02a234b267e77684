package worker

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/dispatcher"
)

// TestKillNineMidJob: a worker process killed with SIGKILL while it runs a job loses
// nothing: its heartbeat stops, another worker detects the stale claim, requeues the
// job and runs it, and the job finishes exactly once.
func TestKillNineMidJob(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	ctx := context.Background()
	dir := t.TempDir()

	// The first worker is this test binary in worker mode, in its own process.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DISPATCHER_TEST_WORKER=k9", "DISPATCHER_TEST_REDIS="+srv.Addr, "DISPATCHER_TEST_PROC=victim")
	cmd.Stderr = h.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// First run: signal, then sleep (exec: the sleep is the job's process and dies
	// with the worker). Second run: finish.
	marker := filepath.Join(dir, "ran-once")
	runs := filepath.Join(dir, "runs") // one line per start of the job
	id := dispatcher.NewJobID()
	script := `echo run >> ` + runs + `
if [ -e ` + marker + ` ]; then echo "second run"; exit 0; fi
touch ` + marker + `
` + rc + ` LPUSH test:victim-running x >/dev/null
exec sleep 60`
	h.seedJob(id, "k9", script)
	h.push("k9", id)
	h.signal("victim-running", time.Minute)
	if owner := h.rdb.HGet(ctx, "hero:coord:claims", id).Val(); owner != "victim" {
		t.Fatalf("job claimed by %q, want victim", owner)
	}
	if st := h.hash(id)["status"]; st != "started" {
		t.Fatalf("status %q, want started", st)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// Another worker, in this process: it finds the victim's heartbeat stale (1 s) and
	// requeues its job, which it then runs.
	w, _ := h.worker(Params{Workers: sh("k9"), ProcessID: "rescuer", StaleAfter: time.Second})
	if r := h.reply(id, time.Minute); r != "second run\n" {
		t.Fatalf("reply = %q", r)
	}
	f := h.hash(id)
	if f["status"] != "finished" || f["output"] != "second run\n" {
		t.Fatalf("status %q output %q", f["status"], f["output"])
	}
	// Exactly once: one reply (taken), nothing queued or claimed any more, and the
	// dead process is gone from the heartbeat set.
	if n := h.rdb.LLen(ctx, "hero:reply:"+id).Val(); n != 0 {
		t.Errorf("%d more replies", n)
	}
	if n := h.rdb.LLen(ctx, "hero:work_queue:k9").Val(); n != 0 {
		t.Errorf("%d jobs left on the work queue", n)
	}
	if n := h.rdb.Exists(ctx, "hero:coord:processing:victim:k9", "hero:coord:proc:victim").Val(); n != 0 {
		t.Errorf("the dead process's keys remain")
	}
	if h.rdb.ZScore(ctx, "hero:coord:procs", "victim").Err() == nil {
		t.Error("the dead process is still in the heartbeat set")
	}
	if h.rdb.HExists(ctx, "hero:coord:claims", id).Val() {
		t.Error("claim left behind")
	}
	if v := testutil.ToFloat64(w.m.requeued); v != 1 {
		t.Errorf("stale requeues counted %v, want 1", v)
	}
	// Two starts in all: the killed one and the rescue.
	if b, err := os.ReadFile(runs); err != nil || strings.Count(string(b), "run\n") != 2 {
		t.Errorf("the job started %q times (%v), want twice", b, err)
	}
	// The victim's sleep died with it (parent-death signal on the job's process).
	if out, _ := exec.Command("pgrep", "-f", "sleep 60").Output(); len(out) > 0 {
		for _, p := range strings.Fields(string(out)) {
			if pid, _ := strconv.Atoi(p); pid > 0 {
				if b, err := os.ReadFile("/proc/" + p + "/environ"); err == nil && bytes.Contains(b, []byte("HERO_JOB_ID="+id)) {
					t.Errorf("the killed worker's job process %d survived", pid)
				}
			}
		}
	}
}

// TestForeignClaimNotRequeued: a job taken by a worker of another implementation (it
// sends no heartbeat of ours) stays as it is, however old its "started" status,
// while dead processes of ours are swept.
func TestForeignClaimNotRequeued(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()

	// A foreign worker took job F an hour ago (BLPOP, HSET started) and went silent.
	f := dispatcher.NewJobID()
	old := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	h.seedJob(f, "fs", "echo foreign", "status", "started", "updated_at", old)

	// A dead process of ours holds job D.
	d := dispatcher.NewJobID()
	h.seedJob(d, "fs", "echo requeued", "status", "started")
	h.rdb.ZAdd(ctx, "hero:coord:procs", redis.Z{Score: float64(time.Now().Add(-time.Hour).UnixMilli()), Member: "dead-one"})
	h.rdb.HSet(ctx, "hero:coord:proc:dead-one", "worker_ids", `["fs"]`)
	h.rdb.LPush(ctx, "hero:coord:processing:dead-one:fs", d)
	h.rdb.HSet(ctx, "hero:coord:claims", d, "dead-one")

	h.worker(Params{Workers: sh("fs")})
	// D's run proves a sweep has happened.
	if r := h.reply(d, time.Minute); r != "requeued\n" {
		t.Fatalf("reply %q", r)
	}
	ff := h.hash(f)
	if ff["status"] != "started" || ff["updated_at"] != old {
		t.Errorf("the foreign worker's job was touched: %v", ff)
	}
	if n := h.rdb.LLen(ctx, "hero:work_queue:fs").Val(); n != 0 {
		t.Errorf("%d jobs on the queue", n)
	}
	if n := h.rdb.Exists(ctx, "hero:reply:"+f).Val(); n != 0 {
		t.Error("the foreign job got a reply")
	}
}

// TestHandBackAtShutdown: a worker stopped while it runs a job puts the job back on
// its queue (status dispatched again); another worker runs it.
func TestHandBackAtShutdown(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	ctx := context.Background()
	_, stop := h.worker(Params{Workers: sh("hb"), ProcessID: "leaving"})
	id := dispatcher.NewJobID()
	h.seedJob(id, "hb", rc+` LPUSH test:hb-running "$HERO_ATTEMPT" >/dev/null; sleep 60 & wait`)
	h.push("hb", id)
	h.signal("hb-running", time.Minute)
	stop()
	if st := h.hash(id)["status"]; st != "dispatched" {
		t.Fatalf("status after hand-back %q, want dispatched", st)
	}
	if q := h.rdb.LRange(ctx, "hero:work_queue:hb", 0, -1).Val(); len(q) != 1 || q[0] != id {
		t.Fatalf("work queue %v", q)
	}
	if h.rdb.ZScore(ctx, "hero:coord:procs", "leaving").Err() == nil {
		t.Error("the stopped process is still registered")
	}
	if n := h.rdb.Exists(ctx, "hero:reply:"+id).Val(); n != 0 {
		t.Error("a handed-back job got a reply")
	}
	c, _ := dispatcher.NewClient(h.rdb, dispatcher.ClientOptions{})
	h.worker(Params{Workers: sh("hb"), ProcessID: "taking-over"})
	h.signal("hb-running", time.Minute)
	if _, err := c.StopJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	if r := h.reply(id, time.Minute); r != "stopped_by_request" {
		t.Fatalf("reply %q", r)
	}
}
