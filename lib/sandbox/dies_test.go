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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/procrun"
	"github.com/hero-coordinator/hero/lib/testutil/proctest"
)

// standInEnv makes the test binary a stand-in runner (standIn).
const standInEnv = "HERO_SBX_STAND_IN"

func TestMain(m *testing.M) {
	if os.Getenv(standInEnv) != "" {
		os.Exit(standIn())
	}
	os.Exit(m.Run())
}

// standIn is a runner in miniature: it makes a sandbox, starts one job in it and
// stops at the step HERO_SBX_STEP names, until it is killed: "spawned" (the job's
// process started, waiting at its gate), "gated" (through its gate, its sandbox being
// made), "network" (HERO_SBX_NET: its sandbox made, held until its network is set up)
// or "begun" (the job's command runs: it says so itself). It writes the job's process
// group to <scratch>/pgid and says where it stopped through <scratch>/signal; the job
// writes "start <unix ns>" to <scratch>/ledger and "up" to the signal.
func standIn() int {
	step, scratch := os.Getenv("HERO_SBX_STEP"), os.Getenv("HERO_SBX_SCRATCH")
	stop := func(at string, pid int) {
		if at == "spawned" {
			_ = os.WriteFile(filepath.Join(scratch, "pgid"), []byte(strconv.Itoa(pid)), 0o644)
		}
		if at != step {
			return
		}
		if f, err := os.OpenFile(filepath.Join(scratch, "signal"), os.O_WRONLY, 0); err == nil {
			_, _ = f.Write([]byte("paused " + at + "\n"))
		}
		for {
			time.Sleep(time.Hour) // until killed
		}
	}
	opt := Options{UID: 61000, GID: 61000, Binds: []string{scratch}, Pause: stop}
	lim := Limits{Pids: 64, MemoryBytes: 256 << 20, DiskBytes: 16 << 20}
	if os.Getenv("HERO_SBX_NET") != "" {
		opt.NeedNetwork, lim.Network = true, model.NetworkOutbound
	}
	if step == "ahead" {
		opt.Ahead = AheadOptions{Max: 2}
		opt.Zygote = os.Getenv("HERO_SBX_ZYGOTE")
		if opt.Fork = opt.Zygote != ""; opt.Fork {
			opt.Ahead.Max = 3 // a forking sandbox serving its job counts against Max
		}
	}
	s, err := New(context.Background(), opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if step == "ahead" {
		return standInAhead(s, lim, scratch, stop)
	}
	dir, _, _ := s.WorkDir("", "hero-sbx-stand-in-")
	script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s/ledger; echo up > %[1]s/signal; exec sleep 300`, scratch)
	j, err := s.PrepareWith(dir, []string{"/bin/sh", "-c", script}, lim, Extra{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if j.group != nil {
		_ = os.WriteFile(filepath.Join(scratch, "cgroups"), []byte(strings.Join(j.group.directories(), "\n")), 0o644)
	}
	p, err := procrun.Start(procrun.Spec{Argv: j.Argv, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: os.Stderr, Stderr: os.Stderr, Launch: j.Launch})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := j.Started(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	p.Wait()
	return 0
}

// standInAhead makes sandboxes ahead for lim (one taken, not handed a job, and two
// more), writes their process groups to <scratch>/pgids and stops at "ahead".
func standInAhead(s *Sandbox, lim Limits, scratch string, stop func(string, int)) int {
	taken, err := s.Take(context.Background(), lim)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if taken.zy != nil {
		// A forking sandbox runs a job when the runner is killed: it says it is up
		// through a signal pipe of its own (the scratch directory is the job's too).
		dir := filepath.Join(scratch, "up")
		if err := os.Mkdir(dir, 0o777); err == nil {
			err = os.Chmod(dir, 0o777)
		}
		up, err := proctest.NewSignal(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer up.Close()
		_, _, err = taken.Hand(Handoff{Argv: []string{"/bin/sh", "-c", "echo up > " + up.Path + "; exec sleep " + os.Getenv("HERO_SBX_MARKER")}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: workDirIn(JobDir)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if !up.Wait(1, time.Minute) {
			fmt.Fprintln(os.Stderr, "the forked job did not start within a minute")
			return 1
		}
	}
	if err := s.WaitAhead(context.Background(), func(ready, making int) bool { return ready >= 2 && making == 0 }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pgids := []string{strconv.Itoa(taken.cmd.Process.Pid)}
	s.ahead.mu.Lock()
	for _, k := range s.ahead.keys {
		for _, p := range k.ready {
			pgids = append(pgids, strconv.Itoa(p.cmd.Process.Pid))
		}
	}
	s.ahead.mu.Unlock()
	_ = os.WriteFile(filepath.Join(scratch, "pgids"), []byte(strings.Join(pgids, " ")), 0o644)
	if s.own != nil {
		_ = os.WriteFile(filepath.Join(scratch, "instance"), []byte(s.own.instance), 0o644)
	}
	stop("ahead", 0)
	return 0
}

// Acceptance (issue 44): a runner killed (kill -9) with sandboxes made ahead of their
// jobs — one taken for a job, not handed it yet, two ready — leaves none: no process
// of them, and (a root runner: cgroups) none of their cgroups.
func TestAheadSandboxesDieWithTheRunner(t *testing.T) { _ = aheadDiesWithTheRunner(t, nil) }

// Issue 44, the forking sandbox: a runner killed (kill -9) with forking sandboxes —
// one running a job, two ready — leaves no zygote, no process of the job, no cgroup.
func TestForkingSandboxesDieWithTheRunner(t *testing.T) {
	marker := fmt.Sprintf("300.%d", time.Now().UnixNano()%1000000)
	zygotes := aheadDiesWithTheRunner(t, []string{"HERO_SBX_ZYGOTE=" + zygoteBinary(t), "HERO_SBX_MARKER=" + marker})
	if left := proctest.Pgrep("sleep " + marker); len(left) > 0 {
		t.Fatalf("the forked job's process is alive after the runner's death: %v", left)
	}
	// This runner's zygotes (its descendants before its death; not the machine's:
	// other tests' runners have theirs): at least one per sandbox, all gone.
	if len(zygotes) < 3 {
		t.Fatalf("zygotes of the stand-in runner before its death: %v, want one per sandbox", zygotes)
	}
	if left, err := proctest.WaitExit(zygotes, time.Minute); err != nil || len(left) > 0 {
		t.Fatalf("zygotes alive after the runner's death: %v (%v)", left, err)
	}
}

// zygotesOf are the processes of the forking sandboxes' program among pid's
// descendants.
func zygotesOf(pid int) []int {
	var out []int
	for _, p := range proctest.Descendants(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err == nil && strings.HasPrefix(string(b), zygotePath+"\x00") {
			out = append(out, p)
		}
	}
	return out
}

// aheadDiesWithTheRunner kills a stand-in runner (env: more of its environment) with
// sandboxes made ahead and checks that nothing of them is left. It returns the
// zygotes among the runner's descendants before its death (forking sandboxes).
func aheadDiesWithTheRunner(t *testing.T, env []string) []int {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed")
	}
	if os.Geteuid() != 0 {
		t.Skip("the stand-in runner runs as root")
	}
	exe := standInBinary(t)
	scratch, err := os.MkdirTemp("", "hero-sbx-stand-in-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(scratch) })
	if err := os.Chmod(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	sig, err := proctest.NewSignal(scratch)
	if err != nil {
		t.Fatal(err)
	}
	defer sig.Close()
	var out strings.Builder
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append([]string{standInEnv + "=1", "HERO_SBX_STEP=ahead", "HERO_SBX_SCRATCH=" + scratch, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if !sig.Wait(1, time.Minute) {
		t.Fatalf("the stand-in runner did not make its sandboxes ahead: %s", out.String())
	}
	b, err := os.ReadFile(filepath.Join(scratch, "pgids"))
	if err != nil {
		t.Fatal(err)
	}
	var pgids, pids []int
	for _, f := range strings.Fields(string(b)) {
		pgid, _ := strconv.Atoi(f)
		pgids = append(pgids, pgid)
		pids = append(pids, proctest.Group(pgid)...)
	}
	if len(pgids) != 3 || len(pids) < 3 {
		t.Fatalf("sandboxes made ahead: groups %v, processes %v", pgids, pids)
	}
	var cgroups []string
	if inst, err := os.ReadFile(filepath.Join(scratch, "instance")); err == nil {
		cgroups, _ = filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/hero-jobs/job-*-%s-*", inst))
		v2, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/hero-jobs/job-*-%s-*", inst))
		cgroups = append(cgroups, v2...)
	}
	zygotes := zygotesOf(cmd.Process.Pid)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if left, err := proctest.WaitExit(pids, time.Minute); err != nil || len(left) > 0 {
		t.Fatalf("processes of sandboxes made ahead alive after the runner's death: %v (%v)", left, err)
	}
	for _, pgid := range pgids {
		if left, err := proctest.WaitGroupExit(pgid, time.Minute); err != nil || len(left) > 0 {
			t.Fatalf("processes of group %d alive after the runner's death: %v (%v)", pgid, left, err)
		}
	}
	t.Logf("%d processes of 3 sandboxes made ahead gone; their cgroups: %v", len(pids), cgroups)
	deadline := time.Now().Add(time.Minute)
	for _, d := range cgroups {
		for _, err := os.Stat(d); err == nil; _, err = os.Stat(d) {
			if time.Now().After(deadline) {
				t.Fatalf("cgroup %s of a sandbox made ahead is left after the runner's death", d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return zygotes
}

// Acceptance (issue 43, "a job's processes never outlive their runner"): kill -9 of
// the runner at each step of a job's start — its process spawned and waiting at its
// gate; through the gate, its sandbox being made; its sandbox made but held (for its
// network, bwrap's --block-fd: the runner's death lets it go on); its command running
// — leaves no process of the job alive, and the job's command never starts after the
// runner's death (its own ledger line says when it started). With cgroups (a root
// runner) and with rlimits only (a runner of uid 10001, as in the containers).
func TestJobsDieWithTheRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make test-quick): this test kills a runner with its jobs in the sandbox and waits for their end; make test runs it")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed")
	}
	if os.Geteuid() != 0 {
		t.Skip("the stand-in runner runs as root and as uid 10001")
	}
	exe := standInBinary(t)
	for _, mode := range []struct {
		name string
		uid  uint32
	}{{"root", 0}, {"uid-10001", 10001}} {
		for _, step := range []string{"spawned", "gated", "network", "begun"} {
			if step == "network" && mode.uid != 0 {
				continue // outbound network needs a root runner here (slirp4netns's setns)
			}
			t.Run(mode.name+"/"+step, func(t *testing.T) { killStandIn(t, exe, mode.uid, step) })
		}
	}
}

// killStandIn runs a stand-in runner as uid that stops at step, kills it (SIGKILL)
// and checks what its job did.
func killStandIn(t *testing.T, exe string, uid uint32, step string) {
	scratch, err := os.MkdirTemp("", "hero-sbx-stand-in-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(scratch) })
	if err := os.Chmod(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	sig, err := proctest.NewSignal(scratch)
	if err != nil {
		t.Fatal(err)
	}
	defer sig.Close()
	var out strings.Builder
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = []string{standInEnv + "=1", "HERO_SBX_STEP=" + step, "HERO_SBX_SCRATCH=" + scratch, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if step == "network" {
		cmd.Env = append(cmd.Env, "HERO_SBX_NET=1")
	}
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: uid}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if !sig.Wait(1, time.Minute) {
		t.Fatalf("the stand-in runner did not get to %s: %s", step, out.String())
	}
	b, err := os.ReadFile(filepath.Join(scratch, "pgid"))
	if err != nil {
		t.Fatal(err)
	}
	pgid, _ := strconv.Atoi(string(b))
	pids := proctest.Group(pgid)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The runner is certainly dead once it is reaped. A SIGKILL is not instant: under
	// load a runner of many threads takes milliseconds to exit, and a job already
	// through its gate goes on making its sandbox meanwhile — a start then is a start
	// before the runner's death, which its parent-death signals have not reached yet.
	killed := time.Now()
	if left, err := proctest.WaitExit(pids, time.Minute); err != nil || len(left) > 0 {
		t.Fatalf("job processes alive after the runner's death: %v (%v)", left, err)
	}
	t.Logf("the job's %d processes (group %d) gone %v after the runner's death", len(pids), pgid, time.Since(killed).Round(time.Millisecond))
	if left, err := proctest.WaitGroupExit(pgid, time.Minute); err != nil || len(left) > 0 {
		t.Fatalf("processes of the job's group alive after the runner's death: %v (%v)", left, err)
	}
	starts := ledgerStarts(t, filepath.Join(scratch, "ledger"))
	for _, at := range starts {
		if at.After(killed) {
			t.Errorf("the job's command started %v after the runner's death", at.Sub(killed))
		}
	}
	switch {
	case (step == "spawned" || step == "network") && len(starts) > 0:
		t.Errorf("the job's command started though its runner died before its %s step ended: %v", step, starts)
	case step == "begun" && len(starts) != 1:
		t.Errorf("the running job's ledger: %v", starts)
	}
}

// standInBinary is a copy of the test binary that uid 10001 may run.
func standInBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "hero-sbx-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	exe := filepath.Join(dir, "stand-in")
	dst, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return exe
}

// ledgerStarts reads the "start <unix ns>" lines of a ledger.
func ledgerStarts(t *testing.T, file string) []time.Time {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		ns, err := strconv.ParseInt(strings.TrimPrefix(l, "start "), 10, 64)
		if err != nil {
			t.Fatalf("ledger line %q", l)
		}
		out = append(out, time.Unix(0, ns))
	}
	return out
}

// Acceptance (the CI failure of TestRunnerAsPID1ReapsWhatSandboxesLeave): job cgroups
// are owned across PID namespaces. Runners in PID namespaces of their own (a runner
// that is PID 1 of its container, or under unshare --pid) share the host's cgroups
// with the runners outside. A runner on the host has a job at its gate (its cgroup
// made, empty: the job is about to join it); two runners, each PID 1 of a namespace of
// its own (the same pid), start and run a job each. The host runner's cgroup stays and
// both namespaced jobs run. Before, a cgroup's owner was the pid in its name
// (job-<pid>-<n>), asked with kill(pid, 0) in the asker's namespace: the namespaced
// runners took the host runner's fresh cgroup for an orphan's (its pid is none of
// theirs there) and removed it, and both named their first job's cgroup job-1-1 (the
// second one's job could not be made: "cgroup: mkdir …/job-1-1: file exists"; so did a
// namespaced runner's next life, finding its last life's cgroups its own); and a host
// runner, asking after pid 1 or 2, asked after whatever process has that pid on the
// host.
func TestRunnersInPIDNamespacesKeepTheirJobs(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) is not installed")
	}
	if os.Geteuid() != 0 {
		t.Skip("the stand-in runners run as root (cgroups, unshare --pid)")
	}
	exe := standInBinary(t)
	host := startStandIn(t, exe, "spawned", nil)
	host.waitSignal(t, "get its job to its gate")
	b, err := os.ReadFile(filepath.Join(host.scratch, "cgroups"))
	if err != nil {
		t.Skip("no job cgroups here")
	}
	hostCgroups := strings.Fields(string(b))
	ns := []string{unshare, "--pid", "--fork", "--kill-child", "--mount-proc"}
	for _, name := range []string{"first", "second"} {
		r := startStandIn(t, exe, "begun", ns)
		r.waitSignal(t, "run its job (the "+name+" runner in a PID namespace)")
	}
	for _, d := range hostCgroups {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the host runner's job cgroup, its job at its gate, was removed by a runner in a PID namespace: %v", err)
		}
	}
}

// standInRun is a stand-in runner started by startStandIn.
type standInRun struct {
	scratch string
	sig     *proctest.Signal
	out     *syncWriter
	ended   chan struct{}
}

// startStandIn starts a stand-in runner (root) that stops at step, under wrap (a
// command and its arguments, or nil); it is killed when the test ends.
func startStandIn(t *testing.T, exe, step string, wrap []string) *standInRun {
	t.Helper()
	scratch, err := os.MkdirTemp("", "hero-sbx-stand-in-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(scratch) })
	if err := os.Chmod(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	sig, err := proctest.NewSignal(scratch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sig.Close)
	r := &standInRun{scratch: scratch, sig: sig, out: &syncWriter{}, ended: make(chan struct{})}
	argv := append(append([]string(nil), wrap...), exe, "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{standInEnv + "=1", "HERO_SBX_STEP=" + step, "HERO_SBX_SCRATCH=" + scratch, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	cmd.WaitDelay = 5 * time.Second // its jobs hold its output until its guard ends them
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(r.ended) }()
	t.Cleanup(func() {
		select {
		case <-r.ended:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-r.ended
		}
	})
	return r
}

// waitSignal waits for the stand-in's first signal (it stopped at its step, or its job
// runs); the test fails if the stand-in ends first.
func (r *standInRun) waitSignal(t *testing.T, what string) {
	t.Helper()
	got := make(chan bool, 1)
	go func() { got <- r.sig.Wait(1, time.Minute) }()
	select {
	case ok := <-got:
		if ok {
			return
		}
	case <-r.ended:
	}
	t.Fatalf("the stand-in runner did not %s: %s", what, r.out.String())
}

// syncWriter is a process's output, written by two goroutines (stdout and stderr).
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
