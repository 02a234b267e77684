// Package executor is the Go SDK for RRQ executors (protocol v1): register handlers,
// then Serve. Serve listens where the orchestrator says (RRQ_EXECUTOR_SOCKET or
// RRQ_EXECUTOR_TCP_SOCKET), accepts any number of connections, answers the requests of
// each connection one after the other, and handles cancel frames on any connection.
//
//	ex := executor.New(executor.Options{})
//	ex.Register("echo", func(ctx context.Context, req *rrq.ExecutionRequest) (any, error) {
//		return map[string]any{"args": req.Args, "kwargs": req.Kwargs}, nil
//	})
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	log.Fatal(ex.Serve(ctx))
//
// A handler's return decides the outcome: (result, nil) → "success" with result;
// Retry(after, reason) → "retry"; Timeout(reason) → "timeout"; an *Error → "error" with
// its type/code/details; any other error → "error" with type "handler_error"; a panic →
// "error" with type "panic". A cancel frame for the job cancels the handler's ctx; if
// the handler then returns an error the outcome is "error" with type "cancelled".
package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hero-coordinator/hero/lib/rrq"
)

// Handler runs one request. ctx is cancelled by a cancel frame for the request (or its
// job), by the executor's shutdown, and — with Options.EnforceDeadline — at the
// request's deadline.
type Handler func(ctx context.Context, req *rrq.ExecutionRequest) (any, error)

// Options configure an Executor. The zero value is usable.
type Options struct {
	// MaxFrameSize limits incoming frames. Default rrq.DefaultMaxFrameSize (16 MiB).
	MaxFrameSize int
	// EnforceDeadline makes the request's context.deadline the handler ctx's deadline;
	// a handler that returns an error after it passed gives status "timeout".
	EnforceDeadline bool
	// ShutdownTimeout bounds how long Serve waits, after its ctx ends, for running
	// handlers to return. Default 10s.
	ShutdownTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Executor serves registered handlers over the RRQ executor protocol.
type Executor struct {
	opt Options
	log *slog.Logger

	mu       sync.Mutex
	handlers map[string]Handler
	tasks    task // sentinel of the ring of requests read and not yet answered
	conns    map[net.Conn]struct{}
}

// New returns an Executor without handlers.
func New(opt Options) *Executor {
	if opt.MaxFrameSize <= 0 {
		opt.MaxFrameSize = rrq.DefaultMaxFrameSize
	}
	if opt.ShutdownTimeout <= 0 {
		opt.ShutdownTimeout = 10 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	e := &Executor{
		opt:      opt,
		log:      opt.Logger,
		handlers: map[string]Handler{},
		conns:    map[net.Conn]struct{}{},
	}
	e.tasks.prev, e.tasks.next = &e.tasks, &e.tasks
	return e
}

// Register adds the handler for function_name name. It panics if name is empty or
// already registered.
func (e *Executor) Register(name string, h Handler) {
	if name == "" || h == nil {
		panic("executor: Register needs a name and a handler")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.handlers[name]; dup {
		panic("executor: handler " + name + " registered twice")
	}
	e.handlers[name] = h
}

// Listen listens where the environment says: RRQ_EXECUTOR_SOCKET (a Unix socket path;
// a stale socket file there is removed) or RRQ_EXECUTOR_TCP_SOCKET (a localhost-only
// host:port).
func Listen() (net.Listener, error) {
	ep, err := rrq.EndpointFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	return ListenEndpoint(ep)
}

// ListenEndpoint listens on ep (see Listen).
func ListenEndpoint(ep rrq.Endpoint) (net.Listener, error) {
	if err := ep.Validate(); err != nil {
		return nil, err
	}
	if ep.Network == "unix" {
		if fi, err := os.Lstat(ep.Address); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(ep.Address)
		}
	}
	ln, err := net.Listen(ep.Network, ep.Address)
	if err != nil {
		return nil, fmt.Errorf("executor: listen on %s: %w", ep, err)
	}
	return ln, nil
}

// Serve listens (see Listen) and serves until ctx ends; see ServeListener.
func (e *Executor) Serve(ctx context.Context) error {
	ln, err := Listen()
	if err != nil {
		return err
	}
	return e.ServeListener(ctx, ln)
}

// ServeListener accepts connections on ln and serves them until ctx ends. Then it
// closes ln, cancels the running handlers (their outcome is "error"/"cancelled"),
// writes the outcomes, closes the connections and returns nil, waiting at most
// Options.ShutdownTimeout for handlers that ignore their ctx.
func (e *Executor) ServeListener(ctx context.Context, ln net.Listener) error {
	base, cancelAll := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelAll(errShutdown)
	var wg sync.WaitGroup
	acceptErr := make(chan error, 1)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.ServeConn(base, nc)
			}()
		}
	}()
	var err error
	select {
	case <-ctx.Done():
	case err = <-acceptErr:
		err = fmt.Errorf("executor: accept: %w", err)
	}
	ln.Close()
	cancelAll(errShutdown)
	// Wake the readers so the connections wind down once their outcomes are written.
	e.mu.Lock()
	for nc := range e.conns {
		_ = nc.SetReadDeadline(time.Now())
	}
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(e.opt.ShutdownTimeout):
		e.log.Warn("executor: handlers still running after the shutdown timeout")
	}
	return err
}

