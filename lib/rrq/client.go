package rrq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of Client and Pool. A non-nil error from Execute always means the executor
// infrastructure failed (the request was not delivered, or its answer was lost or
// malformed); a handler's own failure is an ExecutionOutcome with status "error" and a
// nil Go error. Test with errors.Is.
var (
	// ErrClosed: the client or pool was closed.
	ErrClosed = errors.New("rrq: closed")
	// ErrInvalidRequest: the request is missing a required field.
	ErrInvalidRequest = errors.New("rrq: invalid request")
	// ErrUnavailable: the request was not delivered (could not connect, or the write
	// failed before the frame was complete). It never ran; it is safe to retry.
	ErrUnavailable = errors.New("rrq: executor unavailable, request not delivered")
	// ErrConnectionLost: the connection closed or broke while the request was in flight.
	// The handler may or may not have run.
	ErrConnectionLost = errors.New("rrq: connection to executor lost while request in flight")
	// ErrProtocolViolation: the executor answered with something the protocol does not
	// allow (a bad frame, or an invalid outcome for this request).
	ErrProtocolViolation = errors.New("rrq: executor protocol violation")
	// ErrExecutorCrashed (Pool): the executor process exited while the request was in
	// flight. Comes together with ErrConnectionLost.
	ErrExecutorCrashed = errors.New("rrq: executor process exited while request in flight")
	// ErrExecutorKilled (Pool): the executor process was killed by the orchestrator
	// (KillRequest, KillProcess) while the request was in flight. Comes together with
	// ErrConnectionLost.
	ErrExecutorKilled = errors.New("rrq: executor process killed by the orchestrator while request in flight")
	// ErrNotReady (Pool): no process of the pool became ready to take the request —
	// the pool is unhealthy after a failed start, or none was ready within
	// PoolConfig.ReadyWait. Comes together with ErrUnavailable: the request was not
	// delivered.
	ErrNotReady = errors.New("rrq: no executor process ready")
	// ErrOneConnection (Pool): a process refused a second connection while its first
	// was open, or did not read it (see PoolConfig.AcceptWait): the executor accepts
	// one connection at a time and needs ClientOptions.Connections 1.
	ErrOneConnection = errors.New("rrq: the executor serves one connection at a time (it needs Connections 1)")
)

// ViolationKind names a protocol violation seen by a Client.
type ViolationKind string

// The violations a Client detects.
const (
	// A frame that cannot be decoded (zero length, over the limit, invalid UTF-8, invalid
	// JSON, not an envelope, unknown type, or a response payload that does not decode).
	// The connection is closed.
	ViolationBadFrame ViolationKind = "bad_frame"
	// The executor closed the connection in the middle of a frame.
	ViolationTruncatedFrame ViolationKind = "truncated_frame"
	// A response whose request_id is not in flight on that connection. Dropped.
	ViolationUnknownRequestID ViolationKind = "unknown_request_id"
	// A second response for a request already answered. Dropped.
	ViolationDuplicateResponse ViolationKind = "duplicate_response"
	// A "request" or "cancel" frame sent by the executor. Dropped.
	ViolationUnexpectedFrame ViolationKind = "unexpected_frame"
	// A response for the request in flight that is not a valid outcome (bad status,
	// mismatched job_id, …). The request fails with ErrProtocolViolation.
	ViolationInvalidOutcome ViolationKind = "invalid_outcome"
)

// Violation describes one protocol violation, for ClientOptions.OnViolation.
type Violation struct {
	Endpoint  Endpoint
	Kind      ViolationKind
	RequestID string // when known
	Err       error
}

// ClientOptions configure a Client. The zero value is usable.
type ClientOptions struct {
	// MaxInFlight is the number of requests that may be in flight at once. Default 4.
	MaxInFlight int
	// Pipeline is the number of requests that may be in flight on one connection
	// (default 1: each request on its own connection). Executors answer one request at
	// a time per connection, in order, so a request waits behind those sent before it
	// on its connection: more than 1 suits short handlers, and saves system calls and
	// wake-ups (requests and responses that meet on a connection share a write). A
	// request goes to the connection with room that was used last; one that finds none
	// opens a new connection.
	Pipeline int
	// MaxFrameSize limits the payload of frames read and written. Default 16 MiB.
	MaxFrameSize int
	// DialTimeout bounds connecting to the executor. Default 5s.
	DialTimeout time.Duration
	// WriteTimeout bounds writing one frame. Default 10s.
	WriteTimeout time.Duration
	// AbandonTimeout: when a caller's ctx ends before the response arrives, Execute
	// returns at once but the connection (and its in-flight slot, since the executor is
	// still busy) is kept until the late response arrives, at most this long; then the
	// connection is closed. Default 1 minute.
	AbandonTimeout time.Duration
	// Logger receives protocol violations and connection failures. Default slog.Default().
	Logger *slog.Logger
	// OnViolation, if set, is called (synchronously, from the connection's reader) for
	// every protocol violation. It must not block.
	OnViolation func(Violation)
	// Connections limits the connections to the executor: 0 (default) opens one per
	// request in flight (Pipeline) and sends cancels on short-lived connections of
	// their own; 1 keeps ONE persistent connection that carries every request
	// (Pipeline becomes MaxInFlight) and every cancel — for executors that accept one
	// connection at a time. A cancel with no connection open fails (ErrUnavailable).
	Connections int
}

