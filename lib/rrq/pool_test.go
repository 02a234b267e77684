package rrq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run the real example executors (the Go SDK's and the Python module's) as
// processes through Pool, over Unix sockets and TCP.

var testBinDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rrq-test-bin")
	if err != nil {
		panic(err)
	}
	testBinDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var goExample struct {
	once sync.Once
	path string
	err  error
}

// goExampleBinary builds lib/rrq/executor/example once per test run.
func goExampleBinary(t testing.TB) string {
	t.Helper()
	goExample.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out := filepath.Join(testBinDir, "go-example")
		cmd := exec.Command(goTool, "build", "-o", out, "./executor/example")
		if b, err := cmd.CombinedOutput(); err != nil {
			goExample.err = fmt.Errorf("go build: %v\n%s", err, b)
			return
		}
		goExample.path = out
	})
	if goExample.err != nil {
		t.Fatal(goExample.err)
	}
	return goExample.path
}

func pythonExample(t testing.TB) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found in PATH: skipping the Python executor tests")
	}
	script, err := filepath.Abs("../../sdk/python/examples/example_executor.py")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("Python example: %v", err)
	}
	return []string{py, "-u", script}
}

type executorKind struct {
	name      string
	command   func(t *testing.T) []string
	failType  string // error.type of the "fail" handler
	asyncName string // an async sleep handler, if any
}

var executorKinds = []executorKind{
	{name: "go", command: func(t *testing.T) []string { return []string{goExampleBinary(t)} }, failType: "example_failure"},
	{name: "python", command: func(t *testing.T) []string { return pythonExample(t) }, failType: "ValueError", asyncName: "async_sleep"},
}

