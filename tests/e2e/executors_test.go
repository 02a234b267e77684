package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// executorStack starts a stack whose runner has three executors: the Python example
// runtime (executor "python"), the Go example (executor "go") and the Python example
// mailer (executor "mailer", named after no script type). A context's pool starts
// with its first job.
func executorStack(t *testing.T, schedArgs ...string) (*harness.Stack, *harness.Client) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed for the executor tests (apt-get install python3)")
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(root, "sdk", "python", "examples", "example_executor.py")
	goExec := filepath.Join(binDir, harness.ExampleExecutor)
	s, c := servingStack(t, harness.StackOptions{
		SchedulerArgs: append([]string{"--retry-base", "100ms"}, schedArgs...),
		RunnerArgs: []string{"--executors", "python;cmd=python3 " + py + ";size=2;ro=" + filepath.Join(root, "sdk", "python") + "|go;cmd=" + goExec + ";size=1;pipeline=4;transport=tcp" +
			"|mailer;cmd=python3 " + filepath.Join(root, "sdk", "python", "examples", "mailer_executor.py") + ";ro=" + filepath.Join(root, "sdk", "python"),
			"--executor-cancel-grace", "1s", "--concurrency", "8"},
	})
	c.MustCall(t, "runner.create", map[string]any{"context_id": ctx1, "runner": map[string]any{"id": 2, "script_types": []string{"go"}}}, nil)
	return s, c
}

// servingStack starts a stack with opt on the flushed Redis, sets up context 1 and
// waits until the runner serves it: the runner announces its executors when it serves
// a context, and a handler job submitted before that is refused ("no runner … has
// executor").
func servingStack(t *testing.T, opt harness.StackOptions) (*harness.Stack, *harness.Client) {
	t.Helper()
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, opt)
	c := s.Setup(t, ctx1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Runner.WaitLog(ctx, `"context_ids":[1]`, `"message":"serving"`); err != nil {
		t.Fatal(err)
	}
	return s, c
}

type handlerSpec struct {
	id       uint32
	function string
	args     any
	kwargs   any
	deps     []uint32
	retries  int
	timeout  int
}

func createHandler(t *testing.T, c *harness.Client, h handlerSpec) {
	t.Helper()
	job := map[string]any{"id": h.id, "function_name": h.function, "args": h.args, "kwargs": h.kwargs, "depends": h.deps, "retries": h.retries, "timeout": h.timeout}
	c.MustCall(t, "job.create", map[string]any{"context_id": ctx1, "job": job}, nil)
}

func runFlow(t *testing.T, c *harness.Client, flowID uint32, ids ...uint32) harness.Flow {
	t.Helper()
	c.MustCall(t, "flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": flowID, "jobs": ids}}, nil)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": flowID}, nil)
	return c.WaitFlow(t, ctx1, flowID, 90*time.Second)
}

// Acceptance (executors 1): a flow mixing script and handler jobs, on the Python
// runtime and the Go package as real executor processes, passes results both ways.
func TestHandlerFlowMixesScriptsAndHandlers(t *testing.T) {
	_, c := executorStack(t)
	c.MustCall(t, "job.create", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 1, "script_type": "sh",
		"script": `echo "X=21" > "$HERO_RESULT_FILE"`}}, nil)
	createHandler(t, c, handlerSpec{id: 2, function: "python#echo", args: []any{1, "two"}, kwargs: map[string]any{"flag": true}, deps: []uint32{1}})
	c.MustCall(t, "job.create", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 3, "script_type": "python", "depends": []int{2},
		"script": `import os, json
kw = json.loads(os.environ["HERO_DEP_2_kwargs"])
x = kw["hero_deps"]["1"]["X"]
args = json.loads(os.environ["HERO_DEP_2_args"])
open(os.environ["HERO_RESULT_FILE"], "w").write(f"FROM_HANDLER={x}-{args[1]}\n")`}}, nil)
	createHandler(t, c, handlerSpec{id: 4, function: "go#echo", kwargs: map[string]any{"n": 4}, deps: []uint32{3}})
	f := runFlow(t, c, 100, 1, 2, 3, 4)
	if f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}
	if f.Result["3.FROM_HANDLER"] != "21-two" {
		t.Errorf("script read the handler's result: %v", f.Result)
	}
	var kw map[string]any
	if err := json.Unmarshal([]byte(f.Result["4.kwargs"]), &kw); err != nil {
		t.Fatalf("go#echo result: %v (%v)", err, f.Result)
	}
	deps, _ := kw["hero_deps"].(map[string]any)
	if d3, _ := deps["3"].(map[string]any); d3 == nil || d3["FROM_HANDLER"] != "21-two" || kw["n"] != float64(4) {
		t.Errorf("handler read the script's result: %v", kw)
	}
	if f.Result["2.args"] != `[1,"two"]` {
		t.Errorf("python#echo args: %q", f.Result["2.args"])
	}
	j := loadJob(t, c, 2)
	if j.Status != "finished" || j.Attempt != 1 {
		t.Errorf("handler job: %+v", j)
	}
	var full map[string]any
	c.MustCall(t, "job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 2}, &full)
	if tid, _ := full["trace_id"].(string); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(tid) {
		t.Errorf("trace id in the job's record: %q", tid)
	}
}

