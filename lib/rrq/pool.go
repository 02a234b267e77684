package rrq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Transport selects how a Pool's executor processes listen.
type Transport string

// The transports of protocol v1.
const (
	TransportUnix Transport = "unix" // RRQ_EXECUTOR_SOCKET=<dir>/<name>-<i>.sock
	TransportTCP  Transport = "tcp"  // RRQ_EXECUTOR_TCP_SOCKET=127.0.0.1:<port>, a distinct port per process
)

// PoolConfig configures a Pool.
type PoolConfig struct {
	// Name names the executor (logs, socket file names). Required.
	Name string
	// Command is the executor's argv. Required.
	Command []string
	// Dir is the processes' working directory (default: the caller's).
	Dir string
	// Env holds NAME=value additions to the inherited environment. RRQ_EXECUTOR_SOCKET
	// and RRQ_EXECUTOR_TCP_SOCKET are always set by the pool.
	Env []string
	// CleanEnv: the processes get Env (and the socket variable) only, nothing of the
	// caller's environment.
	CleanEnv bool
	// Launch starts each prepared process in place of its own start (the runner's
	// sandbox: lib/sandbox Job.Launch, which makes it die with the runner); waited is
	// called once the process has been waited for. Default: a process group of its own
	// with the parent-death signal.
	Launch func(cmd *exec.Cmd) (waited func(), err error)
	// Size is the number of processes. Default 1.
	Size int
	// Transport: TransportUnix (default) or TransportTCP.
	Transport Transport
	// SocketDir holds the Unix sockets. Default: a new temporary directory, removed on Close.
	SocketDir string
	// TCPHost is the loopback host for TCP executors. Default 127.0.0.1.
	TCPHost string
	// TCPBasePort: process i listens on TCPBasePort+i. 0 picks a free port per process.
	TCPBasePort int
	// Client configures each process's Client; Client.MaxInFlight is the per-process
	// in-flight limit (default 4).
	Client ClientOptions
	// StartupTimeout bounds the wait for a process to accept connections (and, with
	// Connections 0, to serve a second one: AcceptWait). Default 10s.
	StartupTimeout time.Duration
	// ReadyWait bounds how long Execute waits for a ready process while the pool has
	// none (each is starting, or waiting to restart): the call then fails with
	// ErrNotReady. A call finding the pool unhealthy after a failed start fails at
	// once. Waits for a free slot of a ready process are not bounded. Default
	// StartupTimeout.
	ReadyWait time.Duration
	// AcceptWait: with Client.Connections 0 (a connection per request in flight, cancels
	// on connections of their own) a process must serve a second connection while its
	// first is open. At each start the pool sends a cancel frame for no job (a no-op)
	// on the first connection and, once the process has read it, on a second one; a
	// process that refuses the second connection, or has not read its frame within
	// AcceptWait, fails its start with ErrOneConnection instead of leaving requests
	// waiting for ever on a connection it will not accept. Default 5s: an executor that
	// serves many connections reads it within milliseconds, even on a loaded host.
	AcceptWait time.Duration
	// StopGrace is the time between SIGTERM and SIGKILL on Close. Default 5s.
	StopGrace time.Duration
	// RestartBackoff is the first delay before restarting a process that died; it
	// doubles up to RestartBackoffMax (default 100ms and 10s). A process that ran for
	// longer than RestartBackoffMax resets it; a process killed by the pool restarts at once.
	RestartBackoff    time.Duration
	RestartBackoffMax time.Duration
	// CrashWait is how long Execute waits, after losing its connection, for the process
	// to exit, to tell a crash (ErrExecutorCrashed) from a dropped connection. Default 2s.
	CrashWait time.Duration
	// Stdout and Stderr receive the processes' output. Default os.Stderr.
	Stdout, Stderr io.Writer
	// Logger receives lifecycle events. Default slog.Default().
	Logger *slog.Logger
	// OnRestart, if set, is called when process index is about to be restarted, with
	// why it stopped and whether that counts as a crash (a failed start, or an exit
	// the pool did not ask for — not a clean exit after its connection closed). It
	// must not block.
	OnRestart func(index int, reason error, crash bool)
	// CrashLoop is the number of crashes in a row (no outcome from the process in
	// between, and no run longer than RestartBackoffMax) after which the pool is
	// unhealthy (Healthy); it is healthy again when a process answers. Default 3.
	CrashLoop int
	// OnHealth, if set, is called when the pool becomes unhealthy (with the last
	// crash) or healthy again (nil). It must not block.
	OnHealth func(healthy bool, reason error)
}