type task struct {
	req    rrq.ExecutionRequest
	ctx    context.Context
	cancel context.CancelCauseFunc
	ready  *rrq.ExecutionOutcome // an answer known without running a handler
	conn   *connTasks            // the connection that read it

	prev, next *task // in Executor.tasks while registered (under Executor.mu)
}

// connTasks stands for one served connection: its tasks are the registered tasks
// (Executor.tasks) whose conn it is. parent is what their contexts derive from.
type connTasks struct {
	ctx    context.Context // ServeConn's
	parent context.Context
}

// cancelConn cancels, with cause, the registered tasks of c (a broken connection, or
// its ctx ended). Cancelling a finished task's context is a no-op.
func (e *Executor) cancelConn(c *connTasks, cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for t := e.tasks.next; t != &e.tasks; t = t.next {
		if t.conn == c {
			t.cancel(cause)
		}
	}
}

// ServeConn serves one connection until the peer closes it or ctx ends: requests are
// run one after the other and answered in order; cancel frames act at once. It closes
// nc before returning.
func (e *Executor) ServeConn(ctx context.Context, nc net.Conn) {
	e.mu.Lock()
	e.conns[nc] = struct{}{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.conns, nc)
		e.mu.Unlock()
		nc.Close()
	}()
	if ctx.Err() != nil {
		return
	}
	// The tasks' contexts derive from a context that is never cancelled, so that making
	// one costs no registration in (and no removal from) a parent's set of children:
	// when ctx ends, the connection's registered tasks are cancelled through the
	// registry (newTask cancels one registered after that). A ctx with a deadline stays
	// the parent, for the handlers to see that deadline.
	conn := &connTasks{ctx: ctx, parent: ctx}
	if _, has := ctx.Deadline(); !has && ctx.Done() != nil {
		conn.parent = context.WithoutCancel(ctx)
		stop := context.AfterFunc(ctx, func() { e.cancelConn(conn, context.Cause(ctx)) })
		defer stop()
	}

	queue := make(chan *task, 64)
	workerDone := make(chan struct{})
	go func() {
		defer close(workerDone)
		// The worker runs the requests; the writer sends their outcomes. It writes when
		// no outcome waits behind one, so the outcomes of requests that arrived together
		// share a write, and none waits for a later request's handler.
		outcomes := make(chan rrq.ExecutionOutcome, cap(queue))
		writerDone := make(chan struct{})
		go func() {
			defer close(writerDone)
			broken := false
			bw := bufio.NewWriterSize(nc, 32<<10)
			for out := range outcomes {
				if broken {
					continue
				}
				err := writeOutcome(bw, &out)
				if err == nil && len(outcomes) == 0 {
					err = bw.Flush()
				}
				if err != nil {
					e.log.Warn("executor: cannot write response; closing connection", "request_id", out.RequestID, "err", err)
					broken = true
					nc.Close()
				}
			}
		}()
		for t := range queue {
			out := e.runTask(t)
			e.unregister(t)
			outcomes <- out
		}
		close(outcomes)
		<-writerDone
	}()

	br := bufio.NewReaderSize(nc, 32<<10) // one read call per frame (or per several)
	for {
		env, err := rrq.ReadFrame(br, e.opt.MaxFrameSize)
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				e.log.Warn("executor: bad frame or read error; closing connection", "err", err)
				// The stream is unusable, so no outcome can be delivered: stop our tasks.
				e.cancelConn(conn, errors.New("connection to the orchestrator broken"))
			}
			break
		}
		switch env.Type {
		case rrq.TypeRequest:
			t, ok := e.newTask(conn, env)
			if !ok {
				e.log.Warn("executor: undecodable request without usable ids; closing connection")
				close(queue)
				<-workerDone
				return
			}
			queue <- t
		case rrq.TypeCancel:
			c, err := env.Cancel()
			if err != nil {
				e.log.Warn("executor: undecodable cancel frame ignored", "err", err)
				continue
			}
			e.Cancel(c)
		default:
			e.log.Warn("executor: unexpected frame ignored", "type", string(env.Type))
		}
	}
	close(queue)
	<-workerDone
}

