package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hero-coordinator/hero/lib/dispatcher"
)

func sh(id string) []Spec { return []Spec{{ID: id, Argv: []string{"/bin/sh"}}} }

// TestStopRunning: a stop request on the stop queue kills the running job (its whole
// process group): status error, error stopped_by_request, the reply says so.
func TestStopRunning(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	h.worker(Params{Workers: sh("stop")})
	c, _ := dispatcher.NewClient(h.rdb, dispatcher.ClientOptions{})
	id := dispatcher.NewJobID()
	h.seedJob(id, "stop", rc+" LPUSH test:running x >/dev/null; sleep 60 & wait", "retries", "3")
	h.push("stop", id)
	h.signal("running", time.Minute)
	if _, err := c.StopJob(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if r := h.reply(id, time.Minute); r != "stopped_by_request" {
		t.Fatalf("reply = %q, want stopped_by_request", r)
	}
	f := h.hash(id)
	if f["status"] != "error" || f["error"] != "stopped_by_request" {
		t.Fatalf("status %q error %q", f["status"], f["error"])
	}
	// Not retried (retries 3): a stop is final.
	if n := h.rdb.LLen(context.Background(), "test:running").Val(); n != 0 {
		t.Fatalf("the stopped job ran again (%d more starts)", n)
	}
}

// TestStopBeforeStart: a job stopped while it waits in the queue ends with error
// "stopped" at once and never runs.
func TestStopBeforeStart(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	h.worker(Params{Workers: sh("sb")})
	ctx := context.Background()
	c, _ := dispatcher.NewClient(h.rdb, dispatcher.ClientOptions{})
	blocker, queued, after := dispatcher.NewJobID(), dispatcher.NewJobID(), dispatcher.NewJobID()
	h.seedJob(blocker, "sb", rc+" LPUSH test:blocker x >/dev/null; "+rc+" BLPOP test:release 30 >/dev/null")
	h.seedJob(queued, "sb", rc+" LPUSH test:queued-ran x >/dev/null")
	h.seedJob(after, "sb", "echo after")
	h.push("sb", blocker)
	h.signal("blocker", time.Minute) // the worker (concurrency 1) is busy
	h.push("sb", queued)
	h.push("sb", after)
	if _, err := c.StopJob(ctx, queued); err != nil {
		t.Fatal(err)
	}
	if r := h.reply(queued, time.Minute); r != "stopped" {
		t.Fatalf("reply = %q, want stopped", r)
	}
	if f := h.hash(queued); f["status"] != "error" || f["error"] != "stopped" {
		t.Fatalf("status %q error %q", f["status"], f["error"])
	}
	h.rdb.LPush(ctx, "test:release", "go")
	h.reply(blocker, time.Minute)
	if r := h.reply(after, time.Minute); r != "after\n" {
		t.Fatalf("next job's reply %q", r)
	}
	if n := h.rdb.LLen(ctx, "test:queued-ran").Val(); n != 0 {
		t.Fatal("the job stopped before it started ran")
	}
	if n := h.rdb.LLen(ctx, "hero:reply:"+queued).Val(); n != 0 {
		t.Fatalf("a second reply for the stopped job (%d)", n)
	}
	if n := h.rdb.Exists(ctx, "hero:coord:stop:"+queued).Val(); n != 0 {
		t.Fatal("stop mark left behind")
	}
}

// TestStopForwarded: two processes serve one worker id. A stop request popped by the
// process that does not run the job is forwarded to the one that does. Which of two
// watching processes pops a request is up to Redis, so the forwarding path is driven
// through the other process's handler, as if its pop had taken the request; a
// second job is then stopped through the stop queue with both watching.
func TestStopForwarded(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	ctx := context.Background()
	a, _ := h.worker(Params{Workers: sh("fwd"), ProcessID: "proc-a"})
	id := dispatcher.NewJobID()
	h.seedJob(id, "fwd", rc+" LPUSH test:running x >/dev/null; sleep 60 & wait")
	h.push("fwd", id)
	h.signal("running", time.Minute)
	if owner := h.rdb.HGet(ctx, "hero:coord:claims", id).Val(); owner != a.ProcessID() {
		t.Fatalf("claim owner %q, want %s", owner, a.ProcessID())
	}
	b, _ := h.worker(Params{Workers: sh("fwd"), ProcessID: "proc-b"})
	b.handleStop("fwd", id)
	if r := h.reply(id, time.Minute); r != "stopped_by_request" {
		t.Fatalf("reply = %q, want stopped_by_request", r)
	}

	c, _ := dispatcher.NewClient(h.rdb, dispatcher.ClientOptions{})
	id2 := dispatcher.NewJobID()
	h.seedJob(id2, "fwd", rc+" LPUSH test:running x >/dev/null; sleep 60 & wait")
	h.push("fwd", id2)
	h.signal("running", time.Minute)
	if _, err := c.StopJob(ctx, id2); err != nil {
		t.Fatal(err)
	}
	if r := h.reply(id2, time.Minute); r != "stopped_by_request" {
		t.Fatalf("reply = %q, want stopped_by_request", r)
	}
}

// TestTimeout: a job running longer than its timeout is killed: status error, error
// timeout; each retry gets the whole timeout again.
func TestTimeout(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	h.worker(Params{Workers: sh("to")})
	ctx := context.Background()
	id := dispatcher.NewJobID()
	h.seedJob(id, "to", "echo before; "+rc+" LPUSH test:attempt x >/dev/null; sleep 300", "timeout", "1", "retries", "1")
	start := time.Now()
	h.push("to", id)
	if r := h.reply(id, time.Minute); r != "timeout" {
		t.Fatalf("reply = %q, want timeout", r)
	}
	f := h.hash(id)
	if f["status"] != "error" || f["error"] != "timeout" {
		t.Fatalf("status %q error %q", f["status"], f["error"])
	}
	// Each attempt marks its start, unless its 1 s ends first on a loaded machine:
	// never more than 2 (the log's separator below says the second one ran).
	if n := h.rdb.LLen(ctx, "test:attempt").Val(); n > 2 {
		t.Errorf("%d attempts, want 2 (retries 1)", n)
	}
	if el := time.Since(start); el > time.Minute {
		t.Errorf("two 1s attempts of a 300 s sleep took %s", el)
	}
	log := h.rdb.Get(ctx, "hero:coord:log:"+id).Val()
	if !strings.Contains(log, "--- attempt 2 of 2 ---") {
		t.Errorf("log has no attempt separator: %q", log)
	}
}

// TestRetries: a failing job is re-run up to retries times; it finishes when an
// attempt succeeds.
func TestRetries(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	h.worker(Params{Workers: sh("rt")})
	ctx := context.Background()
	// Fails twice, then succeeds (the attempt number comes from HERO_ATTEMPT).
	id := dispatcher.NewJobID()
	h.seedJob(id, "rt", `if [ "$HERO_ATTEMPT" -lt 3 ]; then echo "fail $HERO_ATTEMPT" >&2; exit 1; fi; echo "ok on $HERO_ATTEMPT"`, "retries", "2")
	h.push("rt", id)
	if r := h.reply(id, time.Minute); r != "ok on 3\n" {
		t.Fatalf("reply = %q", r)
	}
	if f := h.hash(id); f["status"] != "finished" {
		t.Fatalf("status %q", f["status"])
	}
	// Not enough retries: the last error stands.
	id2 := dispatcher.NewJobID()
	h.seedJob(id2, "rt", ``+rc+` LPUSH test:tries x >/dev/null; echo "fail $HERO_ATTEMPT" >&2; exit 1`, "retries", "1")
	h.push("rt", id2)
	if r := h.reply(id2, time.Minute); r != "exit code 1: fail 2" {
		t.Fatalf("reply = %q", r)
	}
	if n := h.rdb.LLen(ctx, "test:tries").Val(); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
}

// TestEnvVars: env_vars (a JSON object) is the job's environment, on top of PATH,
// HOME and LANG; nothing of the worker's own environment leaks in.
func TestEnvVars(t *testing.T) {
	h := newHarness(t)
	t.Setenv("DISPATCHER_LEAK_CANARY", "leaked")
	h.worker(Params{Workers: sh("env")})
	id := dispatcher.NewJobID()
	h.seedJob(id, "env", `echo "$GREETING|$COUNT|$FLAG|$EMPTY|$HERO_JOB_ID|$HERO_WORKER_ID"; env | sort`,
		"env_vars", `{"GREETING":"hello world","COUNT":5,"FLAG":true,"EMPTY":null}`)
	h.push("env", id)
	out := h.reply(id, time.Minute)
	first, rest, _ := strings.Cut(out, "\n")
	if want := "hello world|5|true||" + id + "|env"; first != want {
		t.Fatalf("first line %q, want %q", first, want)
	}
	if strings.Contains(rest, "DISPATCHER_LEAK_CANARY") || strings.Contains(rest, "leaked") {
		t.Fatalf("the worker's environment leaked into the job:\n%s", rest)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(rest), "\n") {
		k, _, _ := strings.Cut(l, "=")
		names = append(names, k)
	}
	allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "GREETING": true, "COUNT": true, "FLAG": true, "EMPTY": true,
		"HERO_JOB_ID": true, "HERO_WORKER_ID": true, "HERO_ATTEMPT": true, "PWD": true, "SHLVL": true, "OLDPWD": true, "_": true}
	for _, n := range names {
		if !allowed[n] {
			t.Errorf("unexpected variable %s in the job's environment", n)
		}
	}
}