func runStandalone(t *testing.T, c *harness.Client, job map[string]any) harness.Job {
	t.Helper()
	var j harness.Job
	c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": job, "timeout": 60}, &j)
	return j
}

func dlqHas(t *testing.T, c *harness.Client, id uint32) bool {
	var r struct {
		Items []struct {
			ID uint32 `json:"id"`
		} `json:"items"`
	}
	c.MustCall(t, "dlq.list", map[string]any{"context_id": ctx1}, &r)
	for _, e := range r.Items {
		if e.ID == id {
			return true
		}
	}
	return false
}

// Acceptance (executors 2): each outcome status, in its own test.
func TestHandlerOutcomeSuccess(t *testing.T) {
	_, c := executorStack(t)
	j := runStandalone(t, c, map[string]any{"id": 1, "function_name": "go#echo", "args": []any{"a"}})
	if j.Status != "finished" || j.Result["args"] != `["a"]` {
		t.Fatalf("%+v", j)
	}
	// A result that is not an object lands in output.
	j = runStandalone(t, c, map[string]any{"id": 2, "function_name": "python#noop"})
	if j.Status != "finished" || len(j.Result) != 0 {
		t.Fatalf("noop: %+v", j)
	}
}

func TestHandlerOutcomeErrorRetriesThenDLQ(t *testing.T) {
	_, c := executorStack(t)
	j := runStandalone(t, c, map[string]any{"id": 1, "function_name": "python#fail", "kwargs": map[string]any{"message": "boom"}, "retries": 2})
	if j.Status != "error" || j.Attempt != 3 || !strings.Contains(j.Error, "ValueError") || !strings.Contains(j.Error, "boom") {
		t.Fatalf("%+v", j)
	}
	if !dlqHas(t, c, 1) {
		t.Fatal("exhausted job not in the dead-letter queue")
	}
}

func TestHandlerNotFoundGoesToDLQWithoutRetries(t *testing.T) {
	_, c := executorStack(t)
	j := runStandalone(t, c, map[string]any{"id": 1, "function_name": "go#no_such_handler", "retries": 3})
	if j.Status != "error" || j.Attempt != 1 || !strings.Contains(j.Error, "handler_not_found") {
		t.Fatalf("%+v", j)
	}
	if countEvents(events(t, c), "job.retried", 1) != 0 || !dlqHas(t, c, 1) {
		t.Fatal("handler_not_found must go straight to the DLQ, no retries")
	}
	var show map[string]any
	c.MustCall(t, "dlq.show", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, &show)
	if e, _ := show["entry"].(map[string]any); e == nil || e["attempt"] != float64(1) || !strings.Contains(e["error"].(string), "handler_not_found") {
		t.Fatalf("dlq.show: %v", show)
	}
}