func (o *ClientOptions) setDefaults() {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 4
	}
	if o.Pipeline <= 0 {
		o.Pipeline = 1
	}
	if o.Connections < 0 || o.Connections > 1 {
		o.Connections = 0
	}
	if o.Connections == 1 {
		o.Pipeline = o.MaxInFlight
	}
	if o.MaxFrameSize <= 0 {
		o.MaxFrameSize = DefaultMaxFrameSize
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.AbandonTimeout <= 0 {
		o.AbandonTimeout = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// ClientStats are a Client's counters (totals since creation) and gauges.
type ClientStats struct {
	Requests           uint64 // requests written to the executor
	Outcomes           uint64 // valid outcomes returned to callers
	Failures           uint64 // requests that failed after being written (connection lost, violation)
	NotDelivered       uint64 // Execute calls whose request never reached the executor: ErrUnavailable, or their ctx ended first
	Abandoned          uint64 // requests whose caller's ctx ended before the response
	LateResponses      uint64 // responses that arrived after their caller gave up (dropped)
	Dials              uint64 // connections opened
	DialErrors         uint64
	ConnectionsLost    uint64 // connections that closed or broke with a request in flight
	BadFrames          uint64 // ViolationBadFrame
	TruncatedFrames    uint64 // ViolationTruncatedFrame
	UnknownResponses   uint64 // ViolationUnknownRequestID
	DuplicateResponses uint64 // ViolationDuplicateResponse
	UnexpectedFrames   uint64 // ViolationUnexpectedFrame
	InvalidOutcomes    uint64 // ViolationInvalidOutcome
	CancelsSent        uint64
	CancelErrors       uint64
	Writes             uint64 // write system calls (a call carries every frame queued for it)

	InFlight        int // requests holding a slot now (including abandoned ones)
	OpenConnections int
	IdleConnections int
}

type clientCounters struct {
	requests, outcomes, failures, notDelivered, abandoned, late   atomic.Uint64
	dials, dialErrors, connsLost                                  atomic.Uint64
	badFrames, truncated, unknown, duplicate, unexpected, invalid atomic.Uint64
	cancels, cancelErrors, writes                                 atomic.Uint64
}

// Client talks to ONE executor endpoint. It sends each request on a connection with
// fewer than Pipeline requests in flight (opening one if none has room), and
// correlates the response by request_id. It is safe for concurrent use.
type Client struct {
	ep  Endpoint
	opt ClientOptions
	log *slog.Logger
	cnt clientCounters

	mu        sync.Mutex
	closed    bool
	inFlight  int
	slotFreed wake    // a slot freed (or Close)
	idle      []*conn // connections with room for another request
	conns     map[*conn]struct{}
	active    map[string]struct{} // request_ids in flight
	onRelease func()              // Pool: capacity changed
	onOutcome func()              // Pool: a valid outcome arrived (the process works)
	single    *conn               // Connections == 1: the one connection, while open
	dialMu    sync.Mutex          // Connections == 1: one dial at a time

	recentMu sync.Mutex
	recent   recentIDs // request_ids recently answered, to spot duplicates
}

// NewClient returns a client for the executor at ep. It does not connect yet.
func NewClient(ep Endpoint, opt ClientOptions) (*Client, error) {
	if err := ep.Validate(); err != nil {
		return nil, err
	}
	opt.setDefaults()
	return &Client{
		ep:     ep,
		opt:    opt,
		log:    opt.Logger.With("endpoint", ep.String()),
		conns:  map[*conn]struct{}{},
		active: map[string]struct{}{},
		recent: newRecentIDs(4096),
	}, nil
}

// Endpoint returns the executor endpoint of the client.
func (c *Client) Endpoint() Endpoint { return c.ep }

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats {
	s := ClientStats{
		Requests: c.cnt.requests.Load(), Outcomes: c.cnt.outcomes.Load(), Failures: c.cnt.failures.Load(),
		NotDelivered: c.cnt.notDelivered.Load(), Abandoned: c.cnt.abandoned.Load(), LateResponses: c.cnt.late.Load(),
		Dials: c.cnt.dials.Load(), DialErrors: c.cnt.dialErrors.Load(), ConnectionsLost: c.cnt.connsLost.Load(),
		BadFrames: c.cnt.badFrames.Load(), TruncatedFrames: c.cnt.truncated.Load(),
		UnknownResponses: c.cnt.unknown.Load(), DuplicateResponses: c.cnt.duplicate.Load(),
		UnexpectedFrames: c.cnt.unexpected.Load(), InvalidOutcomes: c.cnt.invalid.Load(),
		CancelsSent: c.cnt.cancels.Load(), CancelErrors: c.cnt.cancelErrors.Load(), Writes: c.cnt.writes.Load(),
	}
	c.mu.Lock()
	s.InFlight, s.OpenConnections, s.IdleConnections = c.inFlight, len(c.conns), len(c.idle)
	c.mu.Unlock()
	return s
}

// Close closes all connections. Requests in flight fail with ErrConnectionLost and
// ErrClosed; later calls fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.slotFreed.close()
	conns := make([]*conn, 0, len(c.conns))
	for cn := range c.conns {
		conns = append(conns, cn)
	}
	c.mu.Unlock()
	for _, cn := range conns {
		cn.fail(ErrClosed)
	}
	return nil
}

// PrepareRequest fills the defaults Execute fills (protocol_version "1", a new
// request_id, context.job_id = job_id, attempt 1, enqueue_time now) and validates the
// request. Callers that need the request_id before Execute (e.g. to cancel or kill it
// later) call it first.
func PrepareRequest(req *ExecutionRequest) error {
	if req.ProtocolVersion == "" {
		req.ProtocolVersion = ProtocolVersion
	}
	if req.RequestID == "" {
		req.RequestID = NewUUID()
	}
	if req.Context.JobID == "" {
		req.Context.JobID = req.JobID
	}
	if req.Context.Attempt == 0 {
		req.Context.Attempt = 1
	}
	if req.Context.EnqueueTime.IsZero() {
		req.Context.EnqueueTime = time.Now().UTC()
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	switch {
	case req.Context.JobID != req.JobID:
		return fmt.Errorf("%w: context.job_id %q differs from job_id %q", ErrInvalidRequest, req.Context.JobID, req.JobID)
	case req.Context.Attempt < 1:
		return fmt.Errorf("%w: context.attempt %d is not 1-based", ErrInvalidRequest, req.Context.Attempt)
	}
	return nil
}

// Execute sends req to the executor and waits for its outcome. See PrepareRequest for
// the defaults it fills. It waits for a free in-flight slot, then uses an idle
// connection or opens a new one. If ctx ends first it returns ctx's error at once (the
// connection waits for the late response; see ClientOptions.AbandonTimeout).
//
// A nil error means the executor answered with a valid outcome for this request,
// whatever its status. Errors: ErrInvalidRequest, ErrClosed, ErrUnavailable (not
// delivered), ErrConnectionLost, ErrProtocolViolation, or ctx's error.
func (c *Client) Execute(ctx context.Context, req ExecutionRequest) (ExecutionOutcome, error) {
	if err := PrepareRequest(&req); err != nil {
		return ExecutionOutcome{}, err
	}
	if err := c.acquire(ctx); err != nil {
		return ExecutionOutcome{}, err
	}
	return c.executeAcquired(ctx, req)
}

// acquire takes an in-flight slot, waiting for one.
func (c *Client) acquire(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return fmt.Errorf("%w: client for executor %s", ErrClosed, c.ep)
		}
		if c.inFlight < c.opt.MaxInFlight {
			c.inFlight++
			c.mu.Unlock()
			return nil
		}
		ch := c.slotFreed.wait()
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryAcquire takes a slot if one is free.
func (c *Client) tryAcquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.inFlight >= c.opt.MaxInFlight {
		return false
	}
	c.inFlight++
	return true
}

func (c *Client) release() {
	c.mu.Lock()
	c.inFlight--
	c.slotFreed.fire()
	f := c.onRelease
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

// spare returns the number of free slots (0 when closed).
func (c *Client) spare() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0
	}
	return c.opt.MaxInFlight - c.inFlight
}

