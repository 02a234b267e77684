// Package execcore is the execution core shared by the runner's queue protocol
// (services/runner) and the Hero Dispatcher worker (lib/dispatcher, seed 000): the
// executions a process runs now and how they are stopped (Execution, Tracker), the
// drain at shutdown, a run's timeout and lease timers (Supervise), the start and end
// of a script's process in its sandbox (Execution.Start, Run.Wait) and the clean
// environment it gets. The two protocols — how a job is claimed, started, finished and
// handed back in Redis — stay in their packages, as adapters around this core.
package execcore

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/hero-coordinator/hero/lib/procrun"
)

// ReasonHandedBack is the kill reason of a run stopped by the shutdown's drain: its
// job goes back to its queue for another process, with no end written.
const ReasonHandedBack = "handed_back"

// StderrTail is how much of the end of a script's stderr a failed run's error quotes.
const StderrTail = 2 << 10

// Execution is one running job, known by its key K (what a stop request names). It
// is ended by Kill: its process group (Start attached one), or its cancel func (a run
// that is no process, such as a handler call). The first kill's reason is kept.
type Execution[K comparable] struct {
	Key K
	// Tag is what the protocol names the run by besides its key (the dispatcher: the
	// worker id whose queue the job came from).
	Tag string

	mu     sync.Mutex
	reason string
	proc   *procrun.Proc
	cancel func(reason string)
	killed chan struct{} // closed by the first Kill (made on first use: killedCh)
}

// killedCh is closed once the execution is killed.
func (ex *Execution[K]) killedCh() <-chan struct{} {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.killed == nil {
		ex.killed = make(chan struct{})
		if ex.reason != "" {
			close(ex.killed)
		}
	}
	return ex.killed
}

// Kill ends the run with a reason: its process group now (or, once one starts, at its
// start), or its cancel func. Only the first reason is kept.
func (ex *Execution[K]) Kill(reason string) {
	ex.mu.Lock()
	if ex.reason == "" {
		ex.reason = reason
		if ex.killed != nil {
			close(ex.killed)
		}
	}
	proc, cancel := ex.proc, ex.cancel
	ex.mu.Unlock()
	if proc != nil {
		proc.Kill(reason)
	}
	if cancel != nil {
		cancel(reason)
	}
}

// Reason is why the run was killed ("" while it was not).
func (ex *Execution[K]) Reason() string {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.reason
}

// SetCancel sets how a kill ends a run that is no process. It returns the reason of a
// kill that came before (""): the caller then ends the run itself.
func (ex *Execution[K]) SetCancel(cancel func(reason string)) string {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.cancel = cancel
	return ex.reason
}

// setProc attaches a process (nil: detaches it) and returns the reason of a kill that
// came before ("").
func (ex *Execution[K]) setProc(p *procrun.Proc) string {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.proc = p
	return ex.reason
}

// Tracker holds the executions a process runs now, so that stop requests and the
// shutdown's drain find them, and counts the runs under way (Begin, Done). Its job
// context outlives the process's loops (running jobs finish their writes during a
// drain); its end context ends when the drain gives up.
type Tracker[K comparable] struct {
	mu      sync.Mutex
	running map[K]*Execution[K]
	runs    sync.WaitGroup

	jobCtx  context.Context
	stopJob context.CancelFunc
	endCtx  context.Context
	stopEnd context.CancelFunc
}

// NewTracker returns an empty tracker; Close ends its contexts.
func NewTracker[K comparable]() *Tracker[K] {
	t := &Tracker[K]{running: map[K]*Execution[K]{}}
	t.jobCtx, t.stopJob = context.WithCancel(context.Background())
	t.endCtx, t.stopEnd = context.WithCancel(t.jobCtx)
	return t
}

// JobCtx is the context of the running jobs' work: it ends with Close, after the drain.
func (t *Tracker[K]) JobCtx() context.Context { return t.jobCtx }

// EndCtx ends when the drain gives up on the running jobs: waits for Redis (an end to
// write, a passing fault) stop then and leave the job to the restart or the sweep.
func (t *Tracker[K]) EndCtx() context.Context { return t.endCtx }

// Close ends the job context (and the end context).
func (t *Tracker[K]) Close() { t.stopJob() }

// Put registers a new execution under key, in place of any other under that key.
func (t *Tracker[K]) Put(key K) *Execution[K] {
	ex := &Execution[K]{Key: key}
	t.mu.Lock()
	t.running[key] = ex
	t.mu.Unlock()
	return ex
}

// Add registers a new execution under key unless one runs under it already: it then
// returns that one and false.
func (t *Tracker[K]) Add(key K, tag string) (*Execution[K], bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ex, ok := t.running[key]; ok {
		return ex, false
	}
	ex := &Execution[K]{Key: key, Tag: tag}
	t.running[key] = ex
	return ex, true
}

// Remove unregisters ex (not another execution registered under its key since).
func (t *Tracker[K]) Remove(ex *Execution[K]) {
	t.mu.Lock()
	if t.running[ex.Key] == ex {
		delete(t.running, ex.Key)
	}
	t.mu.Unlock()
}

// Lookup returns the execution under key (nil: none).
func (t *Tracker[K]) Lookup(key K) *Execution[K] {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.running[key]
}

// Stop kills the execution under key with a reason; false when none runs.
func (t *Tracker[K]) Stop(key K, reason string) bool {
	ex := t.Lookup(key)
	if ex == nil {
		return false
	}
	ex.Kill(reason)
	return true
}

// Running lists the executions now.
func (t *Tracker[K]) Running() []*Execution[K] {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*Execution[K], 0, len(t.running))
	for _, ex := range t.running {
		out = append(out, ex)
	}
	return out
}

// Len is the number of executions now.
func (t *Tracker[K]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.running)
}

// Begin counts a run under way (one the drain waits for); Done ends it.
func (t *Tracker[K]) Begin() { t.runs.Add(1) }

// Done ends a run counted by Begin.
func (t *Tracker[K]) Done() { t.runs.Done() }

// Drain waits up to timeout (0: not at all) for the runs under way to end. It returns
// true when they did; else it kills the executions left with ReasonHandedBack, ends
// the end context, waits for the runs to end and returns false: the caller then hands
// their jobs back to their queues.
func (t *Tracker[K]) Drain(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		t.runs.Wait()
		close(done)
	}()
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-done:
			return true
		case <-timer.C:
		}
	}
	for _, ex := range t.Running() {
		ex.Kill(ReasonHandedBack)
	}
	t.stopEnd()
	<-done
	return false
}

// CleanEnv is the base of a script's whole environment (nothing of the calling
// process's leaks in): PATH, HOME (the run's scratch directory) and LANG. The caller
// adds the job's variables.
func CleanEnv(home string) map[string]string {
	return map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": home,
		"LANG": "C.UTF-8",
	}
}

// EnvList is an environment as procrun takes it: KEY=VALUE, sorted.
func EnvList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
