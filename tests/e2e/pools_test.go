package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// poolReady is the runner's log line of an executor pool that started for a context.
func poolReady(executor string, ctxID uint32) []string {
	return []string{`"message":"executor pool ready"`, `"executor":"` + executor + `"`, fmt.Sprintf(`"context_id":%d,`, ctxID)}
}

// countLogLines counts a process's log lines that contain every one of subs.
func countLogLines(p *harness.Proc, subs []string) int {
	n := 0
	for _, l := range strings.Split(p.Output(), "\n") {
		if containsEvery(l, subs) {
			n++
		}
	}
	return n
}

func containsEvery(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Acceptance (issue 44, 2): a runner starts a context's executor pool when it starts
// serving the context — at its own start, and when a context is added — before any
// job of the context arrives; the context's first handler job then runs on that pool
// (no second start). Before, the pool started with the context's first job: no pool
// was ready until then.
func TestExecutorPoolStartsBeforeTheFirstJob(t *testing.T) {
	goExec := filepath.Join(binDir, harness.ExampleExecutor)
	s, c := servingStack(t, harness.StackOptions{RunnerArgs: []string{"--executors", "go;cmd=" + goExec}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Context 1, served from the runner's start: its pool is ready, no job submitted.
	if _, err := s.Runner.WaitLog(ctx, poolReady("go", ctx1)...); err != nil {
		t.Fatalf("no pool started for context 1 before its first job: %v", err)
	}
	start := time.Now()
	if j := runStandalone(t, c, map[string]any{"id": 1, "function_name": "go#pid"}); j.Status != "finished" {
		t.Fatalf("the first job: %+v", j)
	}
	t.Logf("context 1's first handler job: %v from submission to its end", time.Since(start))
	// Context 2, added while the runner runs: its pool starts once the runner serves
	// it, before its first job.
	s.Operator().MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, nil)
	c.MustCall(t, "runner.create", map[string]any{"context_id": 2, "runner": map[string]any{"id": 1, "script_types": []string{"sh", "go"}}}, nil)
	if _, err := s.Runner.WaitLog(ctx, poolReady("go", 2)...); err != nil {
		t.Fatalf("no pool started for context 2 once served: %v", err)
	}
	var j harness.Job
	start = time.Now()
	c.MustCall(t, "job.run", map[string]any{"context_id": 2, "job": map[string]any{"id": 1, "function_name": "go#pid"}, "timeout": 60}, &j)
	if j.Status != "finished" {
		t.Fatalf("context 2's first job: %+v", j)
	}
	t.Logf("context 2's first handler job: %v from submission to its end", time.Since(start))
	for _, id := range []uint32{ctx1, 2} {
		if n := countLogLines(s.Runner, poolReady("go", id)); n != 1 {
			t.Errorf("context %d: %d pool starts, want 1 (the one ahead of its first job)", id, n)
		}
	}
	checkPoolCPUWeight(t, s)
}

// checkPoolCPUWeight: an executor pool's cgroup is beside the jobs' (under
// hero-executors, not hero-jobs: the jobs together weigh one share against it) and
// weighs as much as the jobs the runner may run (--concurrency 4 here, each job 100):
// cgroup v1 cpu.shares 4096, v2 cpu.weight 400 (issue 44: its start is not starved by
// the jobs).
func checkPoolCPUWeight(t *testing.T, s *harness.Stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	line, err := s.Runner.WaitLog(ctx, `"message":"rrq executor process ready"`, `"executor":"go"`)
	m := regexp.MustCompile(`"pid":(\d+)`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("the pool's process: %q %v", line, err)
	}
	b, err := os.ReadFile("/proc/" + m[1] + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	file, want := "", ""
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		switch {
		case len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "cpu"):
			file, want = filepath.Join("/sys/fs/cgroup", f[1], f[2], "cpu.shares"), "4096"
		case len(f) == 3 && f[0] == "0" && file == "":
			file, want = filepath.Join("/sys/fs/cgroup", f[2], "cpu.weight"), "400"
		}
	}
	if file == "" || !strings.Contains(file, "/job-") {
		t.Skipf("the pool's process is in no job cgroup of the runner (%q): no cgroups here", b)
	}
	if !strings.Contains(file, "/hero-executors/job-") {
		t.Errorf("the pool's cgroup %s is not under hero-executors", file)
	}
	if got, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(got)) != want {
		t.Errorf("%s = %q (%v), want %s", file, got, err, want)
	}
}

