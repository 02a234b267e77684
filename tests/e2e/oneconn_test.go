package e2e

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// oneConnStack starts a stack whose runner has executor "spec" (not a script type):
// the one-connection test executor with connections=1 (cmd: crash=true makes every
// process exit at start).
func oneConnStack(t *testing.T, crash bool) (*harness.Stack, *harness.Client) {
	t.Helper()
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{
		// A grace longer than the tests' 1-minute safety net: a stop that ends within
		// it went by the cancel frame, not by a kill after the grace.
		RunnerArgs: []string{"--executors", specExecutor(crash), "--executor-cancel-grace", "2m"},
	})
	c := s.Setup(t, ctx1)
	// The runner announces its executors once it serves the context.
	if !waitUntil(time.Minute, func() bool {
		var r struct {
			Executors []string `json:"executors"`
		}
		return c.Call("runner.load", map[string]any{"context_id": ctx1, "id": 1}, &r) == nil && len(r.Executors) > 0
	}) {
		t.Fatal("the runner did not announce its executor")
	}
	return s, c
}

// jobStatus is a job's status, "" while it does not exist.
func jobStatus(c *harness.Client, id uint32) string {
	var j harness.Job
	if err := c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": id}, &j); err != nil {
		return ""
	}
	return j.Status
}

func specExecutor(crash bool) string {
	cmd := filepath.Join(binDir, harness.OneConnExecutor)
	if crash {
		cmd += " crash"
	}
	return "spec;cmd=" + cmd + ";connections=1"
}

// waitUnready waits until p's /readyz fails saying want, within d, and returns its body.
func waitUnready(t *testing.T, p *harness.Proc, d time.Duration, want string) string {
	t.Helper()
	var body string
	if !waitUntil(d, func() bool {
		code, b := readyzBody(t, p)
		body = b
		return code != http.StatusOK && strings.Contains(b, want)
	}) {
		t.Fatalf("/readyz within %v, want it failing with %q: %s", d, want, body)
	}
	return body
}

func readyzBody(t *testing.T, p *harness.Proc) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.AdminAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Acceptance (issue 21, executors 1 and 2): an executor that accepts exactly one
// connection and exits when it closes runs 20 handler jobs in a row with
// connections=1, one of them cancelled; "spec#echo" — an executor that is no script
// type, and no script_type — routes the job to the runner that has it.
func TestOneConnectionExecutorRunsJobs(t *testing.T) {
	s, c := oneConnStack(t, false)
	for i := 1; i <= 20; i++ {
		if i == 10 {
			// A cancel (job.stop) of a running call travels on the one connection.
			job := map[string]any{"id": i, "function_name": "spec#sleep", "kwargs": map[string]any{"seconds": 60}}
			go func() { _ = c.Call("job.run", map[string]any{"context_id": ctx1, "job": job, "timeout": 60}, nil) }()
			if !waitUntil(time.Minute, func() bool { return jobStatus(c, uint32(i)) == "started" }) {
				t.Fatalf("job %d did not start", i)
			}
			start := time.Now()
			c.MustCall(t, "job.stop", map[string]any{"context_id": ctx1, "caller_id": 1, "id": i}, nil)
			if !waitUntil(time.Minute, func() bool { return jobStatus(c, uint32(i)) == "error" }) {
				t.Fatalf("job %d not stopped: %+v", i, loadJob(t, c, uint32(i)))
			}
			if el := time.Since(start); el > time.Minute {
				t.Fatalf("the stop took %v: the cancel frame was not delivered (grace 2 minutes)", el)
			}
			continue
		}
		j := runStandalone(t, c, map[string]any{"id": i, "function_name": "spec#echo", "args": []any{i}})
		if j.Status != "finished" {
			t.Fatalf("job %d: %+v", i, j)
		}
	}
	if n := metric(t, s.Runner, "hero_executor_restarts_total"); n != 0 {
		t.Fatalf("executor restarted %v times", n)
	}
	// Refused at once, storing nothing, when no runner of the context has the executor.
	err := c.Call("job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 99, "function_name": "nosuch#echo"}}, nil)
	if err == nil || !strings.Contains(err.Error(), `no runner in context 1 has executor "nosuch"`) {
		t.Fatalf("job for an executor no runner has: %v", err)
	}
	if err := c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 99}, nil); err == nil {
		t.Fatal("the refused job was stored")
	}
}

