package rrq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeExecutor is a hand-written executor on a real Unix socket that answers each
// request according to its function_name, writing raw bytes where the test needs
// protocol violations.
type fakeExecutor struct {
	t        *testing.T
	ln       net.Listener
	ep       Endpoint
	release  chan struct{}      // "hang" requests answer when this is closed
	received chan string        // function_name of every request read
	cancels  chan CancelRequest // every cancel frame read
	conns    atomic.Int64
}

func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rrq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func startFake(t *testing.T) *fakeExecutor {
	t.Helper()
	path := filepath.Join(shortTempDir(t), "fake.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeExecutor{t: t, ln: ln, ep: UnixEndpoint(path), release: make(chan struct{}),
		received: make(chan string, 100), cancels: make(chan CancelRequest, 100)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				f.serve(nc)
			}()
		}
	}()
	return f
}

func (f *fakeExecutor) serve(nc net.Conn) {
	stop := make(chan struct{})
	defer close(stop)
	go func() { // unblock reads when the test ends
		select {
		case <-stop:
		case <-f.t.Context().Done():
			nc.Close()
		}
	}()
	for {
		env, err := ReadFrame(nc, 0)
		if err != nil {
			return
		}
		switch env.Type {
		case TypeCancel:
			c, _ := env.Cancel()
			f.cancels <- c
			continue
		case TypeRequest:
		default:
			return
		}
		req, err := env.Request()
		if err != nil {
			return
		}
		f.received <- req.FunctionName
		if !f.answer(nc, req) {
			return
		}
	}
}

func outcomeFrame(req ExecutionRequest, status Status, result string) []byte {
	env, _ := NewEnvelope(&ExecutionOutcome{JobID: req.JobID, RequestID: req.RequestID, Status: status, Result: json.RawMessage(result)})
	b, _ := EncodeFrame(env)
	return b
}

// answer writes the response for req; false closes the connection.
func (f *fakeExecutor) answer(nc net.Conn, req ExecutionRequest) bool {
	ok := outcomeFrame(req, StatusSuccess, `{"fn":"`+req.FunctionName+`"}`)
	w := func(parts ...[]byte) bool {
		for _, p := range parts {
			if _, err := nc.Write(p); err != nil {
				return false
			}
		}
		return true
	}
	switch req.FunctionName {
	case "echo":
		return w(ok)
	case "hang":
		select {
		case <-f.release:
		case <-f.t.Context().Done():
			return false
		}
		return w(ok)
	case "zero":
		return w(header(0))
	case "overlimit":
		return w(header(2048), make([]byte, 2048))
	case "badutf8":
		return w(rawFrame("{\"type\":\"response\",\"payload\":{\"x\":\"\xff\"}}"))
	case "badjson":
		return w(rawFrame(`{"type":"response","payload":{`))
	case "unknowntype":
		return w(rawFrame(`{"type":"bogus","payload":{}}`))
	case "badpayload":
		return w(rawFrame(`{"type":"response","payload":{"request_id":42}}`))
	case "unknownid":
		other := req
		other.RequestID = "not-a-request-we-sent"
		return w(outcomeFrame(other, StatusSuccess, `1`), ok)
	case "duplicate":
		return w(ok, ok)
	case "requestframe":
		env, _ := NewEnvelope(&req)
		b, _ := EncodeFrame(env)
		return w(b, ok)
	case "wrongjob":
		other := req
		other.JobID = "another-job"
		return w(outcomeFrame(other, StatusSuccess, `1`))
	case "badstatus":
		return w(outcomeFrame(req, "finished", `1`))
	case "midframe":
		w(header(100), []byte(`{"type":"resp`))
		return false
	case "close":
		return false
	case "hangclose":
		select {
		case <-f.release:
		case <-f.t.Context().Done():
		}
		return false
	}
	return w(outcomeFrame(req, StatusError, `null`))
}

func newTestClient(t *testing.T, ep Endpoint, opt ClientOptions) (*Client, chan Violation) {
	t.Helper()
	viol := make(chan Violation, 100)
	opt.OnViolation = func(v Violation) { viol <- v }
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := NewClient(ep, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, viol
}

func waitViolation(t *testing.T, ch chan Violation, kind ViolationKind) Violation {
	t.Helper()
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case v := <-ch:
			if v.Kind == kind {
				return v
			}
			t.Logf("other violation: %s %v", v.Kind, v.Err)
		case <-timeout.C:
			t.Fatalf("no %s violation within 5s", kind)
		}
	}
}

// eventually waits (with a deadline) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustEcho(t *testing.T, c *Client) {
	t.Helper()
	out, err := c.Execute(testCtx(t, time.Minute), NewRequest("job-echo", "echo", nil, nil))
	if err != nil || out.Status != StatusSuccess || string(out.Result) != `{"fn":"echo"}` {
		t.Fatalf("follow-up request: %+v, %v", out, err)
	}
}