// Pool runs Size executor processes of one executor, restarts those that die, and
// routes requests to a process with a free in-flight slot.
type Pool struct {
	cfg     PoolConfig
	log     *slog.Logger
	procs   []*proc
	tmpDir  string // SocketDir we created
	closing chan struct{}
	wg      sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	changed  wake                // capacity may have changed
	requests map[string]reqEntry // request_id → where it runs
	rr       int
	want     chan struct{} // closed and replaced when a request finds no ready process
	crashes  int           // crashes in a row (see PoolConfig.CrashLoop)
	lastErr  error         // the last crash
	startErr error         // the last failed start; nil once a process started since
}

type reqEntry struct {
	pr  *proc
	gen *generation
}

// proc is one process slot: a fixed endpoint, a Client, and the current generation
// (the process now running there).
type proc struct {
	p        *Pool
	index    int
	ep       Endpoint
	client   *Client
	restarts atomic.Uint64
	gen      *generation // guarded by p.mu; non-nil only while ready
}

// generation is one started process.
type generation struct {
	cmd     *exec.Cmd
	pid     int
	exited  chan struct{}
	exitErr error // set before exited is closed
	killed  atomic.Bool
	stopped atomic.Bool // stopped by Close
}

// ProcessStats describe one process slot of a Pool.
type ProcessStats struct {
	Index    int
	Endpoint Endpoint
	PID      int  // 0 when not running
	Ready    bool // accepting requests
	Restarts uint64
	Client   ClientStats
}

// PoolStats describe a Pool.
type PoolStats struct {
	Name      string
	Restarts  uint64
	InFlight  int
	Processes []ProcessStats
}

// StartPool validates cfg, starts the processes and waits until every one accepts
// connections. If one does not within StartupTimeout, it stops them all and fails.
func StartPool(ctx context.Context, cfg PoolConfig) (*Pool, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	p := &Pool{
		cfg:      cfg,
		log:      cfg.Logger.With("executor", cfg.Name),
		closing:  make(chan struct{}),
		want:     make(chan struct{}),
		requests: map[string]reqEntry{},
	}
	if cfg.Transport == TransportUnix && cfg.SocketDir == "" {
		dir, err := os.MkdirTemp("", "rrq-")
		if err != nil {
			return nil, fmt.Errorf("rrq pool %s: socket dir: %w", cfg.Name, err)
		}
		p.tmpDir, p.cfg.SocketDir = dir, dir
	}
	eps, err := p.endpoints()
	if err != nil {
		p.removeTmp()
		return nil, err
	}
	for i, ep := range eps {
		copt := cfg.Client
		copt.Logger = p.log // the client adds its endpoint
		cl, err := NewClient(ep, copt)
		if err != nil {
			p.removeTmp()
			return nil, err
		}
		pr := &proc{p: p, index: i, ep: ep, client: cl}
		cl.onRelease = p.notify
		cl.onOutcome = p.answered
		p.procs = append(p.procs, pr)
	}
	results := make(chan error, len(p.procs))
	for _, pr := range p.procs {
		p.wg.Add(1)
		go pr.supervise(results)
	}
	var errs []error
	for range p.procs {
		select {
		case err := <-results:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
		}
		if len(errs) > 0 {
			break
		}
	}
	if len(errs) > 0 {
		p.Close()
		return nil, fmt.Errorf("rrq pool %s: start: %w", cfg.Name, errors.Join(errs...))
	}
	return p, nil
}