// Acceptance (issue 21, executors 1): a runner whose executor crashes at start is
// unhealthy in /readyz (and its metric) within 10 s; while no runner of the context
// has a healthy pool the executor's jobs fail with a clear error (they do not wait for
// ever), and once a runner with a healthy pool serves the context it takes them.
func TestCrashingExecutorJobsGoToHealthyRunner(t *testing.T) {
	s, c := oneConnStack(t, true)
	job := map[string]any{"id": 1, "function_name": "spec#echo", "args": []any{"x"}}
	go func() { _ = c.Call("job.run", map[string]any{"context_id": ctx1, "job": job, "timeout": 60}, nil) }()
	start := time.Now()
	body := waitUnready(t, s.Runner, time.Minute, "executor spec unhealthy")
	t.Logf("unhealthy after %v: %s", time.Since(start), body)
	if v := metric(t, s.Runner, `hero_executor_pool_healthy{executor="spec"}`); v != 0 {
		t.Fatalf("hero_executor_pool_healthy %v", v)
	}
	// No other runner: the job fails, saying why.
	var j harness.Job
	if !waitUntil(time.Minute, func() bool { j = loadJob(t, c, 1); return j.Status == "error" }) {
		t.Fatalf("the job of an executor no runner can run did not fail: %+v", j)
	}
	if !strings.Contains(j.Error, "no live runner has a healthy pool") || !strings.Contains(j.Error, "exited before accepting connections") {
		t.Fatalf("error does not say why: %q", j.Error)
	}
	// A second runner, same runner id, with a working executor: once it heartbeats, the
	// executor's jobs go to it (the unhealthy one hands back any it takes).
	args := append([]string(nil), s.Args["runner"]...)
	for i, a := range args {
		if strings.HasPrefix(a, "spec;") {
			args[i] = specExecutor(false)
		}
	}
	harness.Start(t, binDir, "runner", redisSrv.URL, harness.Options{Args: append(args, "--worker-id", "runner-good", "--state-dir", t.TempDir()), Env: []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}})
	if !waitUntil(time.Minute, func() bool {
		var r struct {
			Processes []struct {
				ID string `json:"id"`
			} `json:"processes"`
		}
		if c.Call("runner.load", map[string]any{"context_id": ctx1, "id": 1}, &r) != nil {
			return false
		}
		for _, p := range r.Processes {
			if p.ID == "runner-good" {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the second runner did not heartbeat")
	}
	for id := 2; id <= 4; id++ {
		j := runStandalone(t, c, map[string]any{"id": id, "function_name": "spec#echo", "args": []any{id}})
		if j.Status != "finished" || j.Worker != "runner-good" {
			t.Fatalf("job %d not run by the healthy runner: %+v", id, j)
		}
	}
}

// Acceptance (issue 21, executors 2): runner 1 of the context is served by two
// processes, only one of which has executor "spec". "spec#echo" with no script_type
// is refused at submission while no process has announced "spec"; once the one
// that has it serves the context, every such job runs there — never on the process
// without it, which keeps serving the context's script jobs.
func TestHandlerJobRunsWhereItsExecutorIs(t *testing.T) {
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{})
	c := s.Setup(t, ctx1)
	// The process without executors serves the context: it runs a script job.
	plain := runStandalone(t, c, map[string]any{"id": 1, "script_type": "sh", "script": "true"})
	if plain.Status != "finished" || plain.Worker == "" {
		t.Fatalf("script job on the runner without executors: %+v", plain)
	}
	err := c.Call("job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 2, "function_name": "spec#echo"}}, nil)
	if err == nil || !strings.Contains(err.Error(), `no runner in context 1 has executor "spec"`) {
		t.Fatalf("job for an executor no runner has yet: %v", err)
	}
	args := append(append([]string(nil), s.Args["runner"]...), "--executors", specExecutor(false), "--executor-cancel-grace", "5s",
		"--worker-id", "runner-spec", "--state-dir", t.TempDir())
	harness.Start(t, binDir, "runner", redisSrv.URL, harness.Options{Args: args, Env: []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}})
	if !waitUntil(time.Minute, func() bool {
		var r struct {
			Executors []string `json:"executors"`
		}
		return c.Call("runner.load", map[string]any{"context_id": ctx1, "id": 1}, &r) == nil && len(r.Executors) == 1 && r.Executors[0] == "spec"
	}) {
		t.Fatal("the runner with executor spec did not announce it")
	}
	for id := 3; id <= 10; id++ {
		j := runStandalone(t, c, map[string]any{"id": id, "function_name": "spec#echo", "args": []any{id}})
		if j.Status != "finished" || j.Worker != "runner-spec" {
			t.Fatalf("handler job %d: %+v (want finished on runner-spec, not %s)", id, j, plain.Worker)
		}
	}
	// The process without the executor was claiming in the context all along (the
	// handler jobs did not go to runner-spec because it was idle): it takes script
	// jobs beside runner-spec.
	var j harness.Job
	for id := 11; id <= 30 && j.Worker != plain.Worker; id++ {
		j = runStandalone(t, c, map[string]any{"id": id, "script_type": "sh", "script": "true"})
		if j.Status != "finished" {
			t.Fatalf("script job %d: %+v", id, j)
		}
	}
	if j.Worker != plain.Worker {
		t.Fatalf("the runner without executors took none of 20 script jobs (last on %s)", j.Worker)
	}
}