func TestClientRoundTrip(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{})
	req := NewRequest("job-1", "echo", []any{1}, nil)
	out, err := c.Execute(testCtx(t, time.Minute), req)
	if err != nil {
		t.Fatal(err)
	}
	if out.RequestID != req.RequestID || out.JobID != "job-1" || out.Status != StatusSuccess {
		t.Fatalf("outcome %+v", out)
	}
	for range 5 {
		mustEcho(t, c)
	}
	if s := c.Stats(); s.Dials != 1 || s.Requests != 6 || s.Outcomes != 6 || s.IdleConnections != 1 {
		t.Fatalf("sequential requests should reuse one connection: %+v", s)
	}
}

func TestClientProtocolViolations(t *testing.T) {
	cases := []struct {
		fn      string
		wantErr []error // nil: the request succeeds
		kind    ViolationKind
		stat    func(ClientStats) uint64
	}{
		{"zero", []error{ErrConnectionLost, ErrProtocolViolation, ErrZeroLengthFrame}, ViolationBadFrame, func(s ClientStats) uint64 { return s.BadFrames }},
		{"overlimit", []error{ErrConnectionLost, ErrProtocolViolation, ErrFrameTooLarge}, ViolationBadFrame, func(s ClientStats) uint64 { return s.BadFrames }},
		{"badutf8", []error{ErrConnectionLost, ErrProtocolViolation, ErrInvalidUTF8}, ViolationBadFrame, func(s ClientStats) uint64 { return s.BadFrames }},
		{"badjson", []error{ErrConnectionLost, ErrProtocolViolation, ErrInvalidJSON}, ViolationBadFrame, func(s ClientStats) uint64 { return s.BadFrames }},
		{"unknowntype", []error{ErrConnectionLost, ErrProtocolViolation, ErrUnknownType}, ViolationBadFrame, func(s ClientStats) uint64 { return s.BadFrames }},
		{"badpayload", []error{ErrConnectionLost, ErrProtocolViolation, ErrInvalidEnvelope}, ViolationBadFrame, func(s ClientStats) uint64 { return s.BadFrames }},
		{"midframe", []error{ErrConnectionLost, ErrTruncatedFrame}, ViolationTruncatedFrame, func(s ClientStats) uint64 { return s.TruncatedFrames }},
		{"unknownid", nil, ViolationUnknownRequestID, func(s ClientStats) uint64 { return s.UnknownResponses }},
		{"duplicate", nil, ViolationDuplicateResponse, func(s ClientStats) uint64 { return s.DuplicateResponses }},
		{"requestframe", nil, ViolationUnexpectedFrame, func(s ClientStats) uint64 { return s.UnexpectedFrames }},
		{"wrongjob", []error{ErrProtocolViolation}, ViolationInvalidOutcome, func(s ClientStats) uint64 { return s.InvalidOutcomes }},
		{"badstatus", []error{ErrProtocolViolation}, ViolationInvalidOutcome, func(s ClientStats) uint64 { return s.InvalidOutcomes }},
	}
	for _, tc := range cases {
		t.Run(tc.fn, func(t *testing.T) {
			f := startFake(t)
			c, viol := newTestClient(t, f.ep, ClientOptions{MaxFrameSize: 1024, MaxInFlight: 2})

			// A request in flight on another connection must not be affected.
			other := make(chan error, 1)
			go func() {
				out, err := c.Execute(testCtx(t, time.Minute), NewRequest("job-other", "hang", nil, nil))
				if err == nil && out.Status != StatusSuccess {
					err = errors.New("bad status " + string(out.Status))
				}
				other <- err
			}()
			if fn := <-f.received; fn != "hang" {
				t.Fatalf("first request seen by the executor: %s", fn)
			}

			req := NewRequest("job-bad", tc.fn, nil, nil)
			out, err := c.Execute(testCtx(t, time.Minute), req)
			if tc.wantErr == nil {
				if err != nil || out.Status != StatusSuccess || out.RequestID != req.RequestID {
					t.Fatalf("want success, got %+v, %v", out, err)
				}
			} else {
				if err == nil {
					t.Fatalf("want error, got outcome %+v", out)
				}
				for _, want := range tc.wantErr {
					if !errors.Is(err, want) {
						t.Errorf("error %q does not match %q", err, want)
					}
				}
				t.Logf("error: %v", err)
			}
			v := waitViolation(t, viol, tc.kind)
			if v.Endpoint != f.ep {
				t.Errorf("violation endpoint %v", v.Endpoint)
			}
			if got := tc.stat(c.Stats()); got != 1 {
				t.Errorf("counter = %d, want 1", got)
			}

			close(f.release)
			if err := <-other; err != nil {
				t.Fatalf("request on the other connection: %v", err)
			}
			mustEcho(t, c) // the client is healthy
			if s := c.Stats(); s.InFlight != 0 {
				t.Errorf("slots leaked: %+v", s)
			}
		})
	}
}