// writeOutcome writes out's frame into bw's spare room (no buffer of its own while
// it fits there).
func writeOutcome(bw *bufio.Writer, out *rrq.ExecutionOutcome) error {
	frame, err := rrq.AppendOutcomeFrame(bw.AvailableBuffer(), out)
	if err != nil {
		return err
	}
	_, err = bw.Write(frame)
	return err
}

// newTask decodes a request frame and registers it (so cancels reach it while it waits
// its turn). ok is false when not even request_id and job_id can be read.
func (e *Executor) newTask(conn *connTasks, env rrq.Envelope) (*task, bool) {
	t := &task{conn: conn}
	req, err := env.Request()
	if err == nil {
		err = req.Validate()
	}
	if err != nil {
		var ids struct {
			RequestID string `json:"request_id"`
			JobID     string `json:"job_id"`
		}
		if json.Unmarshal(env.Payload, &ids) != nil || ids.RequestID == "" {
			return nil, false
		}
		t.req = rrq.ExecutionRequest{RequestID: ids.RequestID, JobID: ids.JobID}
		t.ready = errorOutcome(&t.req, &rrq.ExecutionError{Type: ErrorTypeInvalidRequest, Message: err.Error()})
	} else {
		t.req = req
	}
	t.ctx, t.cancel = context.WithCancelCause(conn.parent)
	if e.opt.EnforceDeadline && t.ready == nil && t.req.Context.Deadline != nil {
		var stop context.CancelFunc
		t.ctx, stop = context.WithDeadline(t.ctx, *t.req.Context.Deadline)
		parentCancel := t.cancel
		t.cancel = func(cause error) { parentCancel(cause); stop() }
	}
	e.mu.Lock()
	t.prev, t.next = e.tasks.prev, &e.tasks
	t.prev.next, e.tasks.prev = t, t
	e.mu.Unlock()
	if conn.ctx.Err() != nil { // ended before the registration: cancelConn missed it
		t.cancel(context.Cause(conn.ctx))
	}
	return t, true
}

func (e *Executor) unregister(t *task) {
	t.cancel(nil)
	e.mu.Lock()
	t.prev.next, t.next.prev = t.next, t.prev
	t.prev, t.next = nil, nil
	e.mu.Unlock()
}

// Cancel applies a cancel request: with a request_id, the matching request of the job
// is cancelled; without, every request of the job. Requests still waiting their turn are
// answered "cancelled" without running. Unknown jobs are a no-op. It reports how many
// requests it cancelled.
func (e *Executor) Cancel(c rrq.CancelRequest) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for t := e.tasks.next; t != &e.tasks; t = t.next {
		if t.req.JobID != c.JobID || (c.RequestID != "" && t.req.RequestID != c.RequestID) {
			continue
		}
		if t.ctx.Err() == nil {
			t.cancel(errCancelFrame)
			n++
		}
	}
	return n
}

func (e *Executor) runTask(t *task) rrq.ExecutionOutcome {
	if t.ready != nil {
		return *t.ready
	}
	if t.ctx.Err() != nil {
		return e.outcome(t.ctx, &t.req, nil, t.ctx.Err())
	}
	return e.Execute(t.ctx, &t.req)
}

