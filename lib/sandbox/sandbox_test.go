package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/procrun"
	"github.com/hero-coordinator/hero/lib/testutil/proctest"
)

// newSandbox is a sandbox whose jobs run as uid 61000 and may write one host
// directory, scratchDir's (to signal the test).
func newSandbox(t *testing.T) *Sandbox { t.Helper(); return newSandboxOwners(t, "") }

// newSandboxOwners is newSandbox with its runners' lock files in owners ("": the
// host's).
func newSandboxOwners(t *testing.T, owners string) *Sandbox {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed (apt-get install bubblewrap)")
	}
	scratch, err := os.MkdirTemp("", "hero-sbx-scratch-") // the job's user reaches it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(scratch) })
	if err := os.Chmod(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Options{UID: 61000, GID: 61000, Binds: []string{scratch}, OwnersDir: owners})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// scratchDir is the host directory the sandbox's jobs may write.
func scratchDir(s *Sandbox) string { return s.opt.Binds[0] }

// run runs a shell script in the sandbox and returns its output and result.
func run(t *testing.T, s *Sandbox, script string, env []string, lim Limits) (string, procrun.Result, string) {
	t.Helper()
	out, res, reason, _ := runJob(t, s, script, env, lim, Extra{})
	return out, res, reason
}

// runJob is run with more of the job's settings (its result file); it returns what
// was taken of its result file too.
func runJob(t *testing.T, s *Sandbox, script string, env []string, lim Limits, x Extra) (string, procrun.Result, string, Result) {
	t.Helper()
	if s.Ahead(lim) && len(x.ReadOnly) == 0 && !x.ShareNet && !x.HostDir {
		return runAhead(t, s, script, env, lim, x)
	}
	dir, remove, err := s.WorkDir(os.TempDir(), "hero-sbx-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	j, err := s.PrepareWith(dir, []string{"/bin/sh", "-s"}, lim, x)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Cleanup()
	var out procrun.Capped
	out.Max = 1 << 20
	p, err := procrun.Start(procrun.Spec{Argv: j.Argv, Dir: dir, Env: env, Stdin: strings.NewReader(script), Stdout: &out, Stderr: &out, Launch: j.Launch})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Started(); err != nil {
		p.Kill("start_error")
		p.Wait()
		t.Fatal(err)
	}
	stop := j.Watch(func(reason string) { p.Kill(reason) })
	res := p.Wait()
	stop()
	reason := j.Reason(res.Signal, res.ExitCode)
	if res.Killed != "" && reason == "" {
		reason = res.Killed
	}
	return out.String(), res, reason, j.Result()
}

// A job sees its own processes only, the environment it was given and nothing of
// the host's files but the system's programs: not /root, not a service's secret
// file, not another job's directory; it has no network; it is not root outside.
func TestIsolation(t *testing.T) { eachWay(t, testIsolation) }

func testIsolation(t *testing.T, s *Sandbox) {
	secretDir, _ := os.MkdirTemp("", "hero-service-secret-")
	defer func() { _ = os.RemoveAll(secretDir) }()
	secret := filepath.Join(secretDir, "redis-password")
	_ = os.WriteFile(secret, []byte("hunter2"), 0o644)
	other, _ := os.MkdirTemp("", "hero-sbx-other-job-")
	defer func() { _ = os.RemoveAll(other) }()
	_ = os.WriteFile(filepath.Join(other, "result"), []byte("K=V"), 0o644)
	script := fmt.Sprintf(`
echo "env=$(env | cut -d= -f1 | sort | tr '\n' ,)"
cat %s 2>/dev/null && echo LEAK-secret
cat %s/result 2>/dev/null && echo LEAK-other
ls /root 2>/dev/null && echo LEAK-root
cat /etc/shadow 2>/dev/null && echo LEAK-shadow
echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ,)"
(exec 3<>/dev/tcp/127.0.0.1/22) 2>/dev/null && echo LEAK-net
unshare -U true 2>/dev/null && echo LEAK-userns
echo "uid=$(id -u)"
`, secret, other)
	script += fmt.Sprintf("test -d /proc/%d && echo LEAK-proc\nkill -0 %d 2>/dev/null && echo LEAK-signal\ntrue\n", os.Getpid(), os.Getpid())
	out, res, _ := run(t, s, script, []string{"PATH=/usr/bin:/bin", "HERO_JOB_ID=7", "FOO=bar"}, Limits{})
	if res.ExitCode != 0 || strings.Contains(out, "LEAK") {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	for _, want := range []string{"env=FOO,HERO_JOB_ID,PATH,PWD,", "ifaces=lo,\n", "uid="} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	// Outside, the job's processes are not root when the runner is: uid 61000.
	if os.Geteuid() == 0 {
		// The job's script runs as `sh ./<marker>.sh` and says it is up; its process is
		// found by the marker, then killed (which ends the job).
		marker := fmt.Sprintf("hero-sbx-uid-%d", time.Now().UnixNano())
		up, err := proctest.NewSignal(scratchDir(s))
		if err != nil {
			t.Fatal(err)
		}
		defer up.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			run(t, s, fmt.Sprintf("echo 'echo up > %s; sleep 60' > %s.sh; sh ./%s.sh", up.Path, marker, marker), []string{"PATH=/usr/bin:/bin"}, Limits{})
		}()
		if !up.Wait(1, time.Minute) {
			t.Fatal("the job did not start")
		}
		pids := proctest.Pgrep(marker)
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", append(pids, 0)[0]))
		if err != nil || !strings.Contains(string(st), "\nUid:\t61000\t") {
			t.Errorf("the job's process (pids %v) does not run as uid 61000: %v\n%s", pids, err, st)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		<-done
	}
}

// A process a job double-forks into a new session does not outlive the job.
func TestNothingOutlivesTheJob(t *testing.T) { eachWay(t, testNothingOutlivesTheJob) }

func testNothingOutlivesTheJob(t *testing.T, s *Sandbox) {
	marker := fmt.Sprintf("hero-sbx-orphan-%d", time.Now().UnixNano())
	// The job ends once its child (`sh ./<marker>.sh`, in a session of its own) is up
	// and has said so through a pipe.
	script := fmt.Sprintf("mkfifo up; echo 'echo > up; sleep 300' > %[1]s.sh; setsid sh ./%[1]s.sh </dev/null >/dev/null 2>&1 & read x < up; echo started", marker)
	out, res, _ := run(t, s, script, []string{"PATH=/usr/bin:/bin"}, Limits{})
	if res.ExitCode != 0 || !strings.Contains(out, "started") {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	pids := proctest.Pgrep(marker)
	if left, err := proctest.WaitExit(pids, time.Minute); err != nil || len(left) > 0 {
		t.Fatalf("the job's setsid child is alive after the job: pids %v (%v)", left, err)
	}
}

// Over a limit, a job ends with the limit's reason.
func TestLimits(t *testing.T) { eachWay(t, testLimits) }

func testLimits(t *testing.T, s *Sandbox) {
	if s.cg == nil {
		t.Skip("no cgroups here")
	}
	_, res, reason := run(t, s, "python3 -c 'b = bytearray(300 << 20); print(len(b))'", []string{"PATH=/usr/bin:/bin"}, Limits{MemoryBytes: 64 << 20})
	if reason != ReasonMemory {
		t.Errorf("memory: reason %q, result %+v", reason, res)
	}
	out, res, reason := run(t, s, "for i in $(seq 1 50); do sleep 5 & done; wait", []string{"PATH=/usr/bin:/bin"}, Limits{Pids: 10})
	if reason != ReasonPids {
		t.Errorf("pids: reason %q, result %+v, %s", reason, res, out)
	}
	_, res, reason = run(t, s, "head -c 2000000 /dev/zero > big", []string{"PATH=/usr/bin:/bin"}, Limits{FileSizeBytes: 1 << 20})
	if reason != ReasonFileSize {
		t.Errorf("file size: reason %q, result %+v", reason, res)
	}
	out, res, reason = run(t, s, "echo fine", []string{"PATH=/usr/bin:/bin"}, Limits{MemoryBytes: 64 << 20, Pids: 10, CPUMillis: 500, FileSizeBytes: 1 << 20})
	if reason != "" || res.ExitCode != 0 || strings.TrimSpace(out) != "fine" {
		t.Errorf("within limits: %q %+v %q", reason, res, out)
	}
}

// A runner starting beside another on the same host removes only the job cgroups of
// runners that are gone: the other's fresh (still empty) cgroup is about to take a job.
func TestStartLeavesLiveRunnersCgroups(t *testing.T) {
	s, live, dead := twoRunnersCgroups(t)
	newSandboxOwners(t, s.own.dir) // a second runner's start
	for _, d := range live.dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a live runner's job cgroup was removed: %v", err)
		}
	}
	for _, d := range dead.dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("a gone runner's empty job cgroup stayed: %v", err)
		}
	}
}