func (cfg *PoolConfig) setDefaults() error {
	if cfg.Name == "" {
		return errors.New("rrq pool: Name is required")
	}
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return fmt.Errorf("rrq pool %s: Command is required", cfg.Name)
	}
	if cfg.Size <= 0 {
		cfg.Size = 1
	}
	if cfg.Transport == "" {
		cfg.Transport = TransportUnix
	}
	if cfg.Transport != TransportUnix && cfg.Transport != TransportTCP {
		return fmt.Errorf("rrq pool %s: unknown transport %q", cfg.Name, cfg.Transport)
	}
	if cfg.TCPHost == "" {
		cfg.TCPHost = "127.0.0.1"
	}
	if cfg.TCPBasePort < 0 || cfg.TCPBasePort+cfg.Size-1 > 65535 {
		return fmt.Errorf("rrq pool %s: TCP ports %d..%d out of range", cfg.Name, cfg.TCPBasePort, cfg.TCPBasePort+cfg.Size-1)
	}
	if cfg.StartupTimeout <= 0 {
		cfg.StartupTimeout = 10 * time.Second
	}
	if cfg.ReadyWait <= 0 {
		cfg.ReadyWait = cfg.StartupTimeout
	}
	if cfg.AcceptWait <= 0 {
		cfg.AcceptWait = 5 * time.Second
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 5 * time.Second
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = 100 * time.Millisecond
	}
	if cfg.RestartBackoffMax <= 0 {
		cfg.RestartBackoffMax = 10 * time.Second
	}
	if cfg.RestartBackoffMax < cfg.RestartBackoff {
		cfg.RestartBackoffMax = cfg.RestartBackoff
	}
	if cfg.CrashLoop <= 0 {
		cfg.CrashLoop = 3
	}
	if cfg.CrashWait <= 0 {
		cfg.CrashWait = 2 * time.Second
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stderr
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Client.setDefaults()
	return nil
}

func (p *Pool) endpoints() ([]Endpoint, error) {
	cfg := &p.cfg
	eps := make([]Endpoint, cfg.Size)
	for i := range eps {
		switch {
		case cfg.Transport == TransportUnix:
			path := filepath.Join(cfg.SocketDir, fmt.Sprintf("%s-%d.sock", safeName(cfg.Name), i))
			if len(path) > 100 {
				return nil, fmt.Errorf("rrq pool %s: Unix socket path %q is too long (max 100 bytes); use a shorter SocketDir", cfg.Name, path)
			}
			eps[i] = UnixEndpoint(path)
		case cfg.TCPBasePort > 0:
			eps[i] = TCPEndpoint(net.JoinHostPort(cfg.TCPHost, strconv.Itoa(cfg.TCPBasePort+i)))
		default:
			port, err := freePort(cfg.TCPHost)
			if err != nil {
				return nil, fmt.Errorf("rrq pool %s: pick a free port: %w", cfg.Name, err)
			}
			eps[i] = TCPEndpoint(net.JoinHostPort(cfg.TCPHost, strconv.Itoa(port)))
		}
		if err := eps[i].Validate(); err != nil {
			return nil, fmt.Errorf("rrq pool %s: %w", cfg.Name, err)
		}
	}
	return eps, nil
}

func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}

func (p *Pool) removeTmp() {
	if p.tmpDir != "" {
		_ = os.RemoveAll(p.tmpDir)
	}
}

// notify wakes Execute calls waiting for capacity.
func (p *Pool) notify() {
	p.mu.Lock()
	p.changed.fire()
	p.mu.Unlock()
}

// wanted tells supervisors waiting to restart a cleanly exited process that a request
// needs one.
func (p *Pool) wanted() {
	p.mu.Lock()
	if !p.closed {
		close(p.want)
		p.want = make(chan struct{})
	}
	p.mu.Unlock()
}

// answered: a process gave a valid outcome, so the executor works.
func (p *Pool) answered() {
	p.mu.Lock()
	was := p.crashes >= p.cfg.CrashLoop
	p.crashes, p.lastErr = 0, nil
	p.mu.Unlock()
	if was && p.cfg.OnHealth != nil {
		p.cfg.OnHealth(true, nil)
	}
}