// Execute runs the handler for req in ctx and returns the outcome, as serving a request
// frame would (useful to test handlers without a socket).
func (e *Executor) Execute(ctx context.Context, req *rrq.ExecutionRequest) rrq.ExecutionOutcome {
	e.mu.Lock()
	h, ok := e.handlers[req.FunctionName]
	e.mu.Unlock()
	if !ok {
		return *errorOutcome(req, &rrq.ExecutionError{
			Type:    rrq.ErrorTypeHandlerNotFound,
			Message: fmt.Sprintf("no handler registered for %q", req.FunctionName),
		})
	}
	result, err := e.call(ctx, h, req)
	return e.outcome(ctx, req, result, err)
}

type panicError struct {
	value any
}

func (p *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", p.value) }

func (e *Executor) call(ctx context.Context, h Handler, req *rrq.ExecutionRequest) (result any, err error) {
	defer func() {
		if v := recover(); v != nil {
			e.log.Error("executor: handler panicked", "function", req.FunctionName, "request_id", req.RequestID,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			result, err = nil, &panicError{value: v}
		}
	}()
	return h(ctx, req)
}

func errorOutcome(req *rrq.ExecutionRequest, ee *rrq.ExecutionError) *rrq.ExecutionOutcome {
	return &rrq.ExecutionOutcome{JobID: req.JobID, RequestID: req.RequestID, Status: rrq.StatusError, Error: ee}
}

// outcome maps a handler's return to an ExecutionOutcome.
func (e *Executor) outcome(ctx context.Context, req *rrq.ExecutionRequest, result any, err error) rrq.ExecutionOutcome {
	out := rrq.ExecutionOutcome{JobID: req.JobID, RequestID: req.RequestID}
	if err == nil {
		raw, merr := encodeResult(result)
		if merr != nil {
			return *errorOutcome(req, &rrq.ExecutionError{Type: ErrorTypeBadResult, Message: merr.Error()})
		}
		out.Status, out.Result = rrq.StatusSuccess, raw
		return out
	}
	var (
		retry   *RetryError
		timeout *TimeoutError
		typed   *Error
		pe      *panicError
	)
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errCancelFrame):
		out.Status = rrq.StatusError
		out.Error = &rrq.ExecutionError{Type: rrq.ErrorTypeCancelled, Message: "cancelled by the orchestrator"}
	case errors.Is(cause, errShutdown):
		out.Status = rrq.StatusError
		out.Error = &rrq.ExecutionError{Type: rrq.ErrorTypeCancelled, Message: "cancelled: executor shutting down"}
	case errors.As(err, &retry):
		out.Status = rrq.StatusRetry
		if retry.After > 0 {
			s := retry.After.Seconds()
			out.RetryAfterSeconds = &s
		}
		if retry.Err != nil {
			out.Error = &rrq.ExecutionError{Type: "retry", Message: retry.Err.Error()}
		}
	case errors.As(err, &timeout):
		out.Status = rrq.StatusTimeout
		out.Error = &rrq.ExecutionError{Type: "timeout", Message: err.Error()}
	case errors.Is(cause, context.DeadlineExceeded) && e.opt.EnforceDeadline:
		out.Status = rrq.StatusTimeout
		out.Error = &rrq.ExecutionError{Type: "timeout", Message: "deadline exceeded: " + err.Error()}
	case errors.As(err, &pe):
		out.Status = rrq.StatusError
		out.Error = &rrq.ExecutionError{Type: ErrorTypePanic, Message: err.Error()}
	case errors.As(err, &typed):
		out.Status = rrq.StatusError
		typ := typed.Type
		if typ == "" {
			typ = ErrorTypeHandler
		}
		out.Error = &rrq.ExecutionError{Type: typ, Code: typed.Code, Message: typed.Error()}
		if typed.Message != "" {
			out.Error.Message = typed.Message
		}
		if typed.Details != nil {
			if raw, derr := json.Marshal(typed.Details); derr == nil {
				out.Error.Details = raw
			}
		}
	default:
		out.Status = rrq.StatusError
		out.Error = &rrq.ExecutionError{Type: ErrorTypeHandler, Message: err.Error()}
	}
	return out
}

func encodeResult(v any) (json.RawMessage, error) {
	switch r := v.(type) {
	case json.RawMessage:
		if len(r) == 0 {
			return json.RawMessage("null"), nil
		}
		if !json.Valid(r) {
			return nil, errors.New("result is not valid JSON")
		}
		return r, nil
	case nil:
		return json.RawMessage("null"), nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("result cannot be encoded as JSON: %w", err)
	}
	return raw, nil
}