// TestLogPath: log_path inside the log directory gets the job's output; a path
// outside is refused (status error, nothing written, the script does not run), also
// through a symlink; the output is kept in Redis as well.
func TestLogPath(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	logDir := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(logDir, "escape")); err != nil {
		t.Fatal(err)
	}
	h.worker(Params{Workers: sh("lp"), LogDir: logDir})
	c, _ := dispatcher.NewClient(h.rdb, dispatcher.ClientOptions{LogDir: logDir})
	logPathInside(t, h, c, logDir)
	logPathOutside(t, h, logDir, outside)

	// A worker without a log directory refuses log_path.
	srv.Flush(t)
	h2 := newHarness(t)
	h2.worker(Params{Workers: sh("nolog")})
	id := dispatcher.NewJobID()
	h2.seedJob(id, "nolog", "echo x", "log_path", "a.log")
	h2.push("nolog", id)
	if r := h2.reply(id, 20*time.Second); !strings.Contains(r, "no log directory") {
		t.Errorf("reply %q", r)
	}
	// The client reads no file outside its own log directory either.
	id3 := dispatcher.NewJobID()
	h.rawJob(id3, "id", id3, "status", "finished", "log_path", "/etc/passwd", "output", "out")
	logs, err := c.JobLogs(context.Background(), id3)
	if err != nil {
		t.Fatal(err)
	}
	if logs.FileRead || logs.FileError == "" {
		t.Errorf("client read a log_path outside its log directory: %+v", logs)
	}
	if text, src := logs.Text(); src != "output" || text != "out" {
		t.Errorf("fallback text %q from %s", text, src)
	}
}

