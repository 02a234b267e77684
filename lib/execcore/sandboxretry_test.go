package execcore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/sandbox"
)

// noneSandbox is a sandbox of mode none (its trampoline, the job's cgroup where one
// may be made): its preparation fails while the work directory is missing.
func noneSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	s, err := sandbox.New(context.Background(), sandbox.Options{Mode: sandbox.ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// A sandbox that could not be prepared is the runner's fault, not the job's: Start
// tries again (each failure told to OnSandboxRetry), and the job runs once, in the
// sandbox that was made.
func TestSandboxPreparedAgainAfterAFailure(t *testing.T) {
	s := noneSandbox(t)
	dir := filepath.Join(t.TempDir(), "work") // missing at the first try
	var tries []int
	ex := &Execution[string]{Key: "j1"}
	run, err := ex.Start(Process{Argv: []string{"/bin/sh"}, Dir: dir, Env: EnvList(CleanEnv(dir)), Script: "echo ran", OutputMax: 64,
		Sandbox: s, KillGrace: 100 * time.Millisecond, OnSandboxRetry: func(try int, err error) {
			tries = append(tries, try)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Error(err)
			}
		}})
	if err != nil {
		t.Fatalf("start after a failed preparation: %v", err)
	}
	if e := waitEnded(t, run, time.Minute); e.ExitCode != 0 || e.Output != "ran\n" {
		t.Fatalf("the run: %+v", e)
	}
	if len(tries) != 1 || tries[0] != 1 {
		t.Fatalf("retries told: %v, want [1]", tries)
	}
}

// A sandbox that cannot be prepared at all is tried SandboxTries times, then its
// error says so; a kill meanwhile (a stop, the shutdown's hand-back) ends the tries.
func TestSandboxTriesBounded(t *testing.T) {
	s := noneSandbox(t)
	dir := filepath.Join(t.TempDir(), "never")
	var tries []int
	ex := &Execution[string]{Key: "j1"}
	_, err := ex.Start(Process{Argv: []string{"/bin/sh"}, Dir: dir, Script: "echo ran", Sandbox: s,
		OnSandboxRetry: func(try int, _ error) { tries = append(tries, try) }})
	var se *StartError
	if !errors.As(err, &se) || se.Step != StepSandbox || se.Tries != SandboxTries {
		t.Fatalf("start without a sandbox: %v (%+v), want a StartError of step sandbox after %d tries", err, se, SandboxTries)
	}
	if len(tries) != SandboxTries-1 {
		t.Fatalf("retries told: %v, want %d", tries, SandboxTries-1)
	}
	killed := &Execution[string]{Key: "j2"}
	_, err = killed.Start(Process{Argv: []string{"/bin/sh"}, Dir: dir, Script: "echo ran", Sandbox: s,
		OnSandboxRetry: func(int, error) { killed.Kill(ReasonHandedBack) }})
	if !errors.As(err, &se) || se.Tries != 1 || killed.Reason() != ReasonHandedBack {
		t.Fatalf("start killed after its first try: %v (%+v), reason %q", err, se, killed.Reason())
	}
	// An interpreter that cannot start is not tried again (the job's own command).
	_, err = (&Execution[string]{Key: "j3"}).Start(Process{Argv: []string{"/nonexistent/interpreter"}, Dir: t.TempDir(),
		OnSandboxRetry: func(int, error) { t.Error("an interpreter's failure tried again") }})
	if !errors.As(err, &se) || se.Step != StepStart || se.Tries != 1 {
		t.Fatalf("interpreter missing: %v (%+v)", err, se)
	}
}
