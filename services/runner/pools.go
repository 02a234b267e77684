package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/rrq"
	"github.com/hero-coordinator/hero/lib/sandbox"
)

// Executor pools belong to one context each, so that jobs of different contexts never
// share an executor process — unless the operator marks an executor shared
// (`shared=true` in --executors): then one pool serves every context and starts with
// the runner. A context's pool starts when the runner starts serving the context (at
// its start, or when the context is added), before any job needs it, and again, with
// backoff, while it cannot start (start=ahead, the default); with start=demand it
// starts with the context's first handler job and stops after --executor-idle without
// a call. Once running, a pool restarts its own processes (rrq.Pool).

// poolKey names a pool: an executor, and the context it serves (0: shared).
type poolKey struct {
	name string
	ctx  uint32
}

// poolEntry is a pool (ready closes once it started, or failed with err), its calls
// in flight, its idle timer, and its sandbox (nil: unsandboxed). ahead: kept ready
// while its context is served, never stopped for being idle.
type poolEntry struct {
	ready chan struct{}
	pool  *rrq.Pool
	box   *poolSandbox
	err   error
	calls int
	idle  *time.Timer
	ahead bool
}

// poolSandbox is a pool's sandbox: its directory (sockets, the processes' work
// directory) and its cgroup.
type poolSandbox struct {
	dir string
	job *sandbox.Job
}

func (b *poolSandbox) close() {
	if b == nil {
		return
	}
	b.job.Cleanup()
	_ = os.RemoveAll(b.dir)
}

// poolStarts bounds the pools a runner starts ahead at once: one that starts serving
// many contexts does not start all their executors at the same moment.
const poolStarts = 2

var (
	errNoExecutor  = errors.New("no such executor")
	errPoolsClosed = errors.New("executor pools stopped: the runner is stopping")
)

// startExecutors starts the shared pools and waits until each accepts connections;
// a shared pool that cannot start is an error at start-up. A context's pools start
// when the runner serves it (servePools).
func (r *runner) startExecutors(ctx context.Context) error {
	r.pools = map[poolKey]*poolEntry{}
	for _, e := range r.cfg.executors {
		r.em.healthy.WithLabelValues(e.name).Set(1)
	}
	for _, e := range r.cfg.executors {
		if !e.shared {
			continue
		}
		if _, err := r.acquirePool(ctx, e.name, 0); err != nil {
			r.stopExecutors()
			return fmt.Errorf("executor %s: %v", e.name, err)
		}
		r.releasePool(poolKey{e.name, 0})
	}
	return nil
}

func (r *runner) executorConfig(name string) *executorConfig {
	for i := range r.cfg.executors {
		if r.cfg.executors[i].name == name {
			return &r.cfg.executors[i]
		}
	}
	return nil
}

// poolEntryOf returns key's entry, making one when there is none (starting: the
// caller starts it, startEntry). call counts a call on it; ahead marks it kept ready.
func (r *runner) poolEntryOf(key poolKey, call, ahead bool) (pe *poolEntry, starting bool, err error) {
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	if r.poolsClosed {
		return nil, false, errPoolsClosed
	}
	pe = r.pools[key]
	if starting = pe == nil; starting {
		pe = &poolEntry{ready: make(chan struct{})}
		r.pools[key] = pe
	}
	if call {
		pe.calls++
	}
	pe.ahead = pe.ahead || ahead
	if pe.idle != nil {
		pe.idle.Stop()
		pe.idle = nil
	}
	return pe, starting, nil
}

// startEntry starts the pool of a new entry and closes its ready. It starts under the
// runner's context, not a job's: a stopped job does not abort a start that the next
// job, or the context's keeper, waits for. A pool that cannot start leaves the map
// (the next call, or the keeper, tries again).
func (r *runner) startEntry(key poolKey, e *executorConfig, pe *poolEntry) {
	r.poolMu.Lock()
	ctx := r.poolCtx
	r.poolMu.Unlock()
	if ctx == nil {
		ctx = context.Background() // the shared pools, started before the loops
	}
	pe.pool, pe.box, pe.err = r.startPool(ctx, e, key.ctx)
	close(pe.ready)
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	switch {
	case pe.err != nil && r.pools[key] == pe:
		delete(r.pools, key)
	case pe.err == nil:
		r.idleLocked(key, pe) // the calls that waited for it may have given up
	}
}

