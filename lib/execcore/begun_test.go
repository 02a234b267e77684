package execcore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/sandbox"
)

// Acceptance (issue 43): a run's timeout counts from when its job's own command began
// (its sandbox said "begun": the moment of its started_at_us), not from its launch: the
// making of its sandbox is not the job's time. Here the sandbox is made only once the
// test lets it (bwrap behind a gate); the run's timer passes meanwhile, and the job,
// `exit 0` once begun, ends with its own end, not "timeout", its start after the
// gate opened. Before, the timer counted from the launch (on a loaded machine a
// sandbox's making took the rest of a chaos job's 8 s), and the run was killed as
// timed out before its command began.
func TestTimeoutCountsFromTheJobsBegin(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("bwrap is not installed")
	}
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	hold := filepath.Join(dir, "hold")
	slow := filepath.Join(dir, "bwrap")
	// The sandbox's trial (New) passes; every sandbox after it waits at the gate.
	script := fmt.Sprintf("#!/bin/sh\nif [ -e %[1]q ]; then read _ < %[2]q; fi\nexec %[3]q \"$@\"\n", hold, gate, bwrap)
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(context.Background(), sandbox.Options{Bwrap: slow})
	if err != nil {
		t.Skip("no sandbox here:", err)
	}
	t.Cleanup(sb.Close)
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	work, remove, err := sb.WorkDir("", "hero-begun-")
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	ex := &Execution[string]{Key: "j1"}
	run, err := ex.Start(Process{Argv: []string{"/bin/sh", "-s"}, Dir: work, Env: EnvList(CleanEnv(work)), Script: "exit 0",
		Sandbox: sb, KillGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 3 * time.Second // the job's own time: `exit 0` in it
	onTimeout := run.OnTimeout(timeout, ex.Kill)
	fired := make(chan struct{})
	sv := Supervise(timeout, func() time.Duration {
		more := onTimeout()
		select {
		case <-fired:
		default:
			close(fired) // the timer passed, the sandbox still held at its gate
		}
		return more
	}, 0, nil)
	defer sv.Stop()
	select {
	case <-fired:
	case <-time.After(time.Minute):
		t.Fatal("the run's timer never fired")
	}
	opened := time.Now()
	f, err := os.OpenFile(gate, os.O_WRONLY, 0) // the sandbox is made from now on
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("go\n"))
	_ = f.Close()
	e := waitEnded(t, run, time.Minute)
	if ex.Reason() != "" || e.Killed != "" || e.ExitCode != 0 {
		t.Fatalf("a job that exited 0 in its own time ended %+v (reason %q, %s)", e, ex.Reason(), e.Describe())
	}
	if started := run.StartedAt(); started.Before(opened) {
		t.Errorf("the run's start is %v before its sandbox could be made: its launch, not its job's begin", opened.Sub(started))
	}
}
