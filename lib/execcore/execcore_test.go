package execcore

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sh runs a shell script as an untracked execution's process.
func sh(t *testing.T, ex *Execution[string], script string, outputMax int) *Run[string] {
	t.Helper()
	run, err := ex.Start(Process{Argv: []string{"/bin/sh"}, Dir: t.TempDir(), Env: EnvList(CleanEnv(t.TempDir())), Script: script,
		OutputMax: outputMax, KillGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// waitEnded waits for a run's end, failing the test after the deadline.
func waitEnded(t *testing.T, run *Run[string], deadline time.Duration) Ended {
	t.Helper()
	ch := make(chan Ended, 1)
	go func() { ch <- run.Wait() }()
	select {
	case e := <-ch:
		return e
	case <-time.After(deadline):
		t.Fatalf("the run did not end within %s", deadline)
		return Ended{}
	}
}

// A run's end: stdout kept up to OutputMax, the tail of stderr trimmed, the exit code
// described with it; the environment is the clean one plus the caller's.
func TestRunEnds(t *testing.T) {
	ex := &Execution[string]{Key: "j1"}
	run := sh(t, ex, `echo "$LANG $HOME" | grep -q "C.UTF-8 /" && printf 0123456789; echo oops >&2; exit 3`, 4)
	e := waitEnded(t, run, time.Minute)
	if e.ExitCode != 3 || e.Output != "0123" || e.Stderr != "oops" || e.Describe() != "exit code 3: oops" || e.Killed != "" || e.Limit != "" {
		t.Fatalf("ended %+v (%q)", e, e.Describe())
	}
	if got := EnvList(map[string]string{"B": "2", "A": "1"}); !slices.Equal(got, []string{"A=1", "B=2"}) {
		t.Fatalf("EnvList %v, want sorted KEY=VALUE", got)
	}
}

// A kill ends the process group, children too, and is the execution's reason; a kill
// that came before the start ends the process at its start.
func TestKillEndsTheProcessGroup(t *testing.T) {
	ex := &Execution[string]{Key: "j1"}
	run := sh(t, ex, "sleep 30 & wait", 0)
	ex.Kill("stopped")
	ex.Kill("timeout") // the first reason stays
	if e := waitEnded(t, run, time.Minute); e.Killed != "stopped" || ex.Reason() != "stopped" {
		t.Fatalf("killed run: %+v, reason %q", e, ex.Reason())
	}
	early := &Execution[string]{Key: "j2"}
	early.Kill(ReasonHandedBack)
	run = sh(t, early, "sleep 30", 0)
	if e := waitEnded(t, run, time.Minute); e.Killed != ReasonHandedBack {
		t.Fatalf("run of an execution killed before its start: %+v", e)
	}
}

// Run.Kill ends the process without killing the execution (a timeout the protocol may
// retry: the next attempt still runs).
func TestRunKillLeavesTheExecution(t *testing.T) {
	ex := &Execution[string]{Key: "j1"}
	run := sh(t, ex, "sleep 30", 0)
	run.Kill("timeout")
	if e := waitEnded(t, run, time.Minute); e.Killed != "timeout" || ex.Reason() != "" {
		t.Fatalf("run killed alone: %+v, execution reason %q", e, ex.Reason())
	}
	if e := waitEnded(t, sh(t, ex, "echo again", 100), time.Minute); e.Output != "again\n" {
		t.Fatalf("next attempt: %+v", e)
	}
}

// An interpreter that cannot start is a StartError of step start.
func TestStartError(t *testing.T) {
	ex := &Execution[string]{Key: "j1"}
	_, err := ex.Start(Process{Argv: []string{"/nonexistent/interpreter"}, Dir: t.TempDir()})
	var se *StartError
	if !errors.As(err, &se) || se.Step != StepStart {
		t.Fatalf("start of a missing interpreter: %v", err)
	}
}

// A run that is no process is ended by its cancel func; one killed before SetCancel
// is told so.
func TestCancelledRun(t *testing.T) {
	ex := &Execution[string]{Key: "j1"}
	got := make(chan string, 1)
	if r := ex.SetCancel(func(reason string) { got <- reason }); r != "" {
		t.Fatalf("fresh execution has a kill reason %q", r)
	}
	ex.Kill("lost_lease")
	if r := <-got; r != "lost_lease" {
		t.Fatalf("cancel got %q", r)
	}
	late := &Execution[string]{Key: "j2"}
	late.Kill("stopped")
	if r := late.SetCancel(func(string) {}); r != "stopped" {
		t.Fatalf("SetCancel after a kill returned %q, want stopped", r)
	}
}

// The tracker: Put replaces, Add keeps the one there, Remove removes only its own,
// Stop kills by key.
func TestTracker(t *testing.T) {
	tr := NewTracker[string]()
	defer tr.Close()
	a := tr.Put("k")
	b := tr.Put("k")
	tr.Remove(a) // replaced: b stays
	if tr.Lookup("k") != b || tr.Len() != 1 {
		t.Fatalf("Remove of a replaced execution removed its successor")
	}
	if ex, fresh := tr.Add("k", "w"); fresh || ex != b {
		t.Fatalf("Add over a running key: fresh %v", fresh)
	}
	c, fresh := tr.Add("other", "w1")
	if !fresh || c.Tag != "w1" || len(tr.Running()) != 2 {
		t.Fatalf("Add of a new key: fresh %v tag %q running %d", fresh, c.Tag, len(tr.Running()))
	}
	if !tr.Stop("other", "stopped") || c.Reason() != "stopped" || tr.Stop("none", "stopped") {
		t.Fatal("Stop did not kill by key")
	}
}

// The drain: runs that end within the timeout end as they are; the rest are killed
// with ReasonHandedBack and the end context ends.
func TestDrain(t *testing.T) {
	tr := NewTracker[string]()
	defer tr.Close()
	tr.Begin()
	go tr.Done()
	if !tr.Drain(10 * time.Second) {
		t.Fatal("drain of a run that ends gave up")
	}
	if tr.EndCtx().Err() != nil {
		t.Fatal("the end context ended though every run ended in time")
	}
	ex := tr.Put("stuck")
	tr.Begin()
	go func() {
		defer tr.Done()
		run, err := ex.Start(Process{Argv: []string{"/bin/sh"}, Dir: t.TempDir(), Script: "sleep 600", KillGrace: 100 * time.Millisecond})
		if err == nil {
			run.Wait()
		}
	}()
	start := time.Now()
	if tr.Drain(100 * time.Millisecond) {
		t.Fatal("drain of a run that does not end said it ended")
	}
	if ex.Reason() != ReasonHandedBack || tr.EndCtx().Err() == nil || time.Since(start) > time.Minute {
		t.Fatalf("after the drain gave up: reason %q, end context %v, %s", ex.Reason(), tr.EndCtx().Err(), time.Since(start))
	}
	if tr.JobCtx().Err() != nil {
		t.Fatal("the job context ended before Close")
	}
}

// Supervise: the timeout fires once, renewals repeat, and none comes after Stop.
func TestSupervise(t *testing.T) {
	timedOut := make(chan struct{})
	var renewals atomic.Int32
	renewed := make(chan struct{}, 64)
	sv := Supervise(50*time.Millisecond, func() time.Duration { close(timedOut); return 0 }, 10*time.Millisecond, func() {
		renewals.Add(1)
		select {
		case renewed <- struct{}{}:
		default:
		}
	})
	select {
	case <-timedOut:
	case <-time.After(time.Minute):
		t.Fatal("the timeout did not fire")
	}
	deadline := time.After(time.Minute)
	for n := 0; n < 3; n++ {
		select {
		case <-renewed:
		case <-deadline:
			t.Fatalf("%d renewals, want several", n)
		}
	}
	sv.Stop()
	n := renewals.Load()
	// Nothing to wait for: a renewal timer left running would fire ~10 times in this.
	<-time.After(100 * time.Millisecond)
	if renewals.Load() != n {
		t.Fatalf("renewals went on after Stop: %d, then %d", n, renewals.Load())
	}
}

// The clean environment holds PATH, HOME and LANG only.
func TestCleanEnvHasNoHostVariables(t *testing.T) {
	env := CleanEnv("/scratch")
	if len(env) != 3 || env["HOME"] != "/scratch" || !strings.Contains(env["PATH"], "/usr/bin") {
		t.Fatalf("clean environment %v", env)
	}
}

// A timeout judges the job by its process (issue 43): a process that ended by itself
// before its timer fired (a runner frozen past the job's timeout collects its end
// late) is not killed as timed out, and keeps its own end; one still running is killed.
func TestTimeoutSparesAProcessThatEnded(t *testing.T) {
	ex := &Execution[string]{Key: "j1"}
	run := sh(t, ex, "exit 0", 0)
	deadline := time.Now().Add(time.Minute)
	for !run.Exited() {
		if time.Now().After(deadline) {
			t.Fatal("the process never ended")
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel's view, no event to wait on
	}
	run.OnTimeout(time.Millisecond, ex.Kill)() // the timer, late
	if e := waitEnded(t, run, time.Minute); ex.Reason() != "" || e.ExitCode != 0 || e.Killed != "" {
		t.Fatalf("an ended process was timed out: reason %q, %+v", ex.Reason(), e)
	}

	ex = &Execution[string]{Key: "j2"}
	run = sh(t, ex, "sleep 30", 0)
	sv := Supervise(20*time.Millisecond, run.OnTimeout(20*time.Millisecond, ex.Kill), 0, nil)
	e := waitEnded(t, run, time.Minute)
	sv.Stop()
	if ex.Reason() != "timeout" || e.Killed != "timeout" {
		t.Fatalf("a running process past its timeout: reason %q, %+v", ex.Reason(), e)
	}
}