// acquirePool returns the pool of an executor for a context (starting it when it
// does not run) and counts a call on it; releasePool ends the call.
func (r *runner) acquirePool(ctx context.Context, name string, ctxID uint32) (*rrq.Pool, error) {
	e := r.executorConfig(name)
	if e == nil {
		return nil, errNoExecutor
	}
	key := poolKey{name, ctxID}
	if e.shared {
		key.ctx = 0
	}
	pe, starting, err := r.poolEntryOf(key, true, false)
	if err != nil {
		return nil, err
	}
	if starting {
		// Started outside the lock: other contexts' calls do not wait for it.
		go r.startEntry(key, e, pe)
	}
	select {
	case <-pe.ready:
	case <-ctx.Done():
		r.releasePool(key)
		return nil, ctx.Err()
	}
	if pe.err != nil {
		return nil, pe.err
	}
	return pe.pool, nil
}

func (r *runner) releasePool(key poolKey) {
	if e := r.executorConfig(key.name); e != nil && e.shared {
		key.ctx = 0
	}
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	pe := r.pools[key]
	if pe == nil {
		return
	}
	pe.calls--
	select {
	case <-pe.ready:
		r.idleLocked(key, pe)
	default: // still starting: startEntry looks once it started
	}
}

// idleLocked arms the idle timer of a started pool without calls, unless it is kept
// ready (ahead, or shared) or --executor-idle is 0. Called with r.poolMu held.
func (r *runner) idleLocked(key poolKey, pe *poolEntry) {
	if pe.calls > 0 || pe.ahead || key.ctx == 0 || r.cfg.ExecutorIdle <= 0 || pe.pool == nil || pe.idle != nil {
		return
	}
	pe.idle = time.AfterFunc(r.cfg.ExecutorIdle, func() {
		r.poolMu.Lock()
		if cur := r.pools[key]; cur != pe || pe.calls > 0 || pe.ahead {
			r.poolMu.Unlock()
			return
		}
		delete(r.pools, key)
		r.poolMu.Unlock()
		r.closePool(key, pe, "idle")
	})
}

// closePool stops a pool that left the map.
func (r *runner) closePool(key poolKey, pe *poolEntry, why string) {
	if err := pe.pool.Close(); err != nil {
		r.log.Warn().Err(err).Str("executor", key.name).Uint32(obs.KeyContextID, key.ctx).Msg("stop executor pool")
	}
	pe.box.close()
	r.log.Info().Str("executor", key.name).Uint32(obs.KeyContextID, key.ctx).Msg("executor pool stopped: " + why)
}

// servePools keeps pools ready in the contexts the runner starts serving (each
// start=ahead executor that is not shared) and stops those of the contexts it no
// longer serves.
func (r *runner) servePools(ctx context.Context, added, removed []uint32) {
	for _, id := range removed {
		r.retirePools(id)
	}
	for _, id := range added {
		for i := range r.cfg.executors {
			if e := &r.cfg.executors[i]; !e.shared && !e.demand {
				go r.keepPool(ctx, e, id)
			}
		}
	}
}

// keepPool starts executor e's pool for context ctxID before any job needs it, and
// again, with backoff (1 s doubling to executorRetryAfter), while it cannot start and
// the context is served; the executor is unhealthy here meanwhile (its jobs go to
// another runner, or fail saying why).
func (r *runner) keepPool(ctx context.Context, e *executorConfig, ctxID uint32) {
	key := poolKey{e.name, ctxID}
	backoff, failed := time.Second, false
	for r.isServed(ctxID) {
		err := r.warmPool(ctx, key, e)
		if ctx.Err() != nil || errors.Is(err, errPoolsClosed) {
			return
		}
		if err == nil {
			if failed {
				r.markHealthy(e.name)
			}
			if !r.isServed(ctxID) { // it stopped being served while the pool started
				r.retirePools(ctxID)
			}
			return
		}
		failed = true
		r.markUnhealthy(e.name, ctxID, fmt.Errorf("could not start: %w", err))
		if !fault.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, executorRetryAfter)
	}
}

