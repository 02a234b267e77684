package execcore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/sandbox"
)

// jobCgroups lists the job cgroups under parent (the pids controller's, in v1).
func jobCgroups(t *testing.T, parent string) []string {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup", parent)
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		dir = filepath.Join("/sys/fs/cgroup/pids", parent)
	}
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "job-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// A sandboxed run that ended by itself keeps its sandbox's teardown (its cgroup
// removed) for Release, which the caller calls once the run's end is written: it is
// off the time to the dependents' start. Nothing of the run runs meanwhile (its PID
// namespace ended with it: its background process is gone). A run killed, or one
// without a PID namespace of its own (--sandbox none), is torn down by WaitKept
// itself, as by Wait.
func TestWaitKeptLeavesTheTeardownToRelease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (job cgroups, the job uid)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed")
	}
	parent := fmt.Sprintf("hero-execcore-test-%d", os.Getpid())
	lim := sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64, DiskBytes: 16 << 20}
	marker := fmt.Sprintf("hero-execcore-left-%d", time.Now().UnixNano())
	// The job's user reaches its work directory under --sandbox none (its first process
	// starts as that user): a parent it may pass through, as the runner's --work-dir.
	parentDir, err := os.MkdirTemp("", "hero-execcore-work-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parentDir) })
	if err := os.Chmod(parentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{sandbox.ModeBwrap, sandbox.ModeNone} {
		s, err := sandbox.New(context.Background(), sandbox.Options{Mode: mode, UID: 61000, GID: 61000, CgroupParent: parent})
		if err != nil {
			t.Fatal(err)
		}
		if s.Describe() == "" || strings.Contains(s.Describe(), "rlimits") {
			s.Close()
			t.Skip("no job cgroups here")
		}
		start := func(script string) *Run[string] {
			t.Helper()
			dir, remove, err := s.WorkDir(parentDir, "hero-execcore-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(remove)
			run, err := (&Execution[string]{Key: "j"}).Start(Process{Argv: []string{"/bin/sh"}, Dir: dir, Env: EnvList(CleanEnv(dir)),
				Script: script, Sandbox: s, Limits: lim, KillGrace: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return run
		}
		// Ended by itself, leaving a process in the background.
		run := start(fmt.Sprintf("(exec -a %s sleep 300) >/dev/null 2>&1 &", marker))
		e := run.WaitKept()
		left := jobCgroups(t, parent)
		if mode == sandbox.ModeBwrap {
			if e.ExitCode != 0 || len(left) != 1 {
				t.Fatalf("%s: ended %+v; job cgroups before Release %v, want its one", mode, e, left)
			}
			if out, _ := exec.Command("pgrep", "-f", marker).Output(); len(out) > 0 {
				t.Fatalf("%s: the job's background process runs after its end: %s", mode, out)
			}
		} else if len(left) != 0 {
			t.Fatalf("%s: job cgroups after WaitKept %v, want none (no PID namespace: torn down at once)", mode, left)
		}
		run.Release()
		run.Release() // once
		if left := jobCgroups(t, parent); len(left) != 0 {
			t.Fatalf("%s: job cgroups after Release: %v", mode, left)
		}
		// Killed: torn down at once.
		run = start("sleep 300")
		run.Kill("timeout")
		if e := run.WaitKept(); e.Killed != "timeout" {
			t.Fatalf("%s: killed run ended %+v", mode, e)
		}
		if left := jobCgroups(t, parent); len(left) != 0 {
			t.Fatalf("%s: job cgroups after a killed run's WaitKept: %v", mode, left)
		}
		run.Release()
		s.Close()
	}
	for _, c := range []string{"", "memory", "pids", "cpu"} {
		_ = os.Remove(filepath.Join("/sys/fs/cgroup", c, parent))
	}
	if out, _ := exec.Command("pgrep", "-f", marker).Output(); len(out) > 0 {
		t.Fatalf("the job's background process outlived it: %s", out)
	}
}