// spec writes an executor script in a directory the sandbox's user reads: at its first
// start it runs the Go example; at every later start it runs later (exit 3: it cannot
// start again; exec sleep 600: it never listens). Its marker is in the pool's directory
// (its working directory, kept across the pool's restarts).
func specScript(t *testing.T, later string) string {
	t.Helper()
	script := filepath.Join(harness.ScratchDir(t), "executor.sh")
	body := "#!/bin/sh\nif [ -e started ]; then echo 'cannot start again' >&2; " + later + "; fi\n: > started\nexec " +
		filepath.Join(binDir, harness.ExampleExecutor) + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// runAsync submits a job and does not wait for it.
func runAsync(c *harness.Client, job map[string]any) {
	go func() { _ = c.Call("job.run", map[string]any{"context_id": ctx1, "job": job, "timeout": 60}, nil) }()
}

// waitStatus waits (a minute at most) until job id has the status, and returns it.
func waitStatus(t *testing.T, c *harness.Client, id uint32, status string) harness.Job {
	t.Helper()
	if !waitUntil(60*time.Second, func() bool { return jobStatus(c, id) == status }) {
		t.Fatalf("job %d is not %s: %+v", id, status, loadJob(t, c, id))
	}
	return loadJob(t, c, id)
}

// Acceptance (issue 44, 4): jobs waiting for a process of a pool end within their
// bound. The pool has one process taking one call at a time: a job waiting behind a
// running call ends at its timeout; when the running call's process is killed and
// cannot start again, a job waiting without a timeout fails with the clear error of a
// new job ("no live runner has a healthy pool", saying why). Before, both waited on
// the pool for ever (still started 90–250 s later).
func TestJobsWaitingOnAPoolThatCannotStartEnd(t *testing.T) {
	s, c := servingStack(t, harness.StackOptions{RunnerArgs: []string{
		"--executors", "spec;cmd=" + specScript(t, "exit 3") + ";inflight=1;ro=" + binDir, "--executor-cancel-grace", "1s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.Runner.WaitLog(ctx, poolReady("spec", ctx1)...); err != nil {
		t.Fatal(err)
	}
	runAsync(c, map[string]any{"id": 1, "function_name": "spec#stubborn", "kwargs": map[string]any{"seconds": 300}})
	waitStatus(t, c, 1, "started")
	runAsync(c, map[string]any{"id": 2, "function_name": "spec#echo"})
	waitStatus(t, c, 2, "started")
	// Its timeout ends a call waiting for a process.
	var j harness.Job
	c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 3, "function_name": "spec#echo", "timeout": 2}, "timeout": 60}, &j)
	if j.Status != "error" || !strings.Contains(j.Error, "timeout") {
		t.Fatalf("a job waiting for the pool past its timeout: %+v", j)
	}
	// The stop kills the stubborn call's process; the pool cannot start it again.
	c.MustCall(t, "job.stop", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, nil)
	j = waitStatus(t, c, 2, "error")
	if !strings.Contains(j.Error, "no live runner has a healthy pool") || !strings.Contains(j.Error, "exited before accepting connections") {
		t.Fatalf("the job waiting for a pool that cannot start: %q; want the clear error, saying why", j.Error)
	}
}