func TestClientConnectionClosedByExecutor(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{})
	_, err := c.Execute(testCtx(t, time.Minute), NewRequest("job", "close", nil, nil))
	if !errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrProtocolViolation) {
		t.Fatalf("err = %v", err)
	}
	mustEcho(t, c)
	if s := c.Stats(); s.ConnectionsLost != 1 || s.Dials != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestClientMaxInFlight(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{MaxInFlight: 2})
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := c.Execute(testCtx(t, time.Minute), NewRequest("job", "hang", nil, nil))
			errs <- err
		}()
	}
	<-f.received
	<-f.received
	if s := c.Stats(); s.InFlight != 2 || s.OpenConnections != 2 {
		t.Fatalf("stats %+v", s)
	}
	select {
	case fn := <-f.received:
		t.Fatalf("a third request (%s) was sent beyond MaxInFlight", fn)
	default:
	}
	close(f.release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := c.Stats(); s.Dials != 2 || s.Outcomes != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// With Pipeline, requests share a connection: the executor reads the next one while
// (or after) answering the first, and every answer reaches its caller.
func TestClientPipeline(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{MaxInFlight: 4, Pipeline: 4})
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			out, err := c.Execute(testCtx(t, time.Minute), NewRequest("job", "hang", nil, nil))
			if err == nil && string(out.Result) != `{"fn":"hang"}` {
				err = fmt.Errorf("outcome %+v", out)
			}
			errs <- err
		}()
		// one after the other (callers that arrive at once before any connection
		// exists may each open one)
		eventually(t, "request written", func() bool { return c.Stats().Requests == uint64(i+1) })
	}
	<-f.received // the fake executor holds the first; the rest wait on the connection
	if s := c.Stats(); s.InFlight != 4 || s.OpenConnections != 1 || s.Dials != 1 {
		t.Fatalf("4 requests should share one connection: %+v", s)
	}
	close(f.release)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := c.Stats(); s.Dials != 1 || s.Outcomes != 4 || s.IdleConnections != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Requests that callers make at the same moment (a claim hands out many jobs at once)
// go out together: one write system call carries the frames queued while the first
// caller's was about to go, not one call each.
func TestClientWritesRequestsMadeTogetherAtOnce(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{MaxInFlight: 32, Pipeline: 32})
	mustEcho(t, c) // the connection is open
	// One P: the callers run one after the other, as they do when the runner is busy
	// (a caller that wrote at once would leave each of the others a write of its own).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	before := c.Stats().Writes
	const n = 16
	start := make(chan struct{})
	errs := make(chan error, n)
	var ready sync.WaitGroup
	for range n {
		ready.Add(1)
		go func() {
			ready.Done()
			<-start
			_, err := c.Execute(testCtx(t, time.Minute), NewRequest("job", "echo", nil, nil))
			errs <- err
		}()
	}
	ready.Wait()
	close(start)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Mostly one write; the writer may resume before the last callers ran (the
	// scheduler's fairness), and theirs go in the next (without the yield: 16).
	if w := c.Stats().Writes - before; w > 3 {
		t.Fatalf("%d requests made at once took %d writes, want at most 3", n, w)
	}
}

// A connection lost with several requests in flight on it fails each of them.
func TestClientPipelineConnectionLost(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{MaxInFlight: 3, Pipeline: 3})
	errs := make(chan error, 3)
	run := func(fn string) {
		_, err := c.Execute(testCtx(t, time.Minute), NewRequest("job", fn, nil, nil))
		errs <- err
	}
	go run("hangclose")
	<-f.received
	go run("echo")
	go run("echo")
	eventually(t, "3 requests written", func() bool { return c.Stats().Requests == 3 })
	close(f.release) // the executor closes the connection without answering
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("err = %v, want ErrConnectionLost", err)
		}
	}
	mustEcho(t, c)
	if s := c.Stats(); s.ConnectionsLost != 1 || s.Dials != 2 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// executeThenGiveUp sends a "hang" request and cancels its ctx once the executor has it.
func executeThenGiveUp(t *testing.T, c *Client, f *fakeExecutor) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.Execute(ctx, NewRequest("job", "hang", nil, nil)); done <- err }()
	<-f.received
	cancel()
	return <-done
}

