package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/procrun"
	"github.com/hero-coordinator/hero/lib/testutil/proctest"
)

// newAheadSandbox is newSandbox with sandboxes made ahead (max of them).
func newAheadSandbox(t *testing.T, max int) *Sandbox {
	t.Helper()
	return newAheadSandboxWith(t, Options{Ahead: AheadOptions{Max: max}})
}

// newAheadSandboxWith is newSandbox with opt (its uid, gid and binds newSandbox's).
func newAheadSandboxWith(t *testing.T, opt Options) *Sandbox {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed (apt-get install bubblewrap)")
	}
	scratch, err := os.MkdirTemp("", "hero-sbx-scratch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(scratch) })
	if err := os.Chmod(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	opt.UID, opt.GID, opt.Binds = 61000, 61000, []string{scratch}
	s, err := New(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// eachWay runs a test of jobs with sandboxes made for them (cold) and made ahead.
func eachWay(t *testing.T, f func(t *testing.T, s *Sandbox)) {
	t.Run("cold", func(t *testing.T) { f(t, newSandbox(t)) })
	t.Run("ahead", func(t *testing.T) { f(t, newAheadSandbox(t, 2)) })
	t.Run("fork", func(t *testing.T) { f(t, newForkSandbox(t, 2)) })
}

// runAhead runs a job in a sandbox made ahead (runJob's way for such a sandbox).
func runAhead(t *testing.T, s *Sandbox, script string, env []string, lim Limits, x Extra) (string, procrun.Result, string, Result) {
	t.Helper()
	return runAheadIn(t, s, "hero-sbx-test-", script, env, lim, x)
}

// runAheadIn is runAhead in the work directory of pattern (WorkDir's).
func runAheadIn(t *testing.T, s *Sandbox, pattern, script string, env []string, lim Limits, x Extra) (string, procrun.Result, string, Result) {
	t.Helper()
	dir, _, err := s.WorkDir("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Take(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	var out procrun.Capped
	out.Max = 1 << 20
	proc, j, err := p.Hand(Handoff{Argv: []string{"/bin/sh", "-s"}, Env: env, Dir: dir, Script: script, Result: x.Result, ResultMax: x.ResultMax, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Cleanup()
	stop := j.Watch(func(reason string) { proc.Kill(reason) })
	res := proc.Wait()
	stop()
	reason := j.Reason(res.Signal, res.ExitCode)
	if res.Killed != "" && reason == "" {
		reason = res.Killed
	}
	return out.String(), res, reason, j.Result()
}

// A sandbox made ahead runs its job as a sandbox made for it does: its environment
// exactly, its script on stdin, its work directory, its result file.
func TestAheadRunsTheJob(t *testing.T) {
	s := newAheadSandbox(t, 2)
	lim := Limits{MemoryBytes: 256 << 20, Pids: 64, DiskBytes: 16 << 20}
	script := `echo "pwd=$PWD home=$HOME env=$(env | cut -d= -f1 | sort | tr '\n' ,)"; echo "x=$FOO" > result; echo oops >&2; exit 3`
	out, res, reason, r := runAhead(t, s, script, []string{"PATH=/usr/bin:/bin", "HOME=/tmp/hero-job-1-1-7", "FOO=b'a r"}, lim, Extra{Result: "result", ResultMax: 100})
	if res.ExitCode != 3 || reason != "" || string(r.Data) != "x=b'a r\n" {
		t.Fatalf("exit %d reason %q result %+v:\n%s", res.ExitCode, reason, r, out)
	}
	for _, want := range []string{"pwd=/tmp/hero-sbx-test home=/tmp/hero-job-1-1-7 env=FOO,HOME,PATH,PWD,", "oops"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	// A name no shell can hold is left out, as the wrapper's shell leaves it out of a
	// sandbox made for its job (the API refuses such names).
	out, res, _, _ = runAhead(t, s, `env | cut -d= -f1 | sort | tr '\n' ,`, []string{"PATH=/usr/bin:/bin", "odd-name=1"}, lim, Extra{})
	if res.ExitCode != 0 || out != "PATH,PWD," {
		t.Fatalf("environment with an odd name: exit %d: %q", res.ExitCode, out)
	}
	// The next jobs of these limits find one ready (made while the first ran).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WaitAhead(ctx, func(ready, _ int) bool { return ready >= 2 }); err != nil {
		ready, _ := s.AheadCounts()
		t.Fatalf("%d sandboxes ready a minute after the first job, want 2", ready)
	}
}

// A job given the work directory a sandbox made ahead has made already (JobDir, the
// runner's) starts there with no program run before it (issue 44: each is a dependent
// step's time): the wrapper is PID 1 of its sandbox and the job's interpreter PID 2,
// where a directory made at the handoff has a mkdir run first. The directory is the
// job's alone (0700) and empty; another name is made at the handoff as before.
func TestAheadJobDirMadeWithTheSandbox(t *testing.T) {
	s := newAheadSandbox(t, 1)
	lim := Limits{Pids: 64, DiskBytes: 16 << 20}
	env := []string{"PATH=/usr/bin:/bin"}
	script := `echo "pid=$$ pwd=$PWD mode=$(stat -c %a .) files=$(ls -A | wc -l)"`
	out, res, _, _ := runAheadIn(t, s, JobDir, script, env, lim, Extra{})
	if want := "pid=2 pwd=/tmp/hero-job mode=700 files=0"; res.ExitCode != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("job in JobDir: exit %d: %q, want %q", res.ExitCode, out, want)
	}
	out, res, _, _ = runAheadIn(t, s, "hero-sbx-test-", script, env, lim, Extra{})
	if want := "pid=3 pwd=/tmp/hero-sbx-test mode=700 files=0"; res.ExitCode != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("job in a directory of another name: exit %d: %q, want %q", res.ExitCode, out, want)
	}
}

// Acceptance (issue 44): a sandbox made ahead serves one job. A job leaves a file in
// its /tmp, a process in the background and a file in /dev/shm; the next job of the
// same limits (in a sandbox made ahead too) sees none of them.
func TestAheadSandboxServesOneJob(t *testing.T) {
	s := newAheadSandbox(t, 1)
	lim := Limits{Pids: 64, DiskBytes: 16 << 20}
	marker := fmt.Sprintf("hero-sbx-leftover-%d", time.Now().UnixNano())
	env := []string{"PATH=/usr/bin:/bin"}
	out, res, _, _ := runAhead(t, s, fmt.Sprintf(`echo one > /tmp/left; echo one > /dev/shm/left; echo one > left
(exec -a %s sleep 300) & echo "pid=$!"`, marker), env, lim, Extra{})
	if res.ExitCode != 0 {
		t.Fatalf("job 1: exit %d: %s", res.ExitCode, out)
	}
	out, res, _, _ = runAhead(t, s, `ls -a /tmp /dev/shm; cat /tmp/left /dev/shm/left 2>/dev/null && echo LEAK-file
ps -eo comm= 2>/dev/null | grep -q sleep && echo LEAK-process; ls /proc | grep -c '^[0-9]' `, env, lim, Extra{})
	if res.ExitCode != 0 || strings.Contains(out, "LEAK") || strings.Contains(out, "left") {
		t.Fatalf("job 2 saw job 1's leftovers: exit %d:\n%s", res.ExitCode, out)
	}
	if pids := proctest.Pgrep(marker); len(pids) > 0 {
		t.Fatalf("job 1's background process outlived it: %v", pids)
	}
}

// Acceptance (issue 44, 3): a sandbox made ahead is used by one job, never by
// another. Once handed a job, handing it a second one is refused (ErrLaunch) and runs
// nothing in it, even while its first job runs; each job of the same limits takes a
// sandbox of its own (another process group, another cgroup), never one used before —
// with at most one made ahead at a time.
func TestAheadSandboxIsHandedOnce(t *testing.T) {
	s := newAheadSandbox(t, 1)
	lim := Limits{Pids: 64, MemoryBytes: 256 << 20}
	env := []string{"PATH=/usr/bin:/bin"}
	groups, cgroups := map[int]bool{}, map[string]bool{}
	for i := 0; i < 3; i++ {
		p, err := s.Take(context.Background(), lim)
		if err != nil {
			t.Fatal(err)
		}
		pgid := p.cmd.Process.Pid
		if groups[pgid] {
			t.Fatalf("job %d took the sandbox (group %d) of a job before it", i+1, pgid)
		}
		groups[pgid] = true
		dir, _, _ := s.WorkDir("", "hero-sbx-test-")
		var out procrun.Capped
		out.Max = 1 << 20
		proc, j, err := p.Hand(Handoff{Argv: []string{"/bin/sh", "-s"}, Env: env, Dir: dir, Script: "echo first", Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := p.Hand(Handoff{Argv: []string{"/bin/sh", "-s"}, Env: env, Dir: dir, Script: "echo SECOND"}); !errors.Is(err, ErrLaunch) {
			t.Fatalf("job %d: a second job handed to its sandbox: %v, want ErrLaunch", i+1, err)
		}
		if res := proc.Wait(); res.ExitCode != 0 || out.String() != "first\n" {
			t.Fatalf("job %d: exit %d: %q", i+1, res.ExitCode, out.String())
		}
		if j.group != nil {
			for _, d := range j.group.directories() {
				if cgroups[d] {
					t.Fatalf("job %d's cgroup %s was a job's before it", i+1, d)
				}
				cgroups[d] = true
			}
		}
		j.Cleanup()
	}
}

// Warm makes sandboxes for limits no job asked for yet (the runner's defaults at its
// start): they are ready before the first job, which takes one without another being
// made for it; limits the sandboxes are not made ahead for (outbound network) get none.
func TestAheadWarmBeforeTheFirstJob(t *testing.T) {
	s := newAheadSandbox(t, 2)
	lim := Limits{Pids: 64, DiskBytes: 16 << 20}
	s.Warm(Limits{Pids: 64, Network: model.NetworkOutbound})
	if ready, making := s.AheadCounts(); ready+making != 0 {
		t.Fatalf("outbound limits warmed: %d ready, %d making", ready, making)
	}
	s.Warm(lim)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WaitAhead(ctx, func(ready, making int) bool { return ready == 2 && making == 0 }); err != nil {
		ready, making := s.AheadCounts()
		t.Fatalf("warmed sandboxes not ready: %d ready, %d making: %v", ready, making, err)
	}
	p, err := s.Take(ctx, lim)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Destroy()
	if ready, _ := s.AheadCounts(); ready != 1 {
		t.Fatalf("after the first job took one: %d ready, want the other warmed one", ready)
	}
}