// A runner starting on a host where another was killed ends the processes that runner
// left in its job cgroups (a job caught mid-launch outlives it) and removes the
// cgroups; a live runner's job keeps running.
func TestStartEndsGoneRunnersJobs(t *testing.T) {
	s, live, dead := twoRunnersCgroups(t)
	// job starts a stand-in job process in cgroup g.
	job := func(g *jobGroup) *exec.Cmd {
		t.Helper()
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		for _, f := range g.procsFiles() {
			if err := os.WriteFile(f, []byte(strconv.Itoa(c.Process.Pid)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	liveJob, orphan := job(live), job(dead)
	ended := make(chan error, 1)
	go func() { ended <- orphan.Wait() }()

	newSandboxOwners(t, s.own.dir) // a runner's start
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the gone runner's job still runs after a runner started")
	}
	for _, d := range dead.dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the gone runner's job cgroup stayed: %v", err)
		}
	}
	if err := liveJob.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the live runner's job was ended: %v", err)
	}
}

// twoRunnersCgroups is a sandbox with cgroups (the test is skipped without them), a
// job cgroup of a live runner (an owner whose lock this test holds until it ends) and
// one of a runner that is gone (an owner whose lock file is left unlocked, as a killed
// runner leaves it); both are emptied and removed when the test ends. The owners'
// lock files are the test's own: a runner that another test starts on this host
// meanwhile (an end-to-end test's) would rightly judge the gone one's and take its
// cgroup or, with none in its sight, its lock file, before this test's start looked.
func twoRunnersCgroups(t *testing.T) (s *Sandbox, live, dead *jobGroup) {
	t.Helper()
	s = newSandboxOwners(t, t.TempDir())
	if s.cg == nil || s.own.dir == "" {
		t.Skip("no cgroups here")
	}
	other := newOwner(s.own.dir) // stands for another runner process
	t.Cleanup(other.release)
	gone := newOwner(s.own.dir)
	_ = gone.lock.Close() // its runner died: the kernel let the lock go
	t.Cleanup(func() { _ = os.Remove(filepath.Join(gone.dir, gone.instance+".lock")) })
	var err error
	if live, err = s.cg.create(other.cgroupName(1), Limits{Pids: 10}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.kill(time.Second); live.remove() })
	if dead, err = s.cg.create(gone.cgroupName(1), Limits{Pids: 10}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.kill(time.Second); dead.remove() })
	return s, live, dead
}

