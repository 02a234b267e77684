package execcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hero-coordinator/hero/lib/procrun"
	"github.com/hero-coordinator/hero/lib/sandbox"
)

// Process says how to run one script under its interpreter.
type Process struct {
	Argv   []string // the interpreter and its arguments; the script comes on stdin
	Dir    string   // the run's scratch directory (its working directory)
	Env    []string // the whole environment (EnvList)
	Script string
	// Sandbox runs the process (nil: a plain process group) within Limits.
	Sandbox *sandbox.Sandbox
	Limits  sandbox.Limits
	// Log gets stdout and stderr as they come (the job's log), besides what Wait
	// returns of them.
	Log       io.Writer
	OutputMax int           // stdout kept as the run's output
	KillGrace time.Duration // SIGTERM → SIGKILL on a kill
	// OnLimit is called when the run goes over a sandbox limit (nil: the process is
	// killed with the limit as its reason).
	OnLimit func(reason string)
	// Result names a file of Dir that the run's Ended carries (its first ResultMax
	// bytes; with a sandbox, read in it: sandbox.Job.Result).
	Result    string
	ResultMax int64
	// OnSandboxRetry, when set, is told of each failure to prepare the run's sandbox
	// that Start tries again after (try: the tries so far) — a log line's.
	OnSandboxRetry func(try int, err error)
}

// SandboxTries bounds the tries Start makes to prepare a run's sandbox (StepSandbox,
// StepStarted): a sandbox that could not be made — a passing fault of the runner's
// host, never the job's — is made again, SandboxRetryWait × the tries so far after.
// Nothing of the job ran in a sandbox not made: it runs once, in the one made.
const SandboxTries = 3

// SandboxRetryWait is the wait after a first failure to prepare a sandbox.
const SandboxRetryWait = 100 * time.Millisecond

// Start steps: where a StartError happened.
const (
	StepSandbox = "sandbox" // the sandbox could not be prepared
	StepStart   = "start"   // the interpreter could not be started
	StepStarted = "started" // the sandbox could not finish the start (its network)
)

// StartError is a run that could not start: Step says where, Tries how many times
// (its sandbox's preparation is tried up to SandboxTries times).
type StartError struct {
	Step  string
	Err   error
	Tries int
}

func (e *StartError) Error() string { return fmt.Sprintf("%s: %v", e.Step, e.Err) }

func (e *StartError) Unwrap() error { return e.Err }

// Run is a started process of an execution.
type Run[K comparable] struct {
	ex        *Execution[K]
	proc      *procrun.Proc
	sj        *sandbox.Job
	result    string // the result file's path (without a sandbox)
	resultMax int64
	stdout    *procrun.Capped
	stderr    *procrun.Tail
	stopWatch func()
	started   time.Time // when its process was about to run
	release   sync.Once // its sandbox's teardown
}

// StartedAt is when the run's job began: in a sandbox of its own, when its command
// was about to run, its sandbox made (sandbox.Job.Begun); else (or, killed before it
// began) when its process was launched.
func (r *Run[K]) StartedAt() time.Time {
	if at, ok := r.begun(); ok {
		return at
	}
	return r.started
}

// begun is when the run's job began (ok false: not yet): its sandbox's word, or its
// launch for a process without one.
func (r *Run[K]) begun() (time.Time, bool) {
	if r.sj != nil && r.sj.Measured() {
		return r.sj.Begun()
	}
	return r.started, true
}

// BeginWait bounds the time from a run's launch to its job's begin (its sandbox's
// making) beyond its timeout: a run whose job has not begun by then is killed as timed
// out.
const BeginWait = time.Minute

// Ended is how a run ended.
type Ended struct {
	procrun.Result
	Output string // stdout, up to Process.OutputMax
	Stderr string // the last StderrTail bytes of stderr, trimmed
	// Limit is the sandbox limit the run went over ("": none; sandbox.Reason*).
	Limit string
	// ResultFile is what was taken of the Process's Result file.
	ResultFile sandbox.Result
}

// Describe says why a failed run failed, with the tail of its stderr.
func (e Ended) Describe() string { return e.Result.Describe(e.Stderr) }

// Start prepares the sandbox and starts the process, attached to ex: a kill that came
// before (a stop, a hand-back) ends it at once, and a later one ends it too. A job
// whose limits have sandboxes made ahead (sandbox.Sandbox.Ahead) takes one and hands
// it the job, else its sandbox is made now. A sandbox that could not be prepared is
// tried again, up to SandboxTries in all, unless ex is killed meanwhile; the error
// then is the last try's (StartError.Tries).
func (ex *Execution[K]) Start(p Process) (*Run[K], error) {
	for try := 1; ; try++ {
		r, err := ex.start(p)
		var se *StartError
		if !errors.As(err, &se) {
			return r, err
		}
		se.Tries = try
		if se.Step == StepStart || try >= SandboxTries || ex.Reason() != "" {
			return nil, err
		}
		if p.OnSandboxRetry != nil {
			p.OnSandboxRetry(try, se.Err)
		}
		t := time.NewTimer(time.Duration(try) * SandboxRetryWait)
		select {
		case <-t.C:
		case <-ex.killedCh():
			t.Stop()
			return nil, err
		}
	}
}