func TestHandlerOutcomeRetryHonoursRetryAfter(t *testing.T) {
	_, c := executorStack(t)
	j := runStandalone(t, c, map[string]any{"id": 1, "function_name": "python#retry", "kwargs": map[string]any{"after_seconds": 1.5}, "retries": 1})
	if j.Status != "error" || j.Attempt != 2 || !strings.Contains(j.Error, "retry requested") {
		t.Fatalf("%+v", j)
	}
	// The second attempt started retry_after_seconds after the first ended (the
	// scheduler's own backoff here is 100 ms): measured from the events.
	var ended, restarted float64
	for _, e := range events(t, c) {
		if evJob(e) != 1 {
			continue
		}
		if e["type"] == "job.failed" && ended == 0 {
			ended = e["time_ms"].(float64)
		}
		if e["type"] == "job.started" && ended != 0 {
			restarted = e["time_ms"].(float64)
		}
	}
	// Not before retry_after (the scheduler's 100 ms would be); the upper bound is the
	// safety net, not a measurement.
	gap := restarted - ended
	if gap < 1400 || gap > 60000 {
		t.Fatalf("second attempt %v ms after the first ended; want about 1500", gap)
	}
}

func TestHandlerOutcomeTimeout(t *testing.T) {
	_, c := executorStack(t)
	start := time.Now()
	j := runStandalone(t, c, map[string]any{"id": 1, "function_name": "go#sleep", "kwargs": map[string]any{"seconds": 600}, "timeout": 1})
	if j.Status != "error" || j.Error != "timeout" {
		t.Fatalf("%+v", j)
	}
	if el := time.Since(start); el > time.Minute {
		t.Fatalf("the timeout took %v", el)
	}
}

func metric(t testing.TB, p *harness.Proc, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.AdminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return total
}

// Acceptance (executors 3): cancel of a running handler job — the cancel frame
// arrives (a cooperative handler ends at once); an executor that ignores it is killed
// after the grace period and restarted; the job ends error with reason stopped.
func TestHandlerCancel(t *testing.T) {
	s, c := executorStack(t)
	// begun: for a handler that marks its start with a file (the stubborn one), wait for
	// it, so that the cancel cannot overtake the request (the executor would then
	// answer "cancelled" without running the handler).
	stop := func(id uint32, function string, begun string) time.Duration {
		kwargs := map[string]any{"seconds": 60}
		if begun != "" {
			kwargs["started_file"] = begun
		}
		createHandler(t, c, handlerSpec{id: id, function: function, kwargs: kwargs})
		c.MustCall(t, "flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": id, "jobs": []uint32{id}}}, nil)
		c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": id}, nil)
		if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, id).Status == "started" }) {
			t.Fatalf("job %d never started", id)
		}
		if begun != "" {
			deadline := time.Now().Add(time.Minute)
			for _, err := os.Stat(begun); err != nil; _, err = os.Stat(begun) {
				if time.Now().After(deadline) {
					t.Fatalf("handler of job %d never began", id)
				}
				time.Sleep(5 * time.Millisecond) // the executor, another process, writes the file
			}
		}
		start := time.Now()
		c.MustCall(t, "job.stop", map[string]any{"context_id": ctx1, "caller_id": 1, "id": id}, nil)
		c.WaitFlow(t, ctx1, id, time.Minute)
		j := loadJob(t, c, id)
		if j.Status != "error" || j.Error != "stopped" {
			t.Fatalf("stopped handler job %d: %+v", id, j)
		}
		return time.Since(start)
	}
	before := metric(t, s.Runner, "hero_executor_restarts_total")
	// Stopped by the cancel frame, not killed after the grace: the process was not
	// restarted (its latency is logged, not asserted: no clock decides the test).
	d := stop(1, "go#sleep", "")
	t.Logf("a cooperative handler stopped in %v", d)
	if got := metric(t, s.Runner, "hero_executor_restarts_total"); got != before {
		t.Errorf("a cooperative executor was restarted (%v → %v): the cancel frame did not reach it", before, got)
	}
	if d := stop(2, "python#stubborn", filepath.Join(harness.ScratchDir(t), "begun")); d < time.Second {
		t.Errorf("a handler that ignores the cancel ended after %v, before the 1 s grace", d)
	}
	// A restart is no event of the context: the metric is polled (it waited out its
	// whole deadline when the restart came after the context's last event).
	if !waitUntil(time.Minute, func() bool { return metric(t, s.Runner, "hero_executor_restarts_total") > before }) {
		t.Error("the stubborn executor process was not killed and restarted")
	}
	// The pool serves again.
	if j := runStandalone(t, c, map[string]any{"id": 3, "function_name": "python#echo"}); j.Status != "finished" {
		t.Fatalf("after the restart: %+v", j)
	}
}