// gateSeen is a job's first process as a Pause hook saw it at a step.
type gateSeen struct {
	exe, status, cgroup string
}

// gateRun runs script through /bin/sh -s in a sandbox of mode (the job's user 61000,
// limits of 64 pids, 256 MiB, files of 1 MiB), seeing its first process at its gate
// ("spawned") and at its gate's pass ("gated"); it returns those, the job's output,
// its work directory and its cgroup's name ("" without one).
func gateRun(t *testing.T, mode, script string) (spawned, gated gateSeen, out, dir, cgroup string) {
	t.Helper()
	at := map[string]gateSeen{}
	// The job reads its script from a pipe written once its process has been seen
	// through its gate: until then it cannot end (a process that has ended shows no
	// cgroup of its own in /proc, and a fast job ended before it was looked at).
	scriptR, scriptW := io.Pipe()
	defer scriptW.Close()
	pause := func(step string, pid int) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		at[step] = gateSeen{exe, string(st), string(cg)}
		if step == "gated" {
			go func() { _, _ = io.WriteString(scriptW, script); _ = scriptW.Close() }()
		}
	}
	s, err := New(context.Background(), Options{Mode: mode, UID: 61000, GID: 61000, Pause: pause})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir, remove, err := s.WorkDir("", "hero-sbx-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	lim := Limits{Pids: 64, MemoryBytes: 256 << 20, FileSizeBytes: 1 << 20}
	j, err := s.PrepareWith(dir, []string{"/bin/sh", "-s"}, lim, Extra{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Cleanup()
	if j.group != nil {
		cgroup = filepath.Base(j.group.directories()[0])
	}
	var o procrun.Capped
	o.Max = 1 << 20
	p, err := procrun.Start(procrun.Spec{Argv: j.Argv, Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, Stdin: scriptR, Stdout: &o, Stderr: &o, Launch: j.Launch})
	if err != nil {
		t.Fatal(err)
	}
	if res := p.Wait(); res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, o.String())
	}
	return at["spawned"], at["gated"], o.String(), dir, cgroup
}