// start is one try of Start.
func (ex *Execution[K]) start(p Process) (*Run[K], error) {
	if p.Sandbox != nil && p.Sandbox.Ahead(p.Limits) {
		return ex.startAhead(p)
	}
	argv := p.Argv
	var launch func(*exec.Cmd) (func(), error)
	var sj *sandbox.Job
	if p.Sandbox != nil {
		var err error
		if sj, err = p.Sandbox.PrepareWith(p.Dir, p.Argv, p.Limits, sandbox.Extra{Result: p.Result, ResultMax: p.ResultMax}); err != nil {
			return nil, &StartError{Step: StepSandbox, Err: err}
		}
		argv, launch = sj.Argv, sj.Launch
	}
	r := &Run[K]{ex: ex, sj: sj, resultMax: p.ResultMax, stdout: &procrun.Capped{Max: p.OutputMax}, stderr: &procrun.Tail{Max: StderrTail}, stopWatch: func() {}}
	if p.Result != "" {
		r.result = filepath.Join(p.Dir, p.Result)
	}
	stdout, stderr := procrun.Multi{r.stdout}, procrun.Multi{r.stderr}
	if p.Log != nil {
		stdout, stderr = append(stdout, p.Log), append(stderr, p.Log)
	}
	r.started = time.Now()
	proc, err := procrun.Start(procrun.Spec{
		Argv: argv, Dir: p.Dir, Env: p.Env, Stdin: strings.NewReader(p.Script),
		Stdout: stdout, Stderr: stderr, KillGrace: p.KillGrace, Launch: launch,
	})
	if err != nil {
		r.cleanup()
		if errors.Is(err, sandbox.ErrLaunch) {
			return nil, &StartError{Step: StepSandbox, Err: err}
		}
		return nil, &StartError{Step: StepStart, Err: err}
	}
	return r.attach(p, proc)
}

// startAhead starts the process in a sandbox made ahead of it.
func (ex *Execution[K]) startAhead(p Process) (*Run[K], error) {
	sb, err := p.Sandbox.Take(context.Background(), p.Limits)
	if err != nil {
		return nil, &StartError{Step: StepSandbox, Err: err}
	}
	r := &Run[K]{ex: ex, resultMax: p.ResultMax, stdout: &procrun.Capped{Max: p.OutputMax}, stderr: &procrun.Tail{Max: StderrTail}, stopWatch: func() {}}
	stdout, stderr := procrun.Multi{r.stdout}, procrun.Multi{r.stderr}
	if p.Log != nil {
		stdout, stderr = append(stdout, p.Log), append(stderr, p.Log)
	}
	r.started = time.Now()
	proc, sj, err := sb.Hand(sandbox.Handoff{Argv: p.Argv, Env: p.Env, Dir: p.Dir, Script: p.Script,
		Result: p.Result, ResultMax: p.ResultMax, Stdout: stdout, Stderr: stderr, KillGrace: p.KillGrace})
	if err != nil {
		return nil, &StartError{Step: StepSandbox, Err: err}
	}
	r.sj = sj
	return r.attach(p, proc)
}

// attach makes proc the run's process: its sandbox told it started, its limits
// watched, its execution's kills ending it.
func (r *Run[K]) attach(p Process, proc *procrun.Proc) (*Run[K], error) {
	ex, sj := r.ex, r.sj
	r.proc = proc
	if sj != nil {
		if err := sj.Started(); err != nil {
			proc.Kill("start_error")
			proc.Wait()
			r.cleanup()
			return nil, &StartError{Step: StepStarted, Err: err}
		}
		onLimit := p.OnLimit
		if onLimit == nil {
			onLimit = proc.Kill
		}
		r.stopWatch = sj.Watch(onLimit)
	}
	if reason := ex.setProc(proc); reason != "" {
		proc.Kill(reason)
	}
	return r, nil
}

// Kill ends the process group with a reason, without killing the execution: the
// reason shows in Ended.Killed, not in the execution's Reason (a timeout the protocol
// may retry).
func (r *Run[K]) Kill(reason string) { r.proc.Kill(reason) }

// Exited reports whether the run's process has ended by itself, whether or not Wait
// has collected its end yet (lib/procrun: the kernel's view).
func (r *Run[K]) Exited() bool { return r.proc.Exited() }