// Acceptance (executors 4): an executor that crashes mid-job (os._exit) is restarted
// and the job retried; the runner keeps serving other jobs throughout.
func TestHandlerExecutorCrash(t *testing.T) {
	s, c := executorStack(t)
	before := metric(t, s.Runner, "hero_executor_restarts_total")
	createHandler(t, c, handlerSpec{id: 1, function: "python#flaky", retries: 2})
	// Jobs in flight on the crashing process fail with it and follow their retry
	// policy; the others run on the pool's other process meanwhile.
	for i := uint32(2); i <= 6; i++ {
		createHandler(t, c, handlerSpec{id: i, function: "python#echo", kwargs: map[string]any{"i": i}, retries: 2})
	}
	f := runFlow(t, c, 50, 1, 2, 3, 4, 5, 6)
	if f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}
	j := loadJob(t, c, 1)
	if j.Status != "finished" || j.Attempt != 2 || j.Result["attempt"] != "2" {
		t.Fatalf("flaky job: %+v", j)
	}
	for i := uint32(2); i <= 6; i++ {
		if f.Result[strconv.Itoa(int(i))+".kwargs"] != `{"i":`+strconv.Itoa(int(i))+`}` {
			t.Errorf("job %d result: %v", i, f.Result)
		}
	}
	if metric(t, s.Runner, "hero_executor_restarts_total") <= before {
		t.Error("the crashed executor was not restarted")
	}
	evs := events(t, c)
	var failed map[string]any
	for _, e := range evs {
		if e["type"] == "job.failed" && evJob(e) == 1 {
			failed = e
		}
	}
	if failed == nil || !strings.Contains(failed["detail"].(string), "crashed") {
		t.Errorf("the crash must be recorded: %v", failed)
	}
	// The runner's warning names the call; the job's log marks both attempts (the
	// first did not succeed, the second is a retry).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Runner.WaitLog(ctx, "handler call failed", `"executor":"python"`, `"function":"flaky"`, `"request_id":"`, `"job_id":1`); err != nil {
		t.Errorf("the failed call in the runner's log: %v", err)
	}
	var logs struct {
		Logs string `json:"logs"`
	}
	c.MustCall(t, "job.logs", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, &logs)
	if !strings.Contains(logs.Logs, "--- attempt 1: python#flaky on ") || !strings.Contains(logs.Logs, "--- attempt 2: python#flaky on ") {
		t.Errorf("the flaky job's log: %q", logs.Logs)
	}
}

