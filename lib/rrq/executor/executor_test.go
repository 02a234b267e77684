package executor_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/rrq"
	"github.com/hero-coordinator/hero/lib/rrq/executor"
)

type harness struct {
	ex      *executor.Executor
	ep      rrq.Endpoint
	client  *rrq.Client
	started chan string // request_id of each "block" handler that started
	echoes  atomic.Int64
	stop    context.CancelFunc
	served  chan error
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startExecutor(t testing.TB, opt executor.Options) *harness {
	t.Helper()
	dir, err := os.MkdirTemp("", "rrqex")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ep := rrq.UnixEndpoint(filepath.Join(dir, "ex.sock"))
	ln, err := executor.ListenEndpoint(ep)
	if err != nil {
		t.Fatal(err)
	}
	opt.Logger = quietLogger()
	h := &harness{ex: executor.New(opt), ep: ep, started: make(chan string, 10), served: make(chan error, 1)}
	h.ex.Register("echo", func(_ context.Context, req *rrq.ExecutionRequest) (any, error) {
		h.echoes.Add(1)
		return map[string]any{"args": req.Args, "kwargs": req.Kwargs}, nil
	})
	h.ex.Register("block", func(ctx context.Context, req *rrq.ExecutionRequest) (any, error) {
		h.started <- req.RequestID
		<-ctx.Done()
		return nil, ctx.Err()
	})
	h.ex.Register("noop", func(context.Context, *rrq.ExecutionRequest) (any, error) { return nil, nil })
	h.ex.Register("plain_error", func(context.Context, *rrq.ExecutionRequest) (any, error) {
		return nil, errors.New("it broke")
	})
	h.ex.Register("typed_error", func(context.Context, *rrq.ExecutionRequest) (any, error) {
		return nil, executor.Fail("quota", "Q42", "over quota").WithDetails(map[string]int{"limit": 3})
	})
	h.ex.Register("retry", func(context.Context, *rrq.ExecutionRequest) (any, error) {
		return nil, executor.Retry(2500*time.Millisecond, nil)
	})
	h.ex.Register("timeout", func(context.Context, *rrq.ExecutionRequest) (any, error) {
		return nil, executor.Timeout(errors.New("gave up"))
	})
	h.ex.Register("panic", func(context.Context, *rrq.ExecutionRequest) (any, error) { panic("oops") })
	h.ex.Register("bad_result", func(context.Context, *rrq.ExecutionRequest) (any, error) { return make(chan int), nil })
	h.ex.Register("raw", func(context.Context, *rrq.ExecutionRequest) (any, error) { return json.RawMessage(`[1,2]`), nil })

	ctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	go func() { h.served <- h.ex.ServeListener(ctx, ln) }()
	t.Cleanup(func() { stop(); <-h.served })
	h.client, err = rrq.NewClient(ep, rrq.ClientOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.client.Close() })
	return h
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (h *harness) run(t *testing.T, fn string) rrq.ExecutionOutcome {
	t.Helper()
	out, err := h.client.Execute(ctxT(t), rrq.NewRequest("job-"+fn, fn, []any{1, "two"}, map[string]any{"flag": true}))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOutcomes(t *testing.T) {
	h := startExecutor(t, executor.Options{})
	out := h.run(t, "echo")
	if out.Status != rrq.StatusSuccess || string(out.Result) != `{"args":[1,"two"],"kwargs":{"flag":true}}` {
		t.Fatalf("echo: %+v", out)
	}
	cases := []struct {
		fn     string
		status rrq.Status
		typ    string
	}{
		{"no_such_handler", rrq.StatusError, rrq.ErrorTypeHandlerNotFound},
		{"plain_error", rrq.StatusError, executor.ErrorTypeHandler},
		{"typed_error", rrq.StatusError, "quota"},
		{"timeout", rrq.StatusTimeout, "timeout"},
		{"panic", rrq.StatusError, executor.ErrorTypePanic},
		{"bad_result", rrq.StatusError, executor.ErrorTypeBadResult},
	}
	for _, tc := range cases {
		out := h.run(t, tc.fn)
		if out.Status != tc.status || out.Error == nil || out.Error.Type != tc.typ {
			t.Errorf("%s: %+v %+v", tc.fn, out, out.Error)
		}
	}
	out = h.run(t, "typed_error")
	if out.Error.Code != "Q42" || out.Error.Message != "over quota" || string(out.Error.Details) != `{"limit":3}` {
		t.Errorf("typed error: %+v", out.Error)
	}
	out = h.run(t, "retry")
	if out.Status != rrq.StatusRetry || out.RetryAfterSeconds == nil || *out.RetryAfterSeconds != 2.5 {
		t.Errorf("retry: %+v", out)
	}
	out = h.run(t, "raw")
	if out.Status != rrq.StatusSuccess || string(out.Result) != `[1,2]` {
		t.Errorf("raw: %+v", out)
	}
	// The executor is still serving after a panic.
	if out := h.run(t, "echo"); out.Status != rrq.StatusSuccess {
		t.Fatalf("after panic: %+v", out)
	}
}

func TestCancelOnSeparateConnection(t *testing.T) {
	h := startExecutor(t, executor.Options{})
	for _, withRequestID := range []bool{true, false} {
		req := rrq.NewRequest("job-block", "block", nil, nil)
		done := make(chan rrq.ExecutionOutcome, 1)
		go func() {
			out, err := h.client.Execute(ctxT(t), req)
			if err != nil {
				t.Error(err)
			}
			done <- out
		}()
		if id := <-h.started; id != req.RequestID {
			t.Fatalf("started %s", id)
		}
		rid := ""
		if withRequestID {
			// A cancel for another request of the job is a no-op.
			if err := h.client.Cancel(ctxT(t), req.JobID, "other-request", false); err != nil {
				t.Fatal(err)
			}
			rid = req.RequestID
		}
		if err := h.client.Cancel(ctxT(t), req.JobID, rid, false); err != nil {
			t.Fatal(err)
		}
		out := <-done
		if out.Status != rrq.StatusError || out.Error == nil || out.Error.Type != rrq.ErrorTypeCancelled || out.RequestID != req.RequestID {
			t.Fatalf("cancelled: %+v", out)
		}
	}
}

// Raw connection helpers: the orchestrator side written by hand.
func dialRaw(t *testing.T, ep rrq.Endpoint) net.Conn {
	t.Helper()
	nc, err := net.Dial(ep.Network, ep.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(time.Minute))
	return nc
}

func send(t *testing.T, nc net.Conn, payload any) {
	t.Helper()
	if err := rrq.WriteMessage(nc, payload); err != nil {
		t.Fatal(err)
	}
}

func recvOutcome(t *testing.T, nc net.Conn) rrq.ExecutionOutcome {
	t.Helper()
	env, err := rrq.ReadFrame(nc, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := env.Outcome()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSequentialPerConnectionAndQueuedCancel(t *testing.T) {
	h := startExecutor(t, executor.Options{})
	nc := dialRaw(t, h.ep)
	r1 := rrq.NewRequest("job-1", "block", nil, nil)
	r2 := rrq.NewRequest("job-2", "echo", nil, nil)
	r3 := rrq.NewRequest("job-3", "echo", nil, nil)
	send(t, nc, &r1)
	send(t, nc, &r2)
	send(t, nc, &r3)
	<-h.started
	// r2 waits behind r1 on this connection; cancelling it answers it without running it.
	send(t, nc, &rrq.CancelRequest{ProtocolVersion: "1", JobID: "job-2", RequestID: r2.RequestID})
	send(t, nc, &rrq.CancelRequest{ProtocolVersion: "1", JobID: "job-1"})
	for _, want := range []struct {
		req    rrq.ExecutionRequest
		status rrq.Status
	}{{r1, rrq.StatusError}, {r2, rrq.StatusError}, {r3, rrq.StatusSuccess}} {
		out := recvOutcome(t, nc)
		if out.RequestID != want.req.RequestID || out.Status != want.status {
			t.Fatalf("got %+v, want %s for %s", out, want.status, want.req.FunctionName)
		}
		if want.status == rrq.StatusError && out.Error.Type != rrq.ErrorTypeCancelled {
			t.Fatalf("error %+v", out.Error)
		}
	}
	if n := h.echoes.Load(); n != 1 {
		t.Fatalf("echo ran %d times, want 1 (the cancelled one must not run)", n)
	}
}

func TestInvalidRequestAndBadFrame(t *testing.T) {
	h := startExecutor(t, executor.Options{})
	nc := dialRaw(t, h.ep)
	req := rrq.NewRequest("job", "echo", nil, nil)
	req.ProtocolVersion = "2"
	send(t, nc, &req)
	out := recvOutcome(t, nc)
	if out.Status != rrq.StatusError || out.Error.Type != executor.ErrorTypeInvalidRequest || out.RequestID != req.RequestID {
		t.Fatalf("%+v %+v", out, out.Error)
	}
	// A zero-length frame: the executor closes the connection.
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 0)
	if _, err := nc.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := rrq.ReadFrame(nc, 0); err != io.EOF {
		t.Fatalf("want EOF after a bad frame, got %v", err)
	}
	// Other connections are fine.
	if out := h.run(t, "echo"); out.Status != rrq.StatusSuccess {
		t.Fatal(out)
	}
}

func TestShutdownCancelsRunning(t *testing.T) {
	h := startExecutor(t, executor.Options{})
	nc := dialRaw(t, h.ep)
	req := rrq.NewRequest("job", "block", nil, nil)
	send(t, nc, &req)
	<-h.started
	h.stop()
	out := recvOutcome(t, nc)
	if out.Status != rrq.StatusError || out.Error.Type != rrq.ErrorTypeCancelled {
		t.Fatalf("%+v %+v", out, out.Error)
	}
	if err := <-h.served; err != nil {
		t.Fatal(err)
	}
	h.served <- nil // for the cleanup
	if _, err := os.Stat(h.ep.Address); !os.IsNotExist(err) {
		t.Errorf("socket file left behind: %v", err)
	}
}

func TestEnforceDeadline(t *testing.T) {
	h := startExecutor(t, executor.Options{EnforceDeadline: true})
	req := rrq.NewRequest("job", "block", nil, nil)
	dl := time.Now().Add(50 * time.Millisecond)
	req.Context.Deadline = &dl
	out, err := h.client.Execute(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != rrq.StatusTimeout {
		t.Fatalf("%+v", out)
	}
}

func TestListenFromEnv(t *testing.T) {
	dir, err := os.MkdirTemp("", "rrqenv")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "x.sock")
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // leaves a stale socket file
	t.Setenv(rrq.EnvSocket, path)
	ln, err := executor.Listen()
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	ln.Close()

	t.Setenv(rrq.EnvSocket, "")
	t.Setenv(rrq.EnvTCPSocket, "0.0.0.0:7777")
	if _, err := executor.Listen(); err == nil {
		t.Fatal("non-localhost TCP address accepted")
	}
	t.Setenv(rrq.EnvTCPSocket, "127.0.0.1:0")
	if _, err := executor.Listen(); err == nil {
		t.Fatal("port 0 accepted")
	}
}