// warmPool starts key's pool, kept ready, unless it runs or starts already (then it
// waits for that start). At most poolStarts start at once.
func (r *runner) warmPool(ctx context.Context, key poolKey, e *executorConfig) error {
	select {
	case r.warm <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.warm }()
	if !r.isServed(key.ctx) {
		return nil
	}
	pe, starting, err := r.poolEntryOf(key, false, true)
	if err != nil {
		return err
	}
	if starting {
		r.startEntry(key, e, pe)
	}
	select {
	case <-pe.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	return pe.err
}

// retirePools stops the pools of a context the runner no longer serves: now those
// without a call, the others after --executor-idle from their last call.
func (r *runner) retirePools(ctxID uint32) {
	stop := map[poolKey]*poolEntry{}
	r.poolMu.Lock()
	for key, pe := range r.pools {
		if key.ctx != ctxID {
			continue
		}
		pe.ahead = false
		select {
		case <-pe.ready:
		default:
			continue // starting: its keeper retires it once started
		}
		if pe.calls == 0 && pe.pool != nil {
			delete(r.pools, key)
			stop[key] = pe
		}
	}
	r.poolMu.Unlock()
	for key, pe := range stop {
		r.closePool(key, pe, "context no longer served")
	}
}

// isServed says whether the runner serves a context now.
func (r *runner) isServed(id uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := slices.BinarySearch(r.served, id)
	return ok
}

// coreShare is the GOMAXPROCS=<n> setting of each process of a pool of size
// processes on a runner that has cores of its own (its GOMAXPROCS, which follows its
// cgroup's CPU limit): the cores divided among the processes, at least one each; ""
// for a pool of one process (Go's default then, as for any program). A Go executor
// (the Go SDK's) runs its scheduler on its share: several processes that each spread
// over every core wake each other's idle threads for every call (the example
// executor's CPU per no-op call fell by a quarter at GOMAXPROCS=1 in a pool of two on
// two cores); an executor in another language ignores it.
func coreShare(cores, size int) string {
	if size <= 1 {
		return ""
	}
	return "GOMAXPROCS=" + strconv.Itoa(max(1, cores/size))
}

// startPool starts one pool's processes (for context ctxID; 0: shared) and waits
// until they accept connections. Its processes run in the job sandbox (poolSandbox)
// unless the runner or the executor says otherwise.
func (r *runner) startPool(ctx context.Context, e *executorConfig, ctxID uint32) (*rrq.Pool, *poolSandbox, error) {
	transport := rrq.TransportUnix
	if e.transport == "tcp" {
		transport = rrq.TransportTCP
	}
	log := r.log.With().Str("executor", e.name).Uint32(obs.KeyContextID, ctxID).Logger()
	cfg := rrq.PoolConfig{
		Name: e.name, Command: e.cmd, Size: e.size, Transport: transport, StartupTimeout: e.startup, ReadyWait: e.wait,
		Client: rrq.ClientOptions{MaxInFlight: e.inflight, Pipeline: e.pipeline, Connections: e.conns, MaxFrameSize: r.cfg.MaxFrameBytes,
			OnViolation: func(v rrq.Violation) {
				r.em.violations.WithLabelValues(e.name, string(v.Kind)).Inc()
				log.Warn().Str("kind", string(v.Kind)).Str("request_id", v.RequestID).Err(v.Err).Msg("executor protocol violation")
			}},
		Stdout: logLines{log, "stdout"}, Stderr: logLines{log, "stderr"},
		Logger: obs.Slog(r.log), // the pool adds "executor"
		OnRestart: func(index int, reason error, crash bool) {
			r.em.restarts.WithLabelValues(e.name).Inc()
			if crash {
				r.em.crashes.WithLabelValues(e.name).Inc()
			}
			log.Warn().Int("process", index).Str("reason", reason.Error()).Bool("crash", crash).Msg("executor process restarting")
		},
		OnHealth: func(healthy bool, reason error) {
			if healthy {
				r.markHealthy(e.name)
			} else {
				r.markUnhealthy(e.name, ctxID, reason)
			}
		},
	}
	var box *poolSandbox
	if r.sandbox.Mode() == sandbox.ModeBwrap && !e.noSandbox {
		var err error
		if box, err = r.poolSandbox(e, ctxID, &cfg); err != nil {
			return nil, nil, err
		}
	}
	if v := coreShare(runtime.GOMAXPROCS(0), e.size); v != "" {
		cfg.Env = append(cfg.Env, v)
	}
	start := time.Now()
	pool, err := rrq.StartPool(ctx, cfg)
	if err != nil {
		box.close()
		if errors.Is(err, rrq.ErrOneConnection) {
			err = fmt.Errorf("%w — add connections=1 to executor %s's --executors entry", err, e.name)
		}
		return nil, nil, err
	}
	took := time.Since(start)
	r.em.startSeconds.WithLabelValues(e.name).Observe(took.Seconds())
	log.Info().Int("processes", e.size).Str("transport", e.transport).Bool("shared", e.shared).Bool("sandboxed", box != nil).
		Float64("start_ms", float64(took.Microseconds())/1000).Msg("executor pool ready")
	return pool, box, nil
}

// poolSandbox prepares a pool's sandbox and sets cfg to launch its processes there:
// one directory and one cgroup for the pool (limits: a job's, times its size; beside
// the jobs' cgroups, not among them, with a CPU weight of its own), a clean environment, no network for a Unix-socket pool (a TCP
// pool shares the host's, to be reachable).
func (r *runner) poolSandbox(e *executorConfig, ctxID uint32, cfg *rrq.PoolConfig) (*poolSandbox, error) {
	dir, err := os.MkdirTemp(r.cfg.WorkDir, fmt.Sprintf("hero-exec-%s-%d-", e.name, ctxID))
	if err != nil {
		return nil, err
	}
	ro := append([]string(nil), e.readOnly...)
	for _, a := range e.cmd {
		if filepath.IsAbs(a) {
			if _, err := os.Stat(a); err == nil {
				ro = append(ro, filepath.Dir(a))
			}
		}
	}
	lim := r.cfg.Sandbox.Limits()
	lim.MemoryBytes *= int64(e.size)
	lim.Pids *= e.size
	lim.CPUMillis *= e.size
	lim.Network = model.NetworkNone // a pool's processes get no network of their own (a TCP pool shares the host's)
	// The pool's cgroup is not among the jobs' (hero-jobs) but beside it, under the
	// executors' own parent (hero-executors, sandbox.Extra.Executor): the jobs
	// together weigh one share of the CPU against the pools', so that however many
	// run, a pool's start (a Python executor's imports) and its calls are not starved
	// by them. Its weight there is as much as every job the runner may run (each 100):
	// where the executors' parent cannot be made, the pool is among the jobs and gets
	// half the CPU at least when they contend for it, not 1/(jobs+1).
	lim.CPUWeight = 100 * r.cfg.Concurrency
	// The pool's directory is the host's: the runner reaches its sockets there.
	job, err := r.sandbox.PrepareWith(dir, e.cmd, lim, sandbox.Extra{ReadOnly: ro, ShareNet: cfg.Transport == rrq.TransportTCP, HostDir: true, Executor: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// Each process is launched as a job is: it dies with the runner (the guard).
	cfg.Command, cfg.Dir, cfg.CleanEnv, cfg.Launch = job.Argv, dir, true, job.Launch
	cfg.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir, "LANG=C.UTF-8"}
	if cfg.Transport == rrq.TransportUnix {
		cfg.SocketDir = dir
	}
	return &poolSandbox{dir: dir, job: job}, nil
}

// stopExecutors stops every pool; none starts afterwards.
func (r *runner) stopExecutors() {
	r.poolMu.Lock()
	pools := r.pools
	r.pools = map[poolKey]*poolEntry{}
	r.poolsClosed = true
	r.poolMu.Unlock()
	for key, pe := range pools {
		if pe.idle != nil {
			pe.idle.Stop()
		}
		<-pe.ready
		if pe.pool == nil {
			continue
		}
		if err := pe.pool.Close(); err != nil {
			r.log.Warn().Err(err).Str("executor", key.name).Msg("stop executor pool")
		}
		pe.box.close()
	}
}