func startTestPool(t *testing.T, kind executorKind, transport Transport, size, maxInFlight int) *Pool {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	p, err := StartPool(ctx, PoolConfig{
		Name:           "example-" + kind.name,
		Command:        kind.command(t),
		Size:           size,
		Transport:      transport,
		Client:         ClientOptions{MaxInFlight: maxInFlight},
		StartupTimeout: 20 * time.Second,
		StopGrace:      3 * time.Second,
		RestartBackoff: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("result %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("result %s, want %s", got, want)
	}
}

type execResult struct {
	out ExecutionOutcome
	err error
}

func goExecute(ctx context.Context, p *Pool, req ExecutionRequest) chan execResult {
	ch := make(chan execResult, 1)
	go func() {
		out, err := p.Execute(ctx, req)
		ch <- execResult{out, err}
	}()
	return ch
}

func await(t *testing.T, ch chan execResult, d time.Duration) execResult {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r
	case <-timer.C:
		t.Fatalf("no result within %v", d)
		return execResult{}
	}
}

func TestPoolExecutors(t *testing.T) {
	for _, kind := range executorKinds {
		for _, transport := range []Transport{TransportUnix, TransportTCP} {
			t.Run(kind.name+"/"+string(transport), func(t *testing.T) {
				t.Parallel()
				t.Run("basics", func(t *testing.T) { testBasics(t, kind, transport) })
				t.Run("crash_and_kill", func(t *testing.T) { testCrashAndKill(t, kind, transport) })
			})
		}
	}
}

func testBasics(t *testing.T, kind executorKind, transport Transport) {
	p := startTestPool(t, kind, transport, 2, 4)
	ctx := testCtx(t, 60*time.Second)
	for _, ep := range p.Endpoints() {
		if ep.Network != string(transport) {
			t.Fatalf("endpoint %v", ep)
		}
	}
	t.Run("echo", func(t *testing.T) { basicsEcho(t, ctx, p) })
	t.Run("outcomes", func(t *testing.T) { basicsOutcomes(t, ctx, p, kind) })
	t.Run("concurrency", func(t *testing.T) { basicsConcurrency(t, ctx, p) })
	t.Run("cancel", func(t *testing.T) { basicsCancel(t, ctx, p, "sleep") })
	if kind.asyncName != "" {
		t.Run("cancel_async", func(t *testing.T) { basicsCancel(t, ctx, p, kind.asyncName) })
	}
	t.Run("cancel_without_request_id", func(t *testing.T) { basicsCancelWithoutRequestID(t, ctx, p) })
}

func testCrashAndKill(t *testing.T, kind executorKind, transport Transport) {
	// Two processes, one request each at a time, so routing is predictable.
	p := startTestPool(t, kind, transport, 2, 1)
	ctx := testCtx(t, 60*time.Second)

	t.Run("crash", func(t *testing.T) { crashOneProcess(t, ctx, p) })
	t.Run("ignored_cancel_then_kill", func(t *testing.T) { ignoredCancelThenKill(t, ctx, p) })
}

// basicsEcho: a request with every context field set is answered with its arguments.
func basicsEcho(t *testing.T, ctx context.Context, p *Pool) {
	req := NewRequest("job-echo", "echo", []any{1, "two"}, map[string]any{"flag": true})
	req.Context.QueueName = "default"
	dl := time.Now().Add(time.Minute)
	req.Context.Deadline = &dl
	req.Context.TraceContext = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	req.Context.WorkerID = "runner-1"
	out, err := p.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != StatusSuccess || out.RequestID != req.RequestID || out.JobID != "job-echo" || out.Error != nil {
		t.Fatalf("outcome %+v", out)
	}
	jsonEqual(t, out.Result, `{"args":[1,"two"],"kwargs":{"flag":true}}`)
}

// basicsOutcomes: each kind of outcome (success with no result, handler not found,
// failure, retry) comes back as the executor gave it.
func basicsOutcomes(t *testing.T, ctx context.Context, p *Pool, kind executorKind) {
	out, err := p.Execute(ctx, NewRequest("job-noop", "noop", nil, nil))
	if err != nil || out.Status != StatusSuccess || (len(out.Result) != 0 && string(out.Result) != "null") {
		t.Fatalf("noop: %+v %v", out, err)
	}
	out, err = p.Execute(ctx, NewRequest("job-nf", "no_such_handler", nil, nil))
	if err != nil || out.Status != StatusError || out.Error == nil || out.Error.Type != ErrorTypeHandlerNotFound {
		t.Fatalf("handler_not_found: %+v %v", out, err)
	}
	out, err = p.Execute(ctx, NewRequest("job-fail", "fail", nil, map[string]any{"message": "boom"}))
	if err != nil || out.Status != StatusError || out.Error == nil || out.Error.Type != kind.failType || out.Error.Message != "boom" {
		t.Fatalf("fail: %+v %v", out, err)
	}
	out, err = p.Execute(ctx, NewRequest("job-retry", "retry", nil, map[string]any{"after_seconds": 1.5}))
	if err != nil || out.Status != StatusRetry || out.RetryAfterSeconds == nil || *out.RetryAfterSeconds != 1.5 || out.RetryAfter() != 1500*time.Millisecond {
		t.Fatalf("retry: %+v %v", out, err)
	}
}

// basicsConcurrency: requests run side by side, spread over the processes and
// their connections.
func basicsConcurrency(t *testing.T, ctx context.Context, p *Pool) {
	// Capacity is 2 processes × 4 in flight: 8 two-second sleeps run side by side.
	start := time.Now()
	var sleeps, echoes []chan execResult
	for i := range 8 {
		sleeps = append(sleeps, goExecute(ctx, p, NewRequest(fmt.Sprintf("job-s%d", i), "sleep", nil, map[string]any{"seconds": 2})))
	}
	for i := range 40 {
		echoes = append(echoes, goExecute(ctx, p, NewRequest(fmt.Sprintf("job-e%d", i), "echo", []any{i}, nil)))
	}
	for _, ch := range sleeps {
		r := await(t, ch, time.Minute)
		if r.err != nil || r.out.Status != StatusSuccess {
			t.Fatalf("sleep: %+v %v", r.out, r.err)
		}
	}
	// One after the other they would take 16 s, and at least 8 s with only the
	// processes in parallel (a floor no machine goes under); side by side on separate
	// connections they take about 2 s, which leaves 6 s for a loaded machine.
	el := time.Since(start)
	t.Logf("8 concurrent 2s sleeps took %v", el)
	if el >= 8*time.Second {
		t.Errorf("8 concurrent 2s sleeps took %v, as long as 4 rounds of 2 processes: requests were not run concurrently", el)
	}
	for i, ch := range echoes {
		r := await(t, ch, time.Minute)
		if r.err != nil || r.out.Status != StatusSuccess {
			t.Fatalf("echo: %+v %v", r.out, r.err)
		}
		jsonEqual(t, r.out.Result, fmt.Sprintf(`{"args":[%d],"kwargs":{}}`, i))
	}
	st := p.Stats()
	for _, ps := range st.Processes {
		if ps.Client.Requests == 0 || ps.Client.Dials < 2 {
			t.Errorf("process %d: requests were not spread over processes and connections: %+v", ps.Index, ps.Client)
		}
		if ps.Client.OpenConnections > 4 {
			t.Errorf("process %d has %d connections, more than MaxInFlight", ps.Index, ps.Client.OpenConnections)
		}
	}
	if st.InFlight != 0 {
		t.Errorf("in flight after all returned: %d", st.InFlight)
	}
}

// basicsCancel: a running request of handler is cancelled by its request id.
func basicsCancel(t *testing.T, ctx context.Context, p *Pool, handler string) {
	req := NewRequest("job-cancel-"+handler, handler, nil, map[string]any{"seconds": 30})
	if err := PrepareRequest(&req); err != nil {
		t.Fatal(err)
	}
	ch := goExecute(ctx, p, req)
	// The cancel may reach the executor before the request does (it is then a
	// no-op), so keep sending it until the outcome arrives.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.out.Status != StatusError || r.out.Error == nil || r.out.Error.Type != ErrorTypeCancelled || r.out.RequestID != req.RequestID {
				t.Fatalf("cancelled %s: %+v %+v", handler, r.out, r.out.Error)
			}
			return
		case <-tick.C:
			if err := p.Cancel(ctx, req.JobID, req.RequestID, false); err != nil {
				t.Fatal(err)
			}
		case <-deadline.C:
			t.Fatalf("%s was not cancelled", handler)
		}
	}
}