// crashed counts a crash (start says it was a failed start); past CrashLoop in a row
// the pool is unhealthy. Calls waiting for a ready process look again.
func (p *Pool) crashed(reason error, start bool) {
	p.mu.Lock()
	p.crashes++
	p.lastErr = reason
	if start {
		p.startErr = reason
	}
	now := p.crashes == p.cfg.CrashLoop
	p.mu.Unlock()
	p.notify()
	if now {
		p.log.Error("rrq executor pool crash-looping: unhealthy", "crashes", p.cfg.CrashLoop, "err", reason.Error())
		if p.cfg.OnHealth != nil {
			p.cfg.OnHealth(false, reason)
		}
	}
}

// Healthy reports whether the pool works: nil, or the last crash of a crash loop
// (PoolConfig.CrashLoop crashes in a row without an outcome in between).
func (p *Pool) Healthy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.crashes >= p.cfg.CrashLoop {
		return fmt.Errorf("executor %s crash-looping (%d crashes in a row): %w", p.cfg.Name, p.crashes, p.lastErr)
	}
	return nil
}

// Size returns the number of process slots.
func (p *Pool) Size() int { return len(p.procs) }

// Endpoints returns each process slot's endpoint.
func (p *Pool) Endpoints() []Endpoint {
	eps := make([]Endpoint, len(p.procs))
	for i, pr := range p.procs {
		eps[i] = pr.ep
	}
	return eps
}

// Stats returns the pool's state and counters.
func (p *Pool) Stats() PoolStats {
	s := PoolStats{Name: p.cfg.Name}
	for _, pr := range p.procs {
		ps := ProcessStats{Index: pr.index, Endpoint: pr.ep, Restarts: pr.restarts.Load(), Client: pr.client.Stats()}
		p.mu.Lock()
		if g := pr.gen; g != nil {
			ps.PID, ps.Ready = g.pid, true
		}
		p.mu.Unlock()
		s.Restarts += ps.Restarts
		s.InFlight += ps.Client.InFlight
		s.Processes = append(s.Processes, ps)
	}
	return s
}