type callResult struct {
	out ExecutionOutcome
	err error
}

type call struct {
	reqID, jobID string
	done         chan callResult // buffered(1); exactly one delivery per attempt
	abandoned    bool            // guarded by the conn's mu
	abandonTimer *time.Timer
}

// executeAcquired runs a prepared request with a slot already held. It releases the slot
// (or hands it to an abandoned connection, which releases it later).
func (c *Client) executeAcquired(ctx context.Context, req ExecutionRequest) (ExecutionOutcome, error) {
	frame, err := requestFrame(&req)
	if err != nil {
		c.release()
		return ExecutionOutcome{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if len(frame)-4 > c.opt.MaxFrameSize {
		c.release()
		return ExecutionOutcome{}, fmt.Errorf("%w: request is %d bytes, limit %d", ErrFrameTooLarge, len(frame)-4, c.opt.MaxFrameSize)
	}
	c.mu.Lock()
	if _, dup := c.active[req.RequestID]; dup {
		c.mu.Unlock()
		c.release()
		return ExecutionOutcome{}, fmt.Errorf("%w: request_id %s is already in flight", ErrInvalidRequest, req.RequestID)
	}
	c.active[req.RequestID] = struct{}{}
	c.mu.Unlock()

	cl := &call{reqID: req.RequestID, jobID: req.JobID, done: make(chan callResult, 1)}
	var cn *conn
	for attempt := 0; ; attempt++ {
		var reused bool
		cn, reused, err = c.getConn(ctx, cl)
		if err != nil {
			c.finish(cl, nil)
			c.cnt.notDelivered.Add(1)
			if ctx.Err() != nil {
				return ExecutionOutcome{}, ctx.Err()
			}
			if errors.Is(err, errConnClosing) {
				return ExecutionOutcome{}, fmt.Errorf("%w: executor %s keeps closing new connections", ErrUnavailable, c.ep)
			}
			return ExecutionOutcome{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		werr := cn.write(ctx, frame)
		if werr == nil {
			break
		}
		if unsent := (*unsentError)(nil); errors.As(werr, &unsent) {
			// Never written, and the connection is sound: the call leaves it.
			cn.mu.Lock()
			if cn.pending[cl.reqID] == cl {
				delete(cn.pending, cl.reqID)
			}
			cn.mu.Unlock()
			c.finish(cl, cn)
			c.cnt.notDelivered.Add(1)
			return ExecutionOutcome{}, unsent.cause
		}
		// The frame was not completely written, so the executor cannot have run it.
		cn.fail(fmt.Errorf("write request: %w", werr))
		<-cl.done
		if reused && attempt < 2 && ctx.Err() == nil {
			continue // a stale pooled connection: try a fresh one
		}
		c.finish(cl, nil)
		c.cnt.notDelivered.Add(1)
		if ctx.Err() != nil {
			return ExecutionOutcome{}, ctx.Err()
		}
		return ExecutionOutcome{}, fmt.Errorf("%w: executor %s: write request %s: %v", ErrUnavailable, c.ep, req.RequestID, werr)
	}
	c.cnt.requests.Add(1)

	select {
	case res := <-cl.done:
		return c.complete(cn, cl, res)
	case <-ctx.Done():
	}
	cn.mu.Lock()
	if cn.pending[cl.reqID] == cl {
		// Still waiting: leave the connection with the executor's answer-to-be.
		cl.abandoned = true
		cl.abandonTimer = time.AfterFunc(c.opt.AbandonTimeout, func() {
			cn.failIfPending(cl, errors.New("abandoned request's response did not arrive within AbandonTimeout"))
		})
		cn.mu.Unlock()
		c.cnt.abandoned.Add(1)
		return ExecutionOutcome{}, fmt.Errorf("rrq: request %s to executor %s: %w", req.RequestID, c.ep, ctx.Err())
	}
	cn.mu.Unlock()
	// The answer arrived at the same moment: use it.
	return c.complete(cn, cl, <-cl.done)
}

func (c *Client) complete(cn *conn, cl *call, res callResult) (ExecutionOutcome, error) {
	if res.err != nil {
		c.cnt.failures.Add(1)
	} else {
		c.cnt.outcomes.Add(1)
	}
	c.finish(cl, cn)
	return res.out, res.err
}

// finish ends a request: forgets its id, puts the connection (if still healthy) back
// on the list of those with room and releases the slot.
func (c *Client) finish(cl *call, cn *conn) {
	c.mu.Lock()
	delete(c.active, cl.reqID)
	if cn != nil && !c.closed && !cn.listed && cn.usable() {
		cn.listed = true
		c.idle = append(c.idle, cn)
	}
	c.mu.Unlock()
	c.release()
}

// errConnClosing: every connection getConn tried closed under it.
var errConnClosing = errors.New("connection closed while taking it")

// getConn puts cl in flight on a connection with room (reused) or on a new one.
func (c *Client) getConn(ctx context.Context, cl *call) (*conn, bool, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, ErrClosed
	}
	for n := len(c.idle); n > 0; n = len(c.idle) {
		cn := c.idle[n-1]
		ok, full := cn.begin(cl)
		if !ok || full {
			cn.listed = false
			c.idle = c.idle[:n-1]
		}
		if ok {
			c.mu.Unlock()
			return cn, true, nil
		}
	}
	c.mu.Unlock()
	if c.opt.Connections == 1 {
		// One connection at most: dial only when none is open (one dial at a time).
		c.dialMu.Lock()
		defer c.dialMu.Unlock()
		c.mu.Lock()
		if cn := c.single; cn != nil {
			ok, _ := cn.begin(cl)
			c.mu.Unlock()
			if ok {
				return cn, true, nil
			}
			return nil, false, errConnClosing
		}
		c.mu.Unlock()
	}
	for attempt := 0; attempt < 3; attempt++ {
		nc, err := c.dial(ctx)
		if err != nil {
			return nil, false, err
		}
		cn, ok := c.addConn(nc, cl)
		if cn == nil {
			return nil, false, ErrClosed
		}
		if ok {
			return cn, false, nil
		}
		if c.opt.Connections == 1 {
			break
		}
	}
	return nil, false, errConnClosing
}

// addConn registers a new connection (with cl in flight on it, if not nil) and starts
// its reader; nil when the client is closed (nc is then closed).
func (c *Client) addConn(nc net.Conn, cl *call) (*conn, bool) {
	cn := &conn{c: c, nc: nc, pending: make(map[string]*call, c.opt.Pipeline)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return nil, false
	}
	c.conns[cn] = struct{}{}
	if c.opt.Connections == 1 {
		if old := c.single; old != nil {
			// Not expected (one dial at a time); the newer connection wins.
			defer old.fail(errors.New("replaced by a newer connection"))
		}
		c.single = cn
	}
	ok, full := true, false
	if cl != nil {
		ok, full = cn.begin(cl)
	}
	if ok && !full {
		cn.listed = true
		c.idle = append(c.idle, cn)
	}
	c.mu.Unlock()
	go cn.readLoop()
	return cn, ok
}

// Adopt makes nc — a connection the caller opened to this client's executor, e.g. the
// one that found a fresh process accepting — the client's own: requests use it before
// opening any other. No connection is opened only to learn that a process is ready.
func (c *Client) Adopt(nc net.Conn) error {
	if cn, _ := c.addConn(nc, nil); cn == nil {
		return fmt.Errorf("%w: client for executor %s", ErrClosed, c.ep)
	}
	c.cnt.dials.Add(1)
	return nil
}

func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: c.opt.DialTimeout}
	nc, err := c.ep.Dial(ctx, &d)
	if err != nil {
		c.cnt.dialErrors.Add(1)
		return nil, fmt.Errorf("connect to executor %s: %w", c.ep, err)
	}
	c.cnt.dials.Add(1)
	return nc, nil
}

// Cancel sends a cancel frame for jobID (and, if not empty, only its request
// requestID) on a new short-lived connection, as the protocol allows. It does not
// wait for the cancelled request's outcome: that arrives, as usual, on the request's
// own connection and is returned by its Execute.
func (c *Client) Cancel(ctx context.Context, jobID, requestID string, hardKill bool) error {
	err := c.cancel(ctx, jobID, requestID, hardKill)
	if err != nil {
		c.cnt.cancelErrors.Add(1)
		return err
	}
	c.cnt.cancels.Add(1)
	return nil
}

func (c *Client) cancel(ctx context.Context, jobID, requestID string, hardKill bool) error {
	if jobID == "" {
		return fmt.Errorf("%w: cancel without job_id", ErrInvalidRequest)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: client for executor %s", ErrClosed, c.ep)
	}
	if c.opt.Connections == 1 {
		// The one connection carries the cancel; with none open the request it
		// would cancel is not running here either.
		c.mu.Lock()
		cn := c.single
		c.mu.Unlock()
		if cn == nil {
			return fmt.Errorf("%w: cancel: no connection open to executor %s", ErrUnavailable, c.ep)
		}
		env, err := NewEnvelope(&CancelRequest{ProtocolVersion: ProtocolVersion, JobID: jobID, RequestID: requestID, HardKill: hardKill})
		if err != nil {
			return fmt.Errorf("%w: cancel: %v", ErrInvalidRequest, err)
		}
		frame, err := EncodeFrame(env)
		if err != nil {
			return err
		}
		if err := cn.write(ctx, frame); err != nil {
			cn.fail(fmt.Errorf("write cancel: %w", err))
			return fmt.Errorf("%w: cancel: write to executor %s: %v", ErrUnavailable, c.ep, err)
		}
		return nil
	}
	nc, err := c.dial(ctx)
	if err != nil {
		return fmt.Errorf("%w: cancel: %v", ErrUnavailable, err)
	}
	defer nc.Close()
	deadline := time.Now().Add(c.opt.WriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = nc.SetWriteDeadline(deadline)
	err = WriteMessage(nc, &CancelRequest{ProtocolVersion: ProtocolVersion, JobID: jobID, RequestID: requestID, HardKill: hardKill})
	if err != nil {
		return fmt.Errorf("%w: cancel: write to executor %s: %v", ErrUnavailable, c.ep, err)
	}
	return nil
}

func (c *Client) violation(v Violation) {
	switch v.Kind {
	case ViolationBadFrame:
		c.cnt.badFrames.Add(1)
	case ViolationTruncatedFrame:
		c.cnt.truncated.Add(1)
	case ViolationUnknownRequestID:
		c.cnt.unknown.Add(1)
	case ViolationDuplicateResponse:
		c.cnt.duplicate.Add(1)
	case ViolationUnexpectedFrame:
		c.cnt.unexpected.Add(1)
	case ViolationInvalidOutcome:
		c.cnt.invalid.Add(1)
	}
	v.Endpoint = c.ep
	c.log.Warn("rrq executor protocol violation", "kind", string(v.Kind), "request_id", v.RequestID, "err", v.Err)
	if c.opt.OnViolation != nil {
		c.opt.OnViolation(v)
	}
}

// conn is one connection to the executor, carrying up to Pipeline requests at a time.
// Its reader goroutine runs for the connection's whole life, also while it is idle, so
// a closed or misbehaving connection is noticed at once.
type conn struct {
	c  *Client
	nc net.Conn

	listed bool // on c.idle; guarded by c.mu

	mu      sync.Mutex
	pending map[string]*call // the requests in flight by request_id; whoever removes one delivers its result
	closed  bool

	wmu     sync.Mutex
	writing bool      // a writer is at work; others queue their frames in wq
	wq      []*queued // frames waiting for the writer
}

// queued is a frame waiting for the connection's writer, and where its result goes.
// They are reused (queuedPool): a call's frame took two allocations, its struct and
// its channel; done is empty again once its result was taken.
type queued struct {
	frame []byte
	done  chan error
}

var queuedPool = sync.Pool{New: func() any { return &queued{done: make(chan error, 1)} }}

func newQueued(frame []byte) *queued {
	q := queuedPool.Get().(*queued)
	q.frame = frame
	return q
}

// wait takes the frame's result and puts q back for reuse.
func (q *queued) wait() error {
	err := <-q.done
	q.release()
	return err
}

// release puts q back for reuse; its result, if it had one, was taken.
func (q *queued) release() {
	q.frame = nil
	queuedPool.Put(q)
}

// unqueue takes q off the frames waiting for the writer: false when the writer took
// it already (it is being written, or was).
func (cn *conn) unqueue(q *queued) bool {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	for i, x := range cn.wq {
		if x == q {
			cn.wq = append(cn.wq[:i], cn.wq[i+1:]...)
			return true
		}
	}
	return false
}

// unsentError: a request frame was never written (its call's context ended while it
// waited for the connection's writer); the connection is sound.
type unsentError struct{ cause error }

func (e *unsentError) Error() string { return "request not sent: " + e.cause.Error() }
func (e *unsentError) Unwrap() error { return e.cause }

// begin puts cl in flight on the connection: ok is false when it is closed; full says
// it has no room for another request now.
func (cn *conn) begin(cl *call) (ok, full bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return false, true
	}
	cn.pending[cl.reqID] = cl
	return true, len(cn.pending) >= cn.c.opt.Pipeline
}

func (cn *conn) usable() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return !cn.closed && len(cn.pending) < cn.c.opt.Pipeline
}