// basicsCancelWithoutRequestID: a cancel without request id (broadcast to all
// processes) cancels the job's request.
func basicsCancelWithoutRequestID(t *testing.T, ctx context.Context, p *Pool) {
	req := NewRequest("job-cancel-all", "sleep", nil, map[string]any{"seconds": 30})
	ch := goExecute(ctx, p, req)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-ch:
			if r.err != nil || r.out.Error == nil || r.out.Error.Type != ErrorTypeCancelled {
				t.Fatalf("%+v %v", r.out, r.err)
			}
			return
		case <-tick.C:
			if err := p.Cancel(ctx, req.JobID, "", false); err != nil { // broadcast to all processes
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("not cancelled")
		}
	}
}

// crashOneProcess: a handler that crashes its process fails its request with the
// exit status; the other process's request is unaffected, and the crashed process
// is restarted.
func crashOneProcess(t *testing.T, ctx context.Context, p *Pool) {
	slow := NewRequest("job-slow", "sleep", nil, map[string]any{"seconds": 1.5})
	PrepareRequest(&slow)
	slowCh := goExecute(ctx, p, slow)
	eventually(t, "the slow request to be routed", func() bool { _, ok := p.ProcessOf(slow.RequestID); return ok })
	slowProc, _ := p.ProcessOf(slow.RequestID)
	before := p.Stats().Restarts

	// The other process gets the crash.
	out, err := p.Execute(ctx, NewRequest("job-crash", "crash", nil, nil))
	if err == nil {
		t.Fatalf("crash returned an outcome: %+v", out)
	}
	if !errors.Is(err, ErrExecutorCrashed) || !errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrExecutorKilled) {
		t.Fatalf("crash error: %v", err)
	}
	if !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("crash error does not give the exit status: %v", err)
	}
	t.Logf("crash error: %v", err)

	// The request on the other process is unaffected.
	r := await(t, slowCh, time.Minute)
	if r.err != nil || r.out.Status != StatusSuccess {
		t.Fatalf("slow request on process %d: %+v %v", slowProc, r.out, r.err)
	}
	eventually(t, "the crashed process to be restarted", func() bool { return p.Stats().Restarts == before+1 })
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ps := range p.Stats().Processes {
		wantRestarts := uint64(1)
		if ps.Index == slowProc {
			wantRestarts = 0
		}
		if ps.Restarts != wantRestarts || !ps.Ready || ps.PID == 0 {
			t.Errorf("process %d: %+v", ps.Index, ps)
		}
	}
	for i := range 4 {
		out, err := p.Execute(ctx, NewRequest("job-after-crash", "echo", []any{i}, nil))
		if err != nil || out.Status != StatusSuccess {
			t.Fatalf("after the crash: %+v %v", out, err)
		}
	}
}