func TestClientContextDeadline(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{MaxInFlight: 1})
	if err := executeThenGiveUp(t, c, f); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// The executor is still busy with it, so the slot stays taken …
	if s := c.Stats(); s.Abandoned != 1 || s.InFlight != 1 {
		t.Fatalf("stats %+v", s)
	}
	// … and a second request waits for it (here: until its own deadline).
	ctx2, cancel2 := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel2()
	if _, err := c.Execute(ctx2, NewRequest("job", "echo", nil, nil)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	close(f.release) // the late answer arrives and is dropped; the connection is reused
	eventually(t, "the late response", func() bool { return c.Stats().LateResponses == 1 })
	mustEcho(t, c)
	if s := c.Stats(); s.Dials != 1 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestClientAbandonTimeout(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{MaxInFlight: 1, AbandonTimeout: 50 * time.Millisecond})
	if err := executeThenGiveUp(t, c, f); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// After AbandonTimeout the connection is given up and the slot freed.
	eventually(t, "the abandoned connection to close", func() bool { s := c.Stats(); return s.InFlight == 0 && s.OpenConnections == 0 })
	close(f.release)
	mustEcho(t, c)
}

func TestClientCancel(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{})
	req := NewRequest("job-c", "hang", nil, nil)
	done := make(chan error, 1)
	go func() { _, err := c.Execute(testCtx(t, time.Minute), req); done <- err }()
	<-f.received
	if err := c.Cancel(testCtx(t, time.Minute), "job-c", req.RequestID, true); err != nil {
		t.Fatal(err)
	}
	select {
	case cr := <-f.cancels:
		if cr.JobID != "job-c" || cr.RequestID != req.RequestID || !cr.HardKill || cr.ProtocolVersion != "1" {
			t.Fatalf("cancel frame %+v", cr)
		}
	case <-time.After(time.Minute):
		t.Fatal("no cancel frame")
	}
	if f.conns.Load() != 2 {
		t.Fatalf("cancel should use its own connection; executor saw %d", f.conns.Load())
	}
	close(f.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.CancelsSent != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestClientUnavailable(t *testing.T) {
	c, _ := newTestClient(t, UnixEndpoint(filepath.Join(shortTempDir(t), "none.sock")), ClientOptions{})
	_, err := c.Execute(testCtx(t, time.Minute), NewRequest("job", "echo", nil, nil))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if s := c.Stats(); s.InFlight != 0 || s.NotDelivered != 1 {
		t.Fatalf("stats %+v", s)
	}
	if err := c.Cancel(testCtx(t, time.Minute), "job", "", false); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancel err = %v", err)
	}
}

func TestClientCloseFailsInFlight(t *testing.T) {
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Execute(testCtx(t, time.Minute), NewRequest("job", "hang", nil, nil))
		done <- err
	}()
	<-f.received
	c.Close()
	if err := <-done; !errors.Is(err, ErrConnectionLost) || !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v", err)
	}
	if _, err := c.Execute(t.Context(), NewRequest("job", "echo", nil, nil)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestClientRejectsBadInput(t *testing.T) {
	if _, err := NewClient(TCPEndpoint("10.0.0.1:80"), ClientOptions{}); err == nil {
		t.Fatal("non-local TCP endpoint accepted")
	}
	f := startFake(t)
	c, _ := newTestClient(t, f.ep, ClientOptions{MaxFrameSize: 512})
	if _, err := c.Execute(t.Context(), ExecutionRequest{FunctionName: "echo"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("missing job_id: %v", err)
	}
	big := NewRequest("job", "echo", []any{string(make([]byte, 1000))}, nil)
	if _, err := c.Execute(t.Context(), big); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized request: %v", err)
	}
	if s := c.Stats(); s.InFlight != 0 || s.Dials != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestEndpoints(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7000": true, "localhost:1": true, "[::1]:9": true, "127.0.0.2:80": true,
		"0.0.0.0:7000": false, "10.1.2.3:7000": false, "example.com:80": false, "127.0.0.1:0": false,
		"127.0.0.1": false, "127.0.0.1:70000": false,
	} {
		if err := ValidateLocalTCPAddress(addr); (err == nil) != ok {
			t.Errorf("%s: err = %v", addr, err)
		}
	}
	env := map[string]string{EnvSocket: "/tmp/x.sock"}
	ep, err := EndpointFromEnv(func(k string) string { return env[k] })
	if err != nil || ep != UnixEndpoint("/tmp/x.sock") || ep.Env() != "RRQ_EXECUTOR_SOCKET=/tmp/x.sock" {
		t.Fatalf("%v %v", ep, err)
	}
	env[EnvTCPSocket] = "127.0.0.1:1"
	if _, err := EndpointFromEnv(func(k string) string { return env[k] }); err == nil {
		t.Fatal("both set accepted")
	}
	got := executorEnv([]string{"A=1", EnvTCPSocket + "=x", EnvSocket + "=y"}, []string{"B=2"}, UnixEndpoint("/s"))
	if want := []string{"A=1", "B=2", EnvSocket + "=/s"}; !equalStrings(got, want) {
		t.Fatalf("env %v", got)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