// checkGate: at its gate the job's first process is the job's user without groups,
// in no cgroup of the job's; at its gate's pass it is in the job's cgroup.
func checkGate(t *testing.T, what string, spawned, gated gateSeen, cgroup string) {
	t.Helper()
	_, groups, _ := strings.Cut(spawned.status, "\nGroups:")
	groups, _, _ = strings.Cut(groups, "\n")
	if !strings.Contains(spawned.status, "\nUid:\t61000\t61000\t61000\t61000\n") || strings.TrimSpace(groups) != "" {
		t.Errorf("%s at its gate is not the job's user without groups:\n%s", what, spawned.status)
	}
	if cgroup != "" && (strings.Contains(spawned.cgroup, cgroup) || !strings.Contains(gated.cgroup, cgroup)) {
		t.Errorf("cgroup %s: at the gate %q, through it %q; want it joined at the gate's pass", cgroup, spawned.cgroup, gated.cgroup)
	}
}

// Issue 44: a sandbox costs two programs, bwrap and the wrapper, no trampoline. The
// job's first process is bwrap itself, waiting at its gate (its options, --args) as
// the job's user already, in no cgroup of the job's yet; at its gate's pass it is in
// the job's cgroup, and the job runs with its rlimits (set in the sandbox).
func TestFirstProcessIsBwrapAtItsGate(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("bwrap is not installed")
	}
	if os.Geteuid() != 0 {
		t.Skip("the job's uid is the runner's own unless the runner is root")
	}
	spawned, gated, out, _, cgroup := gateRun(t, ModeBwrap, "ulimit -f; id -G")
	if want, _ := filepath.EvalSymlinks(bwrap); spawned.exe != want {
		t.Errorf("the job's first process at its gate runs %q, want bwrap (%s)", spawned.exe, want)
	}
	checkGate(t, "the job's first process", spawned, gated, cgroup)
	if got := strings.Fields(out); len(got) != 2 || got[0] != "2048" || got[1] != "61000" {
		t.Errorf("the job's file size limit (512-byte blocks) and groups: %q, want 2048 61000", out)
	}
}

// Issue 44: without a sandbox (--sandbox none) a job costs one program before its own,
// the trampoline's shell, started as the job's user without groups (no setpriv after
// it to change the user: each program started costs milliseconds of CPU on a small
// VM). At its gate it runs as the job's user already, in no cgroup of the job's; at
// its gate's pass it is in the job's cgroup (the runner put it there), and the job
// runs with its rlimits.
func TestTrampolineIsTheJobsUserAtItsGate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the job's uid is the runner's own unless the runner is root")
	}
	spawned, gated, out, dir, cgroup := gateRun(t, ModeNone, "ulimit -f; id -u; id -G; pwd")
	checkGate(t, "the trampoline", spawned, gated, cgroup)
	if got := strings.Fields(out); len(got) != 4 || got[0] != "2048" || got[1] != "61000" || got[2] != "61000" || got[3] != dir {
		t.Errorf("the job's file size limit (512-byte blocks), uid, groups and directory: %q, want 2048 61000 61000 %s", out, dir)
	}
}