// logPathInside: a log_path inside the log directory (relative and absolute) gets
// stdout and stderr, and the client reads it back, besides the Redis copy.
func logPathInside(t *testing.T, h *harness, c *dispatcher.Client, logDir string) {
	for _, p := range []string{"jobs/a/one.log", filepath.Join(logDir, "two.log")} {
		id := dispatcher.NewJobID()
		h.seedJob(id, "lp", "echo to-stdout; echo to-stderr >&2", "log_path", p)
		h.push("lp", id)
		if r := h.reply(id, time.Minute); r != "to-stdout\n" {
			t.Fatalf("reply %q", r)
		}
		full := p
		if !filepath.IsAbs(full) {
			full = filepath.Join(logDir, p)
		}
		b, err := os.ReadFile(full)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "to-stdout\n") || !strings.Contains(string(b), "to-stderr\n") {
			t.Fatalf("log file %s = %q", p, b)
		}
		logs, err := c.JobLogs(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !logs.FileRead || logs.File != string(b) {
			t.Errorf("JobLogs file = %q (%s)", logs.File, logs.FileError)
		}
		if !logs.HasStored || !strings.Contains(logs.Stored, "to-stderr") {
			t.Errorf("Redis copy = %q", logs.Stored)
		}
	}
}

// logPathOutside: a log_path outside the log directory is refused before anything
// runs or is written.
func logPathOutside(t *testing.T, h *harness, logDir, outside string) {
	for _, p := range []string{filepath.Join(outside, "x.log"), "../x.log", "escape/x.log", "/etc/hero-dispatcher-test.log"} {
		id := dispatcher.NewJobID()
		h.seedJob(id, "lp", rc+" LPUSH test:ran x >/dev/null; echo ran", "log_path", p)
		h.push("lp", id)
		r := h.reply(id, time.Minute)
		f := h.hash(id)
		if f["status"] != "error" || !strings.Contains(f["error"], "log_path") || r != f["error"] {
			t.Errorf("log_path %q: status %q error %q reply %q", p, f["status"], f["error"], r)
		}
	}
	if n := h.rdb.LLen(context.Background(), "test:ran").Val(); n != 0 {
		t.Errorf("%d jobs with a refused log_path ran", n)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("files written outside the log directory: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(logDir), "x.log")); err == nil {
		t.Error("../x.log was written")
	}
}

// TestDependencies: a job whose dependencies have not finished does not run; it runs
// as soon as they have (event-driven: the safety re-check is an hour here). A failed
// dependency fails the job.
func TestDependencies(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	ctx := context.Background()
	h.worker(Params{Workers: sh("dep"), DependencyRecheck: time.Hour})
	a, b, c := dispatcher.NewJobID(), dispatcher.NewJobID(), dispatcher.NewJobID()
	status := func(id string) string {
		return `"$(` + rc + ` HGET hero:job:` + id + ` status)"`
	}
	// c depends on a (dependencies) and b (prerequisites); queued first.
	h.seedJob(c, "dep", "echo a="+status(a)+" b="+status(b), "dependencies", `["`+a+`"]`, "prerequisites", `["`+b+`"]`)
	h.push("dep", c)
	h.seedJob(a, "dep", "echo a")
	h.push("dep", a)
	h.reply(a, time.Minute)
	if f := h.hash(c); f["status"] != "dispatched" {
		t.Fatalf("c ran with b missing: %v", f)
	}
	// (c is now waiting, or on its way back to the waiting set: a's end released it
	// and its next claim parked it again.)
	h.seedJob(b, "dep", "echo b")
	h.push("dep", b)
	h.reply(b, time.Minute)
	if r := h.reply(c, time.Minute); r != "a=finished b=finished\n" {
		t.Fatalf("c saw %q", r)
	}

	// A failed dependency fails the dependent, which never runs.
	x, y := dispatcher.NewJobID(), dispatcher.NewJobID()
	h.seedJob(y, "dep", rc+" LPUSH test:y-ran x", "dependencies", `["`+x+`"]`)
	h.push("dep", y)
	h.seedJob(x, "dep", "exit 4")
	h.push("dep", x)
	if r := h.reply(y, time.Minute); r != "dependency "+x+" failed" {
		t.Fatalf("dependent of a failed job: %q", r)
	}
	if n := h.rdb.LLen(ctx, "test:y-ran").Val(); n != 0 {
		t.Fatal("the dependent of a failed job ran")
	}
	if n := h.rdb.ZCard(ctx, "hero:coord:waiting:dep").Val(); n != 0 {
		t.Fatalf("waiting set has %d jobs left", n)
	}
}

// TestDependencyFinishedElsewhere: a dependency finished by a foreign worker (no event
// of ours) is noticed by the safety re-check.
func TestDependencyFinishedElsewhere(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	// The event that b is parked: a keyspace notification on the waiting zset.
	if err := h.rdb.ConfigSet(ctx, "notify-keyspace-events", "Kz").Err(); err != nil {
		t.Fatal(err)
	}
	defer h.rdb.ConfigSet(ctx, "notify-keyspace-events", "")
	sub := h.rdb.Subscribe(ctx, "__keyspace@0__:hero:coord:waiting:dep2")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	h.worker(Params{Workers: sh("dep2"), DependencyRecheck: 200 * time.Millisecond})
	a, b := dispatcher.NewJobID(), dispatcher.NewJobID()
	h.rawJob(a, "id", a, "status", "started")
	h.seedJob(b, "dep2", "echo b", "dependencies", `["`+a+`"]`)
	h.push("dep2", b)
	select {
	case m := <-sub.Channel():
		if m.Payload != "zadd" {
			t.Fatalf("event %q", m.Payload)
		}
	case <-time.After(time.Minute):
		t.Fatal("b was not parked")
	}
	// Finished by someone else, with a spelling of the status read tolerantly.
	h.rdb.HSet(ctx, "hero:job:"+a, "status", "Finished")
	if r := h.reply(b, time.Minute); r != "b\n" {
		t.Fatalf("reply %q", r)
	}
}

// TestConcurrent: with concurrency 2, concurrent=true jobs run side by side; a job
// with concurrent=false runs alone.
func TestConcurrent(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	h.worker(Params{Workers: sh("cc"), Concurrency: 2})
	// Two jobs that each wait for the other: both finish only if they overlap.
	meet := func(me, other string) string {
		return rc + " LPUSH test:" + me + " x >/dev/null; r=$(" + rc + " BLPOP test:" + other + " 5); [ -n \"$r\" ] && echo met"
	}
	a, b := dispatcher.NewJobID(), dispatcher.NewJobID()
	h.seedJob(a, "cc", meet("a", "b"), "concurrent", "true")
	h.seedJob(b, "cc", meet("b", "a"), "concurrent", "true")
	h.push("cc", a)
	h.push("cc", b)
	if ra, rb := h.reply(a, time.Minute), h.reply(b, time.Minute); ra != "met\n" || rb != "met\n" {
		t.Fatalf("concurrent jobs: %q %q", ra, rb)
	}
	// The same with concurrent=false: the first runs alone and cannot meet the
	// second (its wait times out), the second then finds the first's signal.
	c, d := dispatcher.NewJobID(), dispatcher.NewJobID()
	h.seedJob(c, "cc", strings.Replace(meet("c", "d"), " 5)", " 1)", 1), "concurrent", "false")
	h.seedJob(d, "cc", meet("d", "c"), "concurrent", "false")
	h.push("cc", c)
	h.push("cc", d)
	if rc := h.reply(c, time.Minute); !strings.HasPrefix(rc, "exit code 1") {
		t.Fatalf("non-concurrent job overlapped another: %q", rc)
	}
	if rd := h.reply(d, time.Minute); rd != "met\n" {
		t.Fatalf("second job: %q", rd)
	}
}

// TestBadHashes: bad job hashes end as status error with a clear error; an id with
// no hash is skipped with a log line; the worker keeps serving.
func TestBadHashes(t *testing.T) {
	h := newHarness(t)
	reg := prometheus.NewRegistry()
	w, _ := h.worker(Params{Workers: sh("bad"), Registerer: reg})
	ctx := context.Background()
	cases := []struct {
		name  string
		extra []string
		want  string
	}{
		{"missing script", []string{"script", "\x00delete"}, "invalid job: script is missing"},
		{"empty script", []string{"script", "  "}, "invalid job: script is missing"},
		{"env_vars not JSON", []string{"env_vars", "A=1"}, `invalid job: env_vars "A=1" is not a JSON object`},
		{"env_vars a list", []string{"env_vars", `["A"]`}, `invalid job: env_vars "[\"A\"]" is not a JSON object`},
		{"negative timeout", []string{"timeout", "-5"}, `invalid job: timeout "-5" is negative`},
		{"non-numeric timeout", []string{"timeout", "soon"}, `invalid job: timeout "soon" is not a number of seconds`},
		{"bad retries", []string{"retries", "many"}, `invalid job: retries "many" is not a whole number from 0 to 255`},
		{"bad dependencies", []string{"dependencies", `["a",`}, `invalid job: dependencies "[\"a\"," is not a JSON array of job ids`},
	}
	for _, tc := range cases {
		id := dispatcher.NewJobID()
		h.seedJob(id, "bad", "echo should-not-run", tc.extra...)
		h.push("bad", id)
		r := h.reply(id, time.Minute)
		f := h.hash(id)
		if f["status"] != "error" || f["error"] != tc.want || r != tc.want {
			t.Errorf("%s: status %q error %q reply %q, want error %q", tc.name, f["status"], f["error"], r, tc.want)
		}
	}
	// An id with no hash: nothing to write, a logged skip, no hash created.
	ghost := dispatcher.NewJobID()
	h.push("bad", ghost)
	good := dispatcher.NewJobID()
	h.seedJob(good, "bad", "echo still serving")
	h.push("bad", good)
	if r := h.reply(good, time.Minute); r != "still serving\n" {
		t.Fatalf("worker stopped serving: %q", r)
	}
	if n := h.rdb.Exists(ctx, "hero:job:"+ghost, "hero:reply:"+ghost).Val(); n != 0 {
		t.Errorf("keys written for an unknown job id")
	}
	if !strings.Contains(h.logs.String(), "no job hash: skipped") || !strings.Contains(h.logs.String(), ghost) {
		t.Errorf("no log line for the unknown job id")
	}
	if n := h.rdb.LLen(ctx, w.Keys().Processing(w.ProcessID(), "bad")).Val(); n != 0 {
		t.Errorf("processing list has %d items left", n)
	}
	if v := testutil.ToFloat64(w.m.errors.WithLabelValues("bad", "invalid")); v != float64(len(cases)) {
		t.Errorf("invalid errors counted %v", v)
	}
	if v := testutil.ToFloat64(w.m.errors.WithLabelValues("bad", "unknown_job")); v != 1 {
		t.Errorf("unknown_job counted %v", v)
	}
	if n, err := testutil.GatherAndCount(reg, "hero_dispatcher_queue_length"); err != nil || n != 3 {
		t.Errorf("queue depth samples: %d, %v", n, err)
	}
}

// TestStopWaiting: a job waiting for its dependencies is stopped before it started:
// error "stopped" at once, out of the waiting set, and it never runs.
func TestStopWaiting(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	ctx := context.Background()
	if err := h.rdb.ConfigSet(ctx, "notify-keyspace-events", "Kz").Err(); err != nil {
		t.Fatal(err)
	}
	defer h.rdb.ConfigSet(ctx, "notify-keyspace-events", "")
	sub := h.rdb.Subscribe(ctx, "__keyspace@0__:hero:coord:waiting:sw")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	h.worker(Params{Workers: sh("sw"), DependencyRecheck: time.Hour})
	c, _ := dispatcher.NewClient(h.rdb, dispatcher.ClientOptions{})
	dep, w := dispatcher.NewJobID(), dispatcher.NewJobID()
	h.seedJob(w, "sw", rc+" LPUSH test:w-ran x >/dev/null", "dependencies", `["`+dep+`"]`)
	h.push("sw", w)
	select {
	case <-sub.Channel(): // parked
	case <-time.After(time.Minute):
		t.Fatal("the job was not parked")
	}
	if _, err := c.StopJob(ctx, w); err != nil {
		t.Fatal(err)
	}
	if r := h.reply(w, time.Minute); r != "stopped" {
		t.Fatalf("reply %q", r)
	}
	if n := h.rdb.ZCard(ctx, "hero:coord:waiting:sw").Val(); n != 0 {
		t.Fatalf("still %d waiting", n)
	}
	// The dependency finishing later does not bring it back.
	h.seedJob(dep, "sw", "echo dep")
	h.push("sw", dep)
	h.reply(dep, time.Minute)
	next := dispatcher.NewJobID()
	h.seedJob(next, "sw", "echo next")
	h.push("sw", next)
	h.reply(next, time.Minute)
	if n := h.rdb.LLen(ctx, "test:w-ran").Val(); n != 0 {
		t.Fatal("the stopped waiting job ran")
	}
	if f := h.hash(w); f["status"] != "error" || f["error"] != "stopped" {
		t.Fatalf("status %q error %q", f["status"], f["error"])
	}
}