// OnTimeout is the action of the run's timeout for Supervise: kill (the execution's
// Kill, or the run's own) with the reason "timeout" once the job has run for timeout —
// unless the process has already ended. A timeout is measured by the job: from when
// its command began (sandbox.Job.Begun, the moment of its started_at_us; the making of
// its sandbox is not its time) to its end. It returns how much longer to wait when the
// job's time is not up (Supervise sets the timer again): the timer counts from the
// supervision's start, and the job began later, or has not begun (its sandbox is
// still being made; BeginWait beyond timeout at most). The timer runs in this
// process's clock and fires late when this process was stopped (SIGSTOP, a paused
// VM) or starved; a job that ended meanwhile ended within its time as far as anyone
// can tell, and its end is recorded as it was (exit code, result), not as a timeout.
// A process still running when its time is up has outlived its timeout whatever the
// delay, and is killed.
func (r *Run[K]) OnTimeout(timeout time.Duration, kill func(reason string)) func() time.Duration {
	return func() time.Duration {
		if r.proc.Exited() {
			return 0
		}
		at, ok := r.begun()
		switch {
		case ok:
			if left := timeout - time.Since(at); left > 0 {
				return left
			}
		case time.Since(r.started) < timeout+BeginWait:
			return min(timeout, timeout+BeginWait-time.Since(r.started))
		}
		kill("timeout")
		return 0
	}
}

// Wait waits for the process to end, detaches it from its execution and tears its
// sandbox down (WaitKept, then Release).
func (r *Run[K]) Wait() Ended {
	e := r.WaitKept()
	r.Release()
	return e
}

// WaitKept is Wait that leaves the sandbox's teardown to Release, called once the
// caller has written the run's end — removing the job's cgroup and network is then
// off the time from its end to its dependents' start — when nothing of the run can
// run by then: its first process, PID 1 of its sandbox's PID namespace
// (sandbox.Job.Contained), ended by itself, and the kernel ends every other process
// of a namespace before its first one's end is seen. A run without a namespace of its
// own, or ended by a kill (whose namespace may still be ending), is torn down here, as
// by Wait. What its sandbox says of it (a limit it went over, its result file) is
// read here.
func (r *Run[K]) WaitKept() Ended {
	res := r.proc.Wait()
	r.stopWatch()
	r.ex.setProc(nil)
	e := Ended{Result: res, Output: r.stdout.String(), Stderr: strings.TrimSpace(r.stderr.String())}
	if r.sj != nil {
		e.Limit = r.sj.Reason(res.Signal, res.ExitCode)
		e.ResultFile = r.sj.Result()
	} else if r.result != "" {
		e.ResultFile = sandbox.ReadHostFile(r.result, -1, r.resultMax)
	}
	if r.sj == nil || !r.sj.Contained() || res.Signal != "" || res.Killed != "" {
		r.cleanup()
	}
	return e
}

// Release tears the run's sandbox down after WaitKept (once; Wait does it itself).
func (r *Run[K]) Release() { r.cleanup() }

func (r *Run[K]) cleanup() {
	r.release.Do(func() {
		if r.sj != nil {
			r.sj.Cleanup()
		}
	})
}

// Kills is Supervise's onTimeout that calls kill once, with the reason "timeout" (a
// run that is no process: a handler's call).
func Kills(kill func(reason string)) func() time.Duration {
	return func() time.Duration {
		kill("timeout")
		return 0
	}
}

// Supervision enforces a run's timeout and renews its lease while it runs, on timers:
// nothing waits beside the run (a handler call often ends within a millisecond, and a
// goroutine and a ticker per call cost more than the call).
type Supervision struct {
	mu      sync.Mutex // held by a timer's action, so that Stop waits for one under way
	stopped bool
	timeout *time.Timer
	renew   *time.Timer
}

// Supervise calls onTimeout after timeout (0: never) — again after the time it
// returns, while that is more than 0 — and renew every period (0 or renew nil:
// never), until Stop. The timers run in this process's clock: a script's run passes
// Run.OnTimeout, which judges the timer by the job's own begin and end.
// A renewal that comes late (this process was stopped past the lease) finds the lease
// swept; the caller's renew takes it back when no other claim took the job.
func Supervise(timeout time.Duration, onTimeout func() time.Duration, period time.Duration, renew func()) *Supervision {
	s := &Supervision{}
	s.mu.Lock()
	defer s.mu.Unlock()
	if timeout > 0 {
		s.timeout = time.AfterFunc(timeout, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.stopped {
				return
			}
			if more := onTimeout(); more > 0 {
				s.timeout.Reset(more)
			}
		})
	}
	if period > 0 && renew != nil {
		s.renew = time.AfterFunc(period, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.stopped {
				return
			}
			renew()
			s.renew.Reset(period)
		})
	}
	return s
}

// Stop ends the supervision once the run has ended; a renewal or a timeout under way
// finishes first, and none starts after.
func (s *Supervision) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.timeout != nil {
		s.timeout.Stop()
	}
	if s.renew != nil {
		s.renew.Stop()
	}
}