// write writes a request frame. With Pipeline > 1 several callers may write at once:
// the first becomes the writer and writes the frames queued meanwhile together, in one
// system call. A nil error means this frame was written whole.
func (cn *conn) write(ctx context.Context, frame []byte) error {
	if cn.c.opt.Pipeline == 1 && cn.c.opt.Connections != 1 { // one connection: cancels share it, so frames queue
		deadline := time.Now().Add(cn.c.opt.WriteTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		_ = cn.nc.SetWriteDeadline(deadline)
		_, err := cn.nc.Write(frame)
		_ = cn.nc.SetWriteDeadline(time.Time{})
		return err
	}
	cn.wmu.Lock()
	if cn.writing {
		q := newQueued(frame)
		cn.wq = append(cn.wq, q)
		cn.wmu.Unlock()
		select {
		case err := <-q.done:
			q.release()
			return err
		case <-ctx.Done():
		}
		// The call's context ended while its frame waited for the writer, which may be
		// stuck behind an executor that reads nothing (up to WriteTimeout): a frame
		// still queued is taken back, unsent; one the writer took is being written,
		// and its result is waited for.
		if cn.unqueue(q) {
			q.release()
			return &unsentError{cause: ctx.Err()}
		}
		return q.wait()
	}
	cn.writing = true
	cn.wmu.Unlock()
	// Let the callers that are ready to run (a claim hands out many jobs at once) queue
	// their frames first: they go out with this one, in one system call (and the
	// executor reads them in one wake-up). Frames that come while one is written go
	// out together next.
	runtime.Gosched()
	mine := newQueued(frame)
	batch := []*queued{mine}
	var err error
	for {
		cn.wmu.Lock()
		batch = append(batch, cn.wq...)
		cn.wq = nil
		if len(batch) == 0 {
			cn.writing = false
			cn.wmu.Unlock()
			return mine.wait()
		}
		cn.wmu.Unlock()
		var n int64
		if err == nil {
			n, err = cn.writeFrames(framesOf(batch))
		}
		deliver(batch, n, err)
		batch = batch[:0]
	}
}

func framesOf(qs []*queued) [][]byte {
	frames := make([][]byte, len(qs))
	for i, q := range qs {
		frames[i] = q.frame
	}
	return frames
}

// deliver tells the callers of queued frames written in order whether theirs went out
// (n: the bytes of them written). A frame written whole before a failure was
// delivered: its caller waits for the answer (or the connection's loss), it must not
// send it again.
func deliver(qs []*queued, n int64, err error) {
	for _, q := range qs {
		if n >= int64(len(q.frame)) {
			n -= int64(len(q.frame))
			q.done <- nil
			continue
		}
		n = 0
		if err == nil {
			err = io.ErrShortWrite
		}
		q.done <- err
	}
}

// writeFrames writes frames in one system call (writev) and returns the bytes written.
func (cn *conn) writeFrames(frames [][]byte) (int64, error) {
	cn.c.cnt.writes.Add(1)
	_ = cn.nc.SetWriteDeadline(time.Now().Add(cn.c.opt.WriteTimeout))
	bufs := net.Buffers(frames)
	n, err := bufs.WriteTo(cn.nc)
	_ = cn.nc.SetWriteDeadline(time.Time{})
	return n, err
}

func (cn *conn) readLoop() {
	// Buffered: a frame's header and payload (and frames that arrive together) take
	// one read call, not two each.
	br := bufio.NewReaderSize(cn.nc, 32<<10)
	for {
		env, err := ReadFrame(br, cn.c.opt.MaxFrameSize)
		if err != nil {
			cn.readFailed(err)
			return
		}
		if !cn.handle(env) {
			return
		}
	}
}

// readFailed classifies a read error, reports violations and fails the connection.
func (cn *conn) readFailed(err error) {
	cn.mu.Lock()
	reqID, closed := "", cn.closed
	if len(cn.pending) == 1 {
		for id := range cn.pending {
			reqID = id
		}
	}
	cn.mu.Unlock()
	if closed {
		return // we closed it ourselves
	}
	switch {
	case errors.Is(err, io.EOF):
		err = errors.New("executor closed the connection")
	case errors.Is(err, ErrTruncatedFrame):
		cn.c.violation(Violation{Kind: ViolationTruncatedFrame, RequestID: reqID, Err: err})
	case IsFrameError(err):
		cn.c.violation(Violation{Kind: ViolationBadFrame, RequestID: reqID, Err: err})
		err = fmt.Errorf("%w: %w", ErrProtocolViolation, err)
	}
	cn.fail(err)
}

// handle processes one frame; false means the connection was closed.
func (cn *conn) handle(env Envelope) bool {
	c := cn.c
	if env.Type != TypeResponse {
		c.violation(Violation{Kind: ViolationUnexpectedFrame, Err: fmt.Errorf("executor sent a %q frame", env.Type)})
		return true
	}
	out, err := env.Outcome()
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrInvalidEnvelope, err)
		c.violation(Violation{Kind: ViolationBadFrame, Err: err})
		cn.fail(fmt.Errorf("%w: %w", ErrProtocolViolation, err))
		return false
	}
	cn.mu.Lock()
	cl := cn.pending[out.RequestID]
	if cl == nil {
		cn.mu.Unlock()
		if c.seenRecently(out.RequestID) {
			c.violation(Violation{Kind: ViolationDuplicateResponse, RequestID: out.RequestID,
				Err: errors.New("second response for a request already answered; dropped")})
		} else {
			c.violation(Violation{Kind: ViolationUnknownRequestID, RequestID: out.RequestID,
				Err: errors.New("response for a request_id not in flight on this connection; dropped")})
		}
		return true
	}
	c.remember(out.RequestID)
	delete(cn.pending, out.RequestID)
	abandoned := cl.abandoned
	cn.mu.Unlock()

	res := callResult{out: out}
	verr := out.Validate()
	if verr == nil && out.JobID != cl.jobID {
		verr = fmt.Errorf("response job_id %q does not match the request's job_id %q", out.JobID, cl.jobID)
	}
	if verr != nil {
		c.violation(Violation{Kind: ViolationInvalidOutcome, RequestID: cl.reqID, Err: verr})
		res.err = fmt.Errorf("%w: executor %s, request %s: %v", ErrProtocolViolation, c.ep, cl.reqID, verr)
	}
	if verr == nil && c.onOutcome != nil {
		c.onOutcome()
	}
	if abandoned {
		cl.abandonTimer.Stop()
		c.cnt.late.Add(1)
		c.log.Info("rrq late response dropped (caller gave up)", "request_id", cl.reqID, "status", string(out.Status))
		c.finish(cl, cn)
		return true
	}
	cl.done <- res
	return true
}