// Acceptance (executors 6): DLQ list/show/requeue/purge and flow.retry through the
// API and heroctl.
func TestDLQAndFlowRetry(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	gate := filepath.Join(harness.ScratchDir(t), "gate")
	// A flow whose job 2 fails until the gate file exists; job 3 depends on it; job 1
	// finishes and must not run again on retry.
	createFlow(t, c, 60, nil,
		jobSpec{id: 1, typ: "sh", script: "echo first; echo A=1 > $HERO_RESULT_FILE"},
		jobSpec{id: 2, typ: "sh", script: "test -f " + gate + " || { echo no gate >&2; exit 7; }; echo B=2 > $HERO_RESULT_FILE", deps: []uint32{1}},
		jobSpec{id: 3, typ: "sh", script: "echo third $HERO_DEP_2_B", deps: []uint32{2}},
	)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 60}, nil)
	if f := c.WaitFlow(t, ctx1, 60, time.Minute); f.Status != "error" {
		t.Fatalf("flow: %+v", f)
	}
	// A standalone job that fails until the gate exists.
	var j harness.Job
	c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 9, "script_type": "sh", "script": "test -f " + gate}}, &j)
	if j.Status != "error" {
		t.Fatalf("standalone: %+v", j)
	}
	me := []string{"HERO_ACTOR=1", "HERO_CONTEXT=1"}
	checkDLQListShow(t, s, me)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Requeue the standalone job: it runs again with a fresh attempt count.
	if _, errOut, code := s.Heroctl(t, me, "dlq", "requeue", "9"); code != 0 {
		t.Fatalf("heroctl dlq requeue: %s", errOut)
	}
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, 9).Status == "finished" }) {
		t.Fatalf("requeued job: %+v", loadJob(t, c, 9))
	}
	if j := loadJob(t, c, 9); j.Attempt != 1 {
		t.Errorf("requeued job attempt %d, want a fresh 1", j.Attempt)
	}
	// flow.retry re-runs the failed and cancelled jobs only.
	if _, errOut, code := s.Heroctl(t, me, "flow", "retry", "60"); code != 0 {
		t.Fatalf("heroctl flow retry: %s", errOut)
	}
	f := c.WaitFlow(t, ctx1, 60, time.Minute)
	if f.Status != "finished" || f.Result["1.A"] != "1" || f.Result["2.B"] != "2" || f.Result["3.output"] != "third 2\n" {
		t.Fatalf("retried flow: %+v", f)
	}
	if n := countEvents(events(t, c), "job.started", 1); n != 1 {
		t.Errorf("the finished job ran %d times", n)
	}
	if dlqHas(t, c, 2) || dlqHas(t, c, 9) {
		t.Error("requeued/retried jobs must leave the DLQ")
	}
	// Retrying a finished flow is refused.
	if err := c.Call("flow.retry", map[string]any{"context_id": ctx1, "id": 60}, nil); err == nil || err.(*harness.RPCError).Code != -32010 {
		t.Errorf("retry of a finished flow: %v", err)
	}
	checkDLQPurge(t, s, c, me)
	_ = context.Background
}

// checkDLQListShow: heroctl dlq list shows the failed jobs (job 9 of caller 1
// among them), and dlq show the failure of job 2.
func checkDLQListShow(t *testing.T, s *harness.Stack, me []string) {
	t.Helper()
	out, errOut, code := s.Heroctl(t, me, "dlq", "list")
	if code != 0 || !strings.Contains(out, "exit code 7") || !regexp.MustCompile(`(?m)^1\s+9\s`).MatchString(out) {
		t.Fatalf("heroctl dlq list: %d\n%s%s", code, out, errOut)
	}
	out, _, code = s.Heroctl(t, me, "dlq", "show", "2")
	if code != 0 || !strings.Contains(out, "exit code 7: no gate") {
		t.Fatalf("heroctl dlq show: %d\n%s", code, out)
	}
}

// checkDLQPurge: purge one entry, then all.
func checkDLQPurge(t *testing.T, s *harness.Stack, c *harness.Client, me []string) {
	t.Helper()
	c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 10, "script_type": "sh", "script": "exit 1"}}, nil)
	c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 11, "script_type": "sh", "script": "exit 1"}}, nil)
	var p struct {
		Purged int `json:"purged"`
	}
	c.MustCall(t, "dlq.purge", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 10}, &p)
	if p.Purged != 1 || dlqHas(t, c, 10) || !dlqHas(t, c, 11) {
		t.Fatalf("purge one: %+v", p)
	}
	out, _, code := s.Heroctl(t, me, "dlq", "purge")
	if code != 0 || !strings.Contains(out, "1 entry purged") || dlqHas(t, c, 11) {
		t.Fatalf("heroctl dlq purge: %s", out)
	}
}