// Execute sends req (see PrepareRequest for the defaults it fills; set RequestID
// yourself to use KillRequest) to a ready process with a free in-flight slot, waiting
// for one if all are busy or restarting. Errors are those of Client.Execute; when the
// connection was lost because the process died, the error also matches
// ErrExecutorCrashed, or ErrExecutorKilled if the pool killed it.
func (p *Pool) Execute(ctx context.Context, req ExecutionRequest) (ExecutionOutcome, error) {
	if err := PrepareRequest(&req); err != nil {
		return ExecutionOutcome{}, err
	}
	for attempt := 1; ; attempt++ {
		out, ent, err := p.executeOnce(ctx, req)
		// A request the executor closed its connection on and exited 0 without
		// answering was not taken (an executor that serves one connection and exits
		// when done: the request met the connection as it closed): it goes to a new
		// process, as an undelivered one does.
		retry := errors.Is(err, ErrUnavailable) || errors.Is(err, errCleanExit)
		if err == nil || !retry || attempt == 3 || ctx.Err() != nil || ent.pr == nil {
			return out, err
		}
		// Not delivered: the process is probably dying. Give the supervisor a moment to
		// notice, then route again (pick skips exited processes).
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ent.gen.exited:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

func (p *Pool) executeOnce(ctx context.Context, req ExecutionRequest) (ExecutionOutcome, reqEntry, error) {
	var ent reqEntry
	var noneSince time.Time // when the wait for a ready process began
	for {
		if err := ctx.Err(); err != nil {
			return ExecutionOutcome{}, ent, err
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return ExecutionOutcome{}, ent, fmt.Errorf("%w: pool %s", ErrClosed, p.cfg.Name)
		}
		if _, dup := p.requests[req.RequestID]; dup {
			p.mu.Unlock()
			return ExecutionOutcome{}, ent, fmt.Errorf("%w: request_id %s is already in flight", ErrInvalidRequest, req.RequestID)
		}
		var ready bool
		ent, ready = p.pick()
		if ent.pr != nil {
			p.requests[req.RequestID] = ent
			p.mu.Unlock()
			break
		}
		ch, want := p.changed.wait(), p.want
		close(want) // a cleanly exited process is started again: it is needed
		p.want = make(chan struct{})
		cannot := p.cannotStart()
		p.mu.Unlock()
		if err := p.waitCapacity(ctx, ch, ready, cannot, &noneSince); err != nil {
			return ExecutionOutcome{}, ent, err
		}
	}
	out, err := ent.pr.client.executeAcquired(ctx, req)
	p.mu.Lock()
	delete(p.requests, req.RequestID)
	p.mu.Unlock()
	if err != nil && errors.Is(err, ErrConnectionLost) && !errors.Is(err, ErrProtocolViolation) && !errors.Is(err, ErrClosed) {
		err = ent.pr.explain(ent.gen, err)
	}
	return out, ent, err
}

// cannotStart is why the pool cannot start a process — it is unhealthy and its last
// start failed — or nil. Called with p.mu held.
func (p *Pool) cannotStart() error {
	if p.crashes >= p.cfg.CrashLoop && p.startErr != nil {
		return p.startErr
	}
	return nil
}

// waitCapacity waits until the pool's capacity may have changed (ch closes). While a
// process is ready (all busy) the wait is the caller's (ctx); while none is, the call
// fails at once when the pool cannot start one (cannot), and once none has been ready
// for ReadyWait since *since: a call never waits silently for a pool that does not
// come back.
func (p *Pool) waitCapacity(ctx context.Context, ch <-chan struct{}, ready bool, cannot error, since *time.Time) error {
	var bound <-chan time.Time
	if ready {
		*since = time.Time{}
	} else {
		if cannot != nil {
			return fmt.Errorf("%w: %w: executor %s cannot start a process: %w", ErrUnavailable, ErrNotReady, p.cfg.Name, cannot)
		}
		if since.IsZero() {
			*since = time.Now()
		}
		left := p.cfg.ReadyWait - time.Since(*since)
		if left <= 0 {
			return p.notReadyError()
		}
		t := time.NewTimer(left)
		defer t.Stop()
		bound = t.C
	}
	select {
	case <-ch:
	case <-bound: // the caller picks again, then fails
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// notReadyError says that no process became ready within ReadyWait, and the pool's
// last crash or failed start when there is one.
func (p *Pool) notReadyError() error {
	p.mu.Lock()
	last := p.lastErr
	p.mu.Unlock()
	if last != nil {
		return fmt.Errorf("%w: %w: executor %s: no process ready within %v (last: %w)", ErrUnavailable, ErrNotReady, p.cfg.Name, p.cfg.ReadyWait, last)
	}
	return fmt.Errorf("%w: %w: executor %s: no process ready within %v", ErrUnavailable, ErrNotReady, p.cfg.Name, p.cfg.ReadyWait)
}

// pick reserves a slot on the ready process with the most spare capacity (ties: round
// robin), and says whether any process is ready (a busy one too). Called with p.mu
// held.
func (p *Pool) pick() (reqEntry, bool) {
	best, bestSpare := -1, 0
	ready := false
	n := len(p.procs)
	for k := range n {
		i := (p.rr + k) % n
		pr := p.procs[i]
		if pr.gen == nil || pr.gen.killed.Load() || pr.gen.hasExited() {
			continue
		}
		ready = true
		if s := pr.client.spare(); s > bestSpare {
			best, bestSpare = i, s
		}
	}
	if best < 0 {
		return reqEntry{}, ready
	}
	pr := p.procs[best]
	if !pr.client.tryAcquire() {
		return reqEntry{}, ready
	}
	p.rr = (best + 1) % n
	return reqEntry{pr: pr, gen: pr.gen}, ready
}

// errCleanExit marks a request left unanswered by a process that exited with status 0.
var errCleanExit = errors.New("exited with status 0 without answering")

// explain refines a lost-connection error with the process's fate.
func (pr *proc) explain(g *generation, err error) error {
	if g.killed.Load() {
		return fmt.Errorf("%w (executor %s process %d, pid %d): %w", ErrExecutorKilled, pr.p.cfg.Name, pr.index, g.pid, err)
	}
	t := time.NewTimer(pr.p.cfg.CrashWait)
	defer t.Stop()
	select {
	case <-g.exited:
	case <-t.C:
		return err
	}
	if g.killed.Load() {
		return fmt.Errorf("%w (executor %s process %d, pid %d): %w", ErrExecutorKilled, pr.p.cfg.Name, pr.index, g.pid, err)
	}
	if g.stopped.Load() {
		return fmt.Errorf("%w: pool %s stopped process %d (pid %d): %w", ErrClosed, pr.p.cfg.Name, pr.index, g.pid, err)
	}
	if g.exitErr == nil {
		// It closed the connection and exited cleanly with the request unanswered.
		return fmt.Errorf("%w (executor %s process %d, pid %d: %w): %w", ErrExecutorCrashed, pr.p.cfg.Name, pr.index, g.pid, errCleanExit, err)
	}
	return fmt.Errorf("%w (executor %s process %d, pid %d: %s): %w", ErrExecutorCrashed, pr.p.cfg.Name, pr.index, g.pid, exitDesc(g.exitErr), err)
}

func exitDesc(err error) string {
	if err == nil {
		return "exited with status 0"
	}
	return err.Error()
}

// Cancel sends a cancel frame. If requestID is in flight in this pool, it goes to that
// request's process; otherwise to every ready process (the protocol lets executors
// ignore cancels for jobs they do not run). It does not wait for the outcome, which the
// request's Execute returns.
func (p *Pool) Cancel(ctx context.Context, jobID, requestID string, hardKill bool) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("%w: pool %s", ErrClosed, p.cfg.Name)
	}
	var targets []*proc
	if ent, ok := p.requests[requestID]; ok && requestID != "" {
		targets = []*proc{ent.pr}
	} else {
		for _, pr := range p.procs {
			if pr.gen != nil {
				targets = append(targets, pr)
			}
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, pr := range targets {
		if err := pr.client.Cancel(ctx, jobID, requestID, hardKill); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stop cancels a request and sees that it ends: a cancel frame at once and again every
// quarter of grace — a cancel travels on a connection of its own and can overtake its
// request, and an executor ignores a cancel for a request it has not seen yet — and,
// if done (closed when the request's Execute returned) is still open once grace has
// passed, the request's process is killed (and restarted; the call then fails). It
// returns whether it killed. Failed sends are reported to onErr (may be nil).
func (p *Pool) Stop(jobID, requestID string, grace time.Duration, done <-chan struct{}, onErr func(error)) bool {
	every := max(grace/4, 10*time.Millisecond)
	deadline := time.Now().Add(grace)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := p.Cancel(ctx, jobID, requestID, false)
		cancel()
		if err != nil && onErr != nil {
			onErr(err)
		}
		if err != nil && p.cfg.Client.Connections == 1 {
			// The one connection cannot carry the cancel: kill the process now.
			select {
			case <-done:
				return false
			default:
			}
			return p.KillRequest(requestID)
		}
		wait := min(every, time.Until(deadline))
		if wait <= 0 {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return false
		case <-t.C:
		}
		if !time.Now().Before(deadline) {
			break
		}
	}
	select {
	case <-done:
		return false
	default:
	}
	return p.KillRequest(requestID)
}

// ProcessOf returns the index of the process running request requestID.
func (p *Pool) ProcessOf(requestID string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ent, ok := p.requests[requestID]
	if !ok {
		return -1, false
	}
	return ent.pr.index, true
}

// KillRequest kills (SIGKILL, whole process group) the process running request
// requestID — the cancellation grace period's last resort — and reports whether the
// request was found. The process is restarted at once; the request's Execute fails with
// ErrExecutorKilled, as does any other request that process was running.
func (p *Pool) KillRequest(requestID string) bool {
	p.mu.Lock()
	ent, ok := p.requests[requestID]
	p.mu.Unlock()
	if !ok {
		return false
	}
	ent.gen.kill()
	return true
}

// KillProcess kills process index (see KillRequest); it is restarted at once.
func (p *Pool) KillProcess(index int) error {
	if index < 0 || index >= len(p.procs) {
		return fmt.Errorf("rrq pool %s: no process %d", p.cfg.Name, index)
	}
	p.mu.Lock()
	g := p.procs[index].gen
	p.mu.Unlock()
	if g == nil {
		return fmt.Errorf("rrq pool %s: process %d is not running", p.cfg.Name, index)
	}
	g.kill()
	return nil
}

// WaitReady waits until every process slot has a ready process.
func (p *Pool) WaitReady(ctx context.Context) error {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return fmt.Errorf("%w: pool %s", ErrClosed, p.cfg.Name)
		}
		all := true
		for _, pr := range p.procs {
			if pr.gen == nil {
				all = false
			}
		}
		ch := p.changed.wait()
		p.mu.Unlock()
		if all {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops every process (SIGTERM to its process group, SIGKILL after StopGrace),
// fails the requests in flight and waits for the supervisors to end.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.closing)
	p.changed.close()
	p.mu.Unlock()
	p.wg.Wait()
	for _, pr := range p.procs {
		pr.client.Close()
	}
	p.removeTmp()
	return nil
}

func (p *Pool) isClosing() bool {
	select {
	case <-p.closing:
		return true
	default:
		return false
	}
}

// supervise runs process slot pr until the pool closes: start, wait until ready,
// publish, wait for exit, restart with backoff. The first start's result goes to first.
// A process that exits cleanly (status 0) — as an executor that serves one connection
// and exits when it closes does — is started again when a request needs it, at once
// and without counting as a crash; a failed start or any other exit the pool did not
// ask for is a crash (see PoolConfig.CrashLoop).
func (pr *proc) supervise(first chan<- error) {
	p := pr.p
	defer p.wg.Done()
	backoff := p.cfg.RestartBackoff
	reported := false
	for {
		g, err := pr.start()
		if err != nil && !reported {
			first <- err
			return
		}
		var reason error
		immediate, crash := false, true
		var want chan struct{}
		if err != nil {
			if p.isClosing() {
				return
			}
			reason = err
			p.log.Error("rrq executor process failed to start", "index", pr.index, "err", err.Error())
		} else {
			started := time.Now()
			p.mu.Lock()
			pr.gen = g
			p.startErr = nil
			p.mu.Unlock()
			p.notify()
			p.log.Info("rrq executor process ready", "index", pr.index, "pid", g.pid, "endpoint", pr.ep.String())
			if !reported {
				reported = true
				first <- nil
			}
			select {
			case <-g.exited:
			case <-p.closing:
			}
			p.mu.Lock()
			pr.gen = nil
			want = p.want
			p.mu.Unlock()
			p.notify()
			if p.isClosing() {
				g.stop(p.cfg.StopGrace)
				return
			}
			reason = fmt.Errorf("process %d exited: %s", g.pid, exitDesc(g.exitErr))
			switch {
			case g.killed.Load():
				immediate, crash = true, false
				backoff = p.cfg.RestartBackoff
				reason = fmt.Errorf("process %d killed by the pool", g.pid)
			case g.exitErr == nil:
				immediate, crash = true, false
				backoff = p.cfg.RestartBackoff
				reason = fmt.Errorf("process %d exited cleanly (status 0); started again when needed", g.pid)
			case time.Since(started) > p.cfg.RestartBackoffMax:
				backoff = p.cfg.RestartBackoff
			}
			p.log.Warn("rrq executor process stopped", "index", pr.index, "pid", g.pid, "reason", reason.Error())
		}
		pr.restarts.Add(1)
		if crash {
			p.crashed(reason, err != nil)
		}
		if f := p.cfg.OnRestart; f != nil {
			f(pr.index, reason, crash)
		}
		if want != nil && !crash && !g.killed.Load() {
			// A clean exit: start again when a request finds no ready process.
			select {
			case <-want:
			case <-p.closing:
				return
			}
		}
		if !immediate {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-p.closing:
				t.Stop()
				return
			}
			backoff = min(2*backoff, p.cfg.RestartBackoffMax)
		}
		if p.isClosing() {
			return
		}
	}
}

// start starts a process and waits until it accepts connections.
func (pr *proc) start() (*generation, error) {
	p := pr.p
	cfg := &p.cfg
	if pr.ep.Network == "unix" {
		if err := os.Remove(pr.ep.Address); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Dir = cfg.Dir
	base := os.Environ()
	if cfg.CleanEnv {
		base = nil
	}
	cmd.Env = executorEnv(base, cfg.Env, pr.ep)
	cmd.Stdout, cmd.Stderr = cfg.Stdout, cfg.Stderr
	cmd.WaitDelay = time.Second // do not hang on output pipes held by stray children
	waited, err := launch(cfg, cmd)
	if err != nil {
		return nil, fmt.Errorf("start process %d (%s): %w", pr.index, cfg.Command[0], err)
	}
	g := &generation{cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		g.exitErr = cmd.Wait()
		waited()
		close(g.exited)
	}()

	deadline := time.Now().Add(cfg.StartupTimeout)
	wait := 5 * time.Millisecond
	for {
		d := net.Dialer{Timeout: time.Until(deadline)}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		nc, err := pr.ep.Dial(ctx, &d)
		cancel()
		if err == nil {
			select {
			case <-g.exited: // a foreign listener on our port, or it died right away
				nc.Close()
				return nil, fmt.Errorf("process %d (pid %d) exited during startup: %s", pr.index, g.pid, exitDesc(g.exitErr))
			default:
			}
			// The connection that found the process accepting carries its requests
			// (with Connections 1, an executor that accepts one connection at a time).
			if cfg.Client.Connections != 1 {
				if err := pr.checkSecondConnection(nc, g, deadline); err != nil {
					nc.Close()
					g.stop(0)
					return nil, err
				}
			}
			if err := pr.client.Adopt(nc); err != nil {
				g.stop(0)
				return nil, err
			}
			return g, nil
		}
		if time.Now().After(deadline) {
			g.stop(0)
			return nil, fmt.Errorf("process %d (pid %d) did not accept connections on %s within %v: %v", pr.index, g.pid, pr.ep, cfg.StartupTimeout, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-g.exited:
			t.Stop()
			return nil, fmt.Errorf("process %d (pid %d) exited before accepting connections on %s: %s", pr.index, g.pid, pr.ep, exitDesc(g.exitErr))
		case <-p.closing:
			t.Stop()
			g.stop(cfg.StopGrace)
			return nil, fmt.Errorf("%w: pool %s", ErrClosed, cfg.Name)
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// launch starts a process with cfg.Launch, or as a process group of its own: a signal
// meant for the caller's group does not reach it, and it gets SIGKILL when the caller
// dies (the parent-death signal).
func launch(cfg *PoolConfig, cmd *exec.Cmd) (func(), error) {
	if cfg.Launch != nil {
		return cfg.Launch(cmd)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return func() {}, cmd.Start()
}

// executorEnv is base without any inherited RRQ_EXECUTOR_* endpoint, plus extra, plus
// the endpoint variable.
func executorEnv(base, extra []string, ep Endpoint) []string {
	env := make([]string, 0, len(base)+len(extra)+1)
	for _, kv := range append(base[:len(base):len(base)], extra...) {
		if strings.HasPrefix(kv, EnvSocket+"=") || strings.HasPrefix(kv, EnvTCPSocket+"=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, ep.Env())
}

func (g *generation) hasExited() bool {
	select {
	case <-g.exited:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process group (the supervisor restarts it).
func (g *generation) kill() {
	g.killed.Store(true)
	select {
	case <-g.exited: // already gone; its pid may be reused
	default:
		_ = syscall.Kill(-g.pid, syscall.SIGKILL)
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace (at once if grace
// is 0), and waits for the process to exit.
func (g *generation) stop(grace time.Duration) {
	g.stopped.Store(true)
	select {
	case <-g.exited:
		return
	default:
	}
	if grace > 0 {
		_ = syscall.Kill(-g.pid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-g.exited:
			t.Stop()
			return
		case <-t.C:
		}
	}
	_ = syscall.Kill(-g.pid, syscall.SIGKILL)
	<-g.exited
}