// ignoredCancelThenKill: a handler that ignores its cancel is killed with its
// process after the grace period, and the process restarted.
func ignoredCancelThenKill(t *testing.T, ctx context.Context, p *Pool) {
	before := p.Stats().Restarts
	// The cancel goes on a connection of its own and could overtake the request (the
	// executor then answers "cancelled" without running the handler): it is sent
	// once the handler has begun, which the handler marks with a file.
	started := filepath.Join(t.TempDir(), "started")
	req := NewRequest("job-stubborn", "stubborn", nil, map[string]any{"seconds": 60, "started_file": started})
	PrepareRequest(&req)
	ch := goExecute(ctx, p, req)
	eventually(t, "the request to be routed", func() bool { _, ok := p.ProcessOf(req.RequestID); return ok })
	idx, _ := p.ProcessOf(req.RequestID)
	eventually(t, "the stubborn handler to begin", func() bool { _, err := os.Stat(started); return err == nil })

	// The runner's grace-period path: cancel, wait the grace period for the outcome,
	// then kill the process.
	if err := p.Cancel(ctx, req.JobID, req.RequestID, false); err != nil {
		t.Fatal(err)
	}
	grace := time.NewTimer(300 * time.Millisecond)
	select {
	case r := <-ch:
		t.Fatalf("the stubborn handler answered: %+v %v", r.out, r.err)
	case <-grace.C:
	}
	if !p.KillRequest(req.RequestID) {
		t.Fatal("KillRequest did not find the request")
	}
	r := await(t, ch, time.Minute)
	if !errors.Is(r.err, ErrExecutorKilled) || !errors.Is(r.err, ErrConnectionLost) || errors.Is(r.err, ErrExecutorCrashed) {
		t.Fatalf("killed request: %+v %v", r.out, r.err)
	}
	t.Logf("kill error: %v", r.err)
	eventually(t, "the killed process to be restarted", func() bool { return p.Stats().Restarts == before+1 })
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if ps := p.Stats().Processes[idx]; !ps.Ready {
		t.Fatalf("process %d not ready: %+v", idx, ps)
	}
	for i := range 4 {
		if out, err := p.Execute(ctx, NewRequest("job-after-kill", "echo", []any{i}, nil)); err != nil || out.Status != StatusSuccess {
			t.Fatalf("after the kill: %+v %v", out, err)
		}
	}
}

func TestPoolStartFailure(t *testing.T) {
	_, err := StartPool(testCtx(t, time.Minute), PoolConfig{
		Name: "broken", Command: []string{"/bin/sh", "-c", "exit 3"}, StartupTimeout: 10 * time.Second,
	})
	if err == nil || !strings.Contains(err.Error(), "exited before accepting connections") {
		t.Fatalf("err = %v", err)
	}
	_, err = StartPool(testCtx(t, time.Minute), PoolConfig{
		Name: "silent", Command: []string{"/bin/sh", "-c", "exec sleep 60"}, StartupTimeout: 200 * time.Millisecond,
	})
	if err == nil || !strings.Contains(err.Error(), "did not accept connections") {
		t.Fatalf("err = %v", err)
	}
	if _, err := StartPool(t.Context(), PoolConfig{Name: "x"}); err == nil {
		t.Fatal("pool without a command started")
	}
}