// An executor does not outlive its runner: after kill -9 of the runner, every executor
// process it started is gone (none is left orphaned, holding its socket or port).
func TestExecutorsDieWithTheirRunner(t *testing.T) {
	s, c := executorStack(t)
	// A context's pools start with its first handler jobs; each pool process logs its
	// pid once it accepts connections.
	for i, fn := range []string{"python#echo", "go#echo"} {
		if j := runStandalone(t, c, map[string]any{"id": 90 + i, "function_name": fn}); j.Status != "finished" {
			t.Fatalf("%s: %+v", fn, j)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pidRE := regexp.MustCompile(`"pid":(\d+)`)
	var pids []int
	for _, want := range [][]string{{`"executor":"python"`, `"index":0`}, {`"executor":"python"`, `"index":1`}, {`"executor":"go"`, `"index":0`}} {
		line, err := s.Runner.WaitLog(ctx, append(want, `"message":"rrq executor process ready"`)...)
		if err != nil {
			t.Fatal(err)
		}
		m := pidRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("no pid in %s", line)
		}
		p, _ := strconv.Atoi(m[1])
		pids = append(pids, p)
	}
	for _, p := range pids {
		if !pidAlive(p) {
			t.Fatalf("executor %d is not running before the kill", p)
		}
	}
	s.Runner.Kill()
	for _, p := range pids {
		waitGone(t, p, time.Minute)
	}
}

// A run longer than the lease keeps it: the runner extends the lease every heartbeat
// (the stack runs with --lease 3s --heartbeat 1s) for a script and a handler call
// alike, so neither is taken back, stopped or run twice.
func TestRunsLongerThanTheLeaseKeepTheirLease(t *testing.T) {
	s, c := executorStack(t)
	c.MustCall(t, "job.create", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 1, "script": "sleep 4.5", "script_type": "sh"}}, nil)
	createHandler(t, c, handlerSpec{id: 2, function: "go#sleep", kwargs: map[string]any{"seconds": 4.5}})
	f := runFlow(t, c, 40, 1, 2)
	if f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}
	for _, id := range []uint32{1, 2} {
		j := loadJob(t, c, id)
		if j.Status != "finished" || j.Attempt != 1 {
			t.Errorf("job %d: status %s attempt %d, want finished at its first attempt", id, j.Status, j.Attempt)
		}
		if d := j.FinishedAtMs - j.StartedAtMs; d < 4500 {
			t.Errorf("job %d ran %d ms, want at least 4500 (longer than the 3 s lease)", id, d)
		}
	}
	for _, m := range []string{"hero_runner_lease_requeues_total", "hero_runner_lost_leases_total"} {
		if v := metric(t, s.Runner, m); v != 0 {
			t.Errorf("%s = %v, want 0", m, v)
		}
	}
}

// Acceptance (Trust III 3): handler jobs of two contexts run in different executor
// processes (each context its own pool, started on demand); a pool marked shared
// serves both from one process.
func TestExecutorPoolsPerContext(t *testing.T) {
	goExec := filepath.Join(binDir, harness.ExampleExecutor)
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{
		RunnerArgs: []string{"--executors", "go;cmd=" + goExec + "|rust;cmd=" + goExec + ";shared=true"},
	})
	c := s.Setup(t, ctx1)
	s.Operator().MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, nil)
	pid := func(ctxID uint32, fn string) string {
		t.Helper()
		_ = c.Call("runner.create", map[string]any{"context_id": ctxID, "runner": map[string]any{"id": 1, "script_types": []string{"sh", "go", "rust"}}}, nil)
		var j harness.Job
		// A new context is served once the runner has announced its types there.
		var err error
		waitUntil(time.Minute, func() bool {
			err = c.Call("job.run", map[string]any{"context_id": ctxID, "job": map[string]any{"function_name": fn}}, &j)
			return err == nil || !strings.Contains(err.Error(), "no runner in context")
		})
		if err != nil || j.Status != "finished" || j.Result["instance"] == "" {
			t.Fatalf("context %d, %s: %+v %v", ctxID, fn, j, err)
		}
		return j.Result["instance"] // a pid repeats across the sandboxes' PID namespaces
	}
	p1, p2 := pid(ctx1, "go#pid"), pid(2, "go#pid")
	if p1 == p2 {
		t.Fatalf("contexts 1 and 2 share executor process %s", p1)
	}
	if again := pid(ctx1, "go#pid"); again != p1 {
		t.Fatalf("context 1's pool changed process: %s, then %s", p1, again)
	}
	// On the host: one process of the "go" executor per context, and the shared
	// "rust" pool's (started with the runner): three of the example executor.
	out, _ := exec.Command("pgrep", "-f", "^"+goExec+"$").Output()
	if pids := strings.Fields(string(out)); len(pids) != 3 {
		t.Fatalf("executor processes on the host: %q, want 3 (go for context 1, go for context 2, rust shared)", pids)
	}
	if g1, g2 := pid(ctx1, "rust#pid"), pid(2, "rust#pid"); g1 != g2 {
		t.Fatalf("a shared pool runs two processes: %s and %s", g1, g2)
	}
	// An executor runs in the job sandbox: it reads no service's key and reaches
	// neither Redis nor the API.
	pki, err := harness.PKI()
	if err != nil {
		t.Fatal(err)
	}
	redisAddr := strings.TrimPrefix(strings.TrimSuffix(redisSrv.URL, "/0"), "redis://")
	for _, probe := range []map[string]any{{"file": pki.Files("runner").Key}, {"addr": redisAddr}, {"addr": s.API.GRPCAddr}} {
		var j harness.Job
		c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"function_name": "go#reach", "kwargs": probe}}, &j)
		for k, v := range j.Result {
			if (k == "file" || k == "addr") && v == "yes" {
				t.Errorf("an executor reached %v", probe)
			}
		}
		if j.Status != "finished" || len(j.Result) == 0 {
			t.Errorf("probe %v: %+v", probe, j)
		}
	}
}