// failIfPending fails the connection if cl is still the request in flight on it.
func (cn *conn) failIfPending(cl *call, err error) {
	cn.mu.Lock()
	still := cn.pending[cl.reqID] == cl
	cn.mu.Unlock()
	if still {
		cn.fail(err)
	}
}

// fail closes the connection; the request in flight, if any, fails with
// ErrConnectionLost wrapping cause.
func (cn *conn) fail(cause error) {
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return
	}
	cn.closed = true
	calls := make([]*call, 0, len(cn.pending))
	abandoned := make([]bool, 0, len(cn.pending))
	for _, cl := range cn.pending {
		calls = append(calls, cl)
		abandoned = append(abandoned, cl.abandoned)
	}
	cn.pending = nil
	cn.mu.Unlock()
	_ = cn.nc.Close()

	c := cn.c
	c.mu.Lock()
	delete(c.conns, cn)
	if c.single == cn {
		c.single = nil
	}
	if cn.listed {
		cn.listed = false
		for i, x := range c.idle {
			if x == cn {
				c.idle = append(c.idle[:i], c.idle[i+1:]...)
				break
			}
		}
	}
	c.mu.Unlock()
	if len(calls) == 0 {
		return
	}
	c.cnt.connsLost.Add(1)
	for i, cl := range calls {
		if abandoned[i] {
			cl.abandonTimer.Stop()
			c.log.Info("rrq connection of an abandoned request closed", "request_id", cl.reqID, "cause", cause)
			c.finish(cl, nil)
			continue
		}
		err := fmt.Errorf("%w: executor %s, request %s: %w", ErrConnectionLost, c.ep, cl.reqID, cause)
		if !errors.Is(cause, ErrClosed) && !errors.Is(cause, net.ErrClosed) {
			c.log.Warn("rrq connection lost with a request in flight", "request_id", cl.reqID, "err", cause)
		}
		cl.done <- callResult{err: err}
	}
}

// remember and seenRecently are called by connections' readers with the connection's
// lock held: recent has a lock of its own (c.mu is taken before a connection's lock).
func (c *Client) remember(id string) {
	c.recentMu.Lock()
	c.recent.add(id)
	c.recentMu.Unlock()
}

func (c *Client) seenRecently(id string) bool {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	return c.recent.has(id)
}

// recentIDs is a bounded set of the last n ids added: a ring, without an index. An
// add (one per answered call) is a store; the lookup (has) walks the ring, which only a
// response for a request not in flight asks for (to tell a duplicate from an unknown
// id, a protocol violation): a map kept beside the ring cost a lookup, a delete and an
// insert on every call.
type recentIDs struct {
	ring []string
	next int
}

func newRecentIDs(n int) recentIDs {
	return recentIDs{ring: make([]string, n)}
}

func (r *recentIDs) add(id string) {
	r.ring[r.next] = id
	r.next = (r.next + 1) % len(r.ring)
}

func (r *recentIDs) has(id string) bool {
	return id != "" && slices.Contains(r.ring, id)
}