func TestPoolCloseStopsProcesses(t *testing.T) {
	p := startTestPool(t, executorKinds[0], TransportUnix, 2, 1)
	var pids []int
	for _, ps := range p.Stats().Processes {
		pids = append(pids, ps.PID)
	}
	dir := filepath.Dir(p.Endpoints()[0].Address)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still running after Close", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("socket dir %s not removed: %v", dir, err)
	}
	if _, err := p.Execute(t.Context(), NewRequest("j", "echo", nil, nil)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// Stop's cancel can overtake its request (it goes on a connection of its own, and the
// executor ignores a cancel for a request it has not seen): Stop sends it again, so a
// cooperative executor ends the call cancelled within the grace period and is not
// killed. Here the first cancel is sent before the request on purpose.
func TestPoolStopCancelOvertakingItsRequest(t *testing.T) {
	for _, kind := range executorKinds {
		t.Run(kind.name, func(t *testing.T) {
			p := startTestPool(t, kind, TransportUnix, 1, 4)
			ctx := testCtx(t, time.Minute)
			req := NewRequest("job-stop-early", "sleep", nil, map[string]any{"seconds": 30})
			req.RequestID = NewUUID()
			done := make(chan struct{})
			stopped := make(chan bool, 1)
			go func() { stopped <- p.Stop(req.JobID, req.RequestID, 2*time.Second, done, nil) }()
			// Wait until the first cancel went out, then send the request.
			for p.Stats().Processes[0].Client.CancelsSent == 0 {
				if ctx.Err() != nil {
					t.Fatal("the first cancel was never sent")
				}
				time.Sleep(5 * time.Millisecond) // another goroutine's counter: nothing to wait on
			}
			r := await(t, goExecute(ctx, p, req), 10*time.Second)
			close(done)
			if r.err != nil || r.out.Error == nil || r.out.Error.Type != ErrorTypeCancelled {
				t.Fatalf("outcome %+v, error %v: want cancelled", r.out, r.err)
			}
			if <-stopped {
				t.Fatal("Stop killed a cooperative executor")
			}
			if n := p.Stats().Restarts; n != 0 {
				t.Fatalf("%d restarts", n)
			}
		})
	}
}

// Stop kills a request's process when the executor does not answer within the grace.
func TestPoolStopKillsAfterGrace(t *testing.T) {
	kind := executorKinds[1] // python: its "stubborn" handler ignores cancels
	p := startTestPool(t, kind, TransportUnix, 1, 4)
	ctx := testCtx(t, time.Minute)
	// Stop's first cancel could overtake the request (the executor then answers
	// "cancelled" without running the handler, and there is nothing to kill): it is
	// sent once the handler has begun, which the handler marks with a file.
	started := filepath.Join(t.TempDir(), "started")
	req := NewRequest("job-stubborn", "stubborn", nil, map[string]any{"seconds": 30, "started_file": started})
	req.RequestID = NewUUID()
	ch := goExecute(ctx, p, req)
	eventually(t, "the stubborn handler to begin", func() bool { _, err := os.Stat(started); return err == nil })
	done := make(chan struct{})
	start := time.Now()
	if !p.Stop(req.JobID, req.RequestID, 500*time.Millisecond, done, nil) {
		t.Fatal("Stop did not kill a process that ignores cancels")
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("killed after %v, before the grace", d)
	}
	r := await(t, ch, time.Minute)
	close(done)
	if !errors.Is(r.err, ErrExecutorKilled) {
		t.Fatalf("call error %v, want ErrExecutorKilled", r.err)
	}
}