// TestExamplesOnOneNode: every flow of examples/ says in its header which setup it
// needs, and every one meant for a single node (all but the two-node one) finishes
// when heroctl submits it with --wait to a stack whose runner has the example Python
// executors ("python" and "mailer"), as docker-compose.yml's and
// scripts/local-stack.sh's do (make compose-test runs them on the compose stack too).
func TestExamplesOnOneNode(t *testing.T) {
	s, _ := executorStack(t)
	c := ctl{t: t, s: s}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v %v", files, err)
	}
	var ran []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		header, _, _ := strings.Cut(string(b), "\njobs:")
		if !regexp.MustCompile(`(?m)^# Setup: `).MatchString(header) {
			t.Errorf("%s: its header does not say which setup it needs (# Setup: …)", f)
		}
		if strings.Contains(header, "# Setup: TWO nodes") {
			continue // make compose-two-nodes-test runs it
		}
		out, errOut := c.ok(meEnv, "flow", "submit", f, "--wait", "--max-wait", "90")
		if !regexp.MustCompile(`status\s+finished`).MatchString(out) {
			t.Errorf("%s did not finish:\n%s", f, out)
		}
		if filepath.Base(f) == "handlers.yaml" {
			if logs := c.out(meEnv, "flow", "logs", flowID(t, errOut)); !strings.Contains(logs, "handler saw SIZE=42 bytes") ||
				!strings.Contains(logs, "mailed ops@example.com: disk report") || !strings.Contains(logs, "(mailer#send_email) ==") {
				t.Errorf("handlers.yaml: the last job did not read the handlers' results:\n%s", logs)
			}
		}
		ran = append(ran, filepath.Base(f))
	}
	if !slices.Contains(ran, "handlers.yaml") || !slices.Contains(ran, "diamond.yaml") {
		t.Errorf("ran %v: want handlers.yaml and diamond.yaml among them", ran)
	}
}

// A pool of several processes divides the runner's cores among them: each process of
// a pool of two gets GOMAXPROCS of half the runner's cores (at least one), and a Go
// executor schedules on that share; a pool of one process is left Go's default.
func TestExecutorPoolProcessesShareCores(t *testing.T) {
	goExec := filepath.Join(binDir, harness.ExampleExecutor)
	_, c := servingStack(t, harness.StackOptions{
		RunnerArgs: []string{"--executors", "go;cmd=" + goExec + ";size=2|one;cmd=" + goExec + ";size=1"},
	})
	cores := runtime.GOMAXPROCS(0) // the runner's: same machine, same cgroup
	if g := os.Getenv("HERO_TEST_GOMAXPROCS"); g != "" {
		cores, _ = strconv.Atoi(g)
	}
	want := strconv.Itoa(max(1, cores/2))
	j := runStandalone(t, c, map[string]any{"function_name": "go#procs"})
	if j.Status != "finished" || j.Result["env"] != want || j.Result["gomaxprocs"] != want {
		t.Errorf("a process of a pool of 2 on %d cores: %+v; want GOMAXPROCS=%s", cores, j, want)
	}
	j = runStandalone(t, c, map[string]any{"function_name": "one#procs"})
	if j.Status != "finished" || j.Result["env"] != "" {
		t.Errorf("the process of a pool of 1: %+v; want no GOMAXPROCS set", j)
	}
}