// Acceptance (issue 44, 4): the start-up limit is set per executor (startup=): the same
// executor, two seconds from its launch to listening, misses a limit of 1 s — its pool
// is unhealthy, its job fails saying so — and meets one of 30 s. Before, the limit was
// a fixed 10 s for every executor.
func TestExecutorStartupLimitPerExecutor(t *testing.T) {
	script := filepath.Join(harness.ScratchDir(t), "slow.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep 2\nexec "+filepath.Join(binDir, harness.ExampleExecutor)+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, c := servingStack(t, harness.StackOptions{RunnerArgs: []string{
		"--executors", "quick;cmd=" + script + ";startup=1s;ro=" + binDir + "|patient;cmd=" + script + ";startup=30s;ro=" + binDir}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.Runner.WaitLog(ctx, poolReady("patient", ctx1)...); err != nil {
		t.Fatal(err)
	}
	if j := runStandalone(t, c, map[string]any{"id": 1, "function_name": "patient#echo"}); j.Status != "finished" {
		t.Fatalf("the executor with startup=30s: %+v", j)
	}
	waitUnready(t, s.Runner, 60*time.Second, "executor quick unhealthy")
	// Its job fails saying why, and asks for its retry when the runner tries the pool
	// again (up to 30 s later), not at once: its retries are not all spent while the
	// pool is down.
	runAsync(c, map[string]any{"id": 2, "function_name": "quick#echo", "retries": 1})
	var retried map[string]any
	if !waitUntil(60*time.Second, func() bool {
		for _, e := range events(t, c) {
			if e["type"] == "job.retried" && evJob(e) == 2 {
				retried = e
			}
		}
		return retried != nil
	}) {
		t.Fatalf("the job of the executor with startup=1s was not retried: %+v", loadJob(t, c, 2))
	}
	detail, _ := retried["detail"].(string)
	m := regexp.MustCompile(`attempt 2 in (\d+) ms`).FindStringSubmatch(detail)
	if !strings.Contains(detail, "did not accept connections") || !strings.Contains(detail, "within 1s") || m == nil {
		t.Fatalf("the executor with startup=1s: %q; want an error naming its 1 s limit", detail)
	}
	if ms, _ := strconv.Atoi(m[1]); ms < 10000 {
		t.Fatalf("its retry in %s ms: want it when the runner tries the pool again (up to 30 s)", m[1])
	}
}

// Acceptance (issue 44, 4): an executor that accepts one connection at a time, run
// without connections=1, fails its pool's start with an error naming connections=1 —
// in /readyz and in its jobs' error. Before, the pool started, and a second call at
// the same time waited, unread, on a connection the executor would not accept (still
// started after 40 s).
func TestOneConnectionExecutorWithoutConnections1(t *testing.T) {
	s, c := servingStack(t, harness.StackOptions{RunnerArgs: []string{
		"--executors", "spec;cmd=" + filepath.Join(binDir, harness.OneConnExecutor) + " serial"}})
	// Two calls at once: the second one is the one that waited for ever.
	runAsync(c, map[string]any{"id": 1, "function_name": "spec#sleep", "kwargs": map[string]any{"seconds": 1}})
	runAsync(c, map[string]any{"id": 2, "function_name": "spec#echo"})
	for _, id := range []uint32{1, 2} {
		if !waitUntil(60*time.Second, func() bool { st := jobStatus(c, id); return st == "error" || st == "finished" }) {
			t.Fatalf("job %d did not end: %+v", id, loadJob(t, c, id))
		}
		j := loadJob(t, c, id)
		if j.Status != "error" || !strings.Contains(j.Error, "connections=1") {
			t.Fatalf("job %d: %s %q; want an error naming connections=1", id, j.Status, j.Error)
		}
	}
	if code, body := readyzBody(t, s.Runner); code == http.StatusOK || !strings.Contains(body, "one connection at a time") {
		t.Fatalf("/readyz %d: %s", code, body)
	}
}
