package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/procrun"
	"github.com/hero-coordinator/hero/lib/testutil/proctest"
)

// zygoteBinary builds hero-zygote from zygote/zygote.c (as make build does) into the
// temporary directory, once per version of its source.
func zygoteBinary(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed: hero-zygote cannot be built")
	}
	src, err := filepath.Abs(filepath.Join("zygote", "zygote.c"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	exe := filepath.Join(os.TempDir(), "hero-zygote-test-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	if err := BuildZygote(src, exe); err != nil {
		t.Fatal(err)
	}
	return exe
}

// newForkSandbox is newAheadSandbox with forking sandboxes (max of them).
func newForkSandbox(t *testing.T, max int) *Sandbox {
	t.Helper()
	s := newAheadSandboxWith(t, Options{Ahead: AheadOptions{Max: max}, Fork: true, Zygote: zygoteBinary(t)})
	if s.opt.Zygote == "" {
		t.Fatalf("no forking sandbox: %s", s.noFork)
	}
	return s
}

// forkRun runs script through a forking sandbox of s (Take, Hand) and returns its
// output and the sandbox's process group (its zygote's, bwrap's).
func forkRun(t *testing.T, s *Sandbox, lim Limits, script string) (string, int) {
	t.Helper()
	p, err := s.Take(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	if p.zy == nil {
		t.Fatal("the sandbox taken is not a forking one")
	}
	var out procrun.Capped
	out.Max = 1 << 20
	proc, j, err := p.Hand(Handoff{Argv: []string{"/bin/sh", "-s"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: workDirIn(JobDir), Script: script, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res := proc.Wait(); res.ExitCode != 0 {
		t.Fatalf("exit %d %s: %s", res.ExitCode, res.Signal, out.String())
	}
	j.Cleanup()
	return out.String(), p.cmd.Process.Pid
}

// Issue 44, the forking sandbox: two jobs one after the other in the same zygote
// each get namespaces of their own (PID, mount, IPC, UTS: none the zygote's) and
// nothing of the job before: not its files in /tmp, /dev/shm or its work directory,
// not its SysV shared memory segment (IPC), not its processes (the second job's shell
// is PID 2 under its own PID 1). A kernel may give a namespace the number of one
// freed before it: the ids are compared with the zygote's, which lives on.
func TestForkedJobsGetFreshNamespaces(t *testing.T) {
	s := newForkSandbox(t, 1)
	lim := Limits{Pids: 64, DiskBytes: 16 << 20}
	script := `for n in pid mnt ipc uts; do echo "$n $(readlink /proc/self/ns/$n)"; done
echo "pid1 $(cat /proc/1/comm) me $$"
ls -A /tmp /dev/shm . | tr '\n' ' '; echo
echo "ipc $(ipcs -m | grep -c '^0x')"
echo left > /tmp/left-by-a-job; echo left > /dev/shm/left-by-a-job; echo left > left-in-work-dir; ipcmk -M 4096 >/dev/null`
	first, zy1 := forkRun(t, s, lim, script)
	second, zy2 := forkRun(t, s, lim, script)
	if zy1 != zy2 {
		t.Fatalf("the two jobs ran in two sandboxes (groups %d, %d): want the same zygote", zy1, zy2)
	}
	zygote := 0 // bwrap's child
	for _, pid := range proctest.Group(zy1) {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 1 && f[1] == strconv.Itoa(zy1) {
				zygote = pid
			}
		}
	}
	a, b := strings.Split(first, "\n"), strings.Split(second, "\n")
	if len(a) < 7 || len(b) < 7 || zygote == 0 {
		t.Fatalf("zygote %d, outputs:\n%s\n%s", zygote, first, second)
	}
	for i, n := range []string{"pid", "mnt", "ipc", "uts"} {
		own, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", zygote, n))
		if !strings.Contains(a[i], ":[") || strings.HasSuffix(a[i], " "+own) || strings.HasSuffix(b[i], " "+own) || own == "" {
			t.Errorf("%s namespace of the jobs: %q, %q; the zygote's %q: want each job's own", n, a[i], b[i], own)
		}
	}
	if !strings.HasPrefix(b[4], "pid1 ") || !strings.HasSuffix(b[4], " me 2") {
		t.Errorf("the second job: %q, want its shell PID 2 under its own PID 1", b[4])
	}
	if strings.Contains(b[5], "left") || b[6] != "ipc 0" {
		t.Errorf("the second job sees the first's files or shared memory: %q, %q", b[5], b[6])
	}
}

// Issue 44, the forking sandbox: a process a job leaves in the background is gone
// when the job's end is told (before the zygote serves the next job), and the next
// job does not see it.
func TestForkedJobLeavesNoProcess(t *testing.T) {
	s := newForkSandbox(t, 1)
	lim := Limits{Pids: 64, DiskBytes: 16 << 20}
	marker := fmt.Sprintf("300.%d", time.Now().UnixNano()%1000000)
	first, zy1 := forkRun(t, s, lim, "sleep "+marker+" >/dev/null 2>&1 &\necho started")
	if left := proctest.Pgrep("sleep " + marker); len(left) > 0 || strings.TrimSpace(first) != "started" {
		t.Fatalf("the job's background process is alive after its end (pids %v): %q", left, first)
	}
	second, zy2 := forkRun(t, s, lim, `ps -eo comm= 2>/dev/null || ls /proc | grep -c '^[0-9]'`)
	if zy1 != zy2 || strings.Contains(second, "sleep") {
		t.Fatalf("the next job (sandbox %d, the first's %d) sees: %q", zy2, zy1, second)
	}
}

// A hero-zygote that cannot run here (here: not there) leaves the runner on bwrap
// sandboxes made ahead, one a job, saying why (NoFork); its jobs run as before.
func TestForkFallsBackToBwrap(t *testing.T) {
	s := newAheadSandboxWith(t, Options{Ahead: AheadOptions{Max: 1}, Fork: true, Zygote: filepath.Join(t.TempDir(), ZygoteName)})
	if s.opt.Zygote != "" || !strings.Contains(s.NoFork(), "no forking sandbox") || !strings.Contains(s.Describe(), "each job's sandbox made by bwrap") {
		t.Fatalf("zygote %q, NoFork %q, Describe %q", s.opt.Zygote, s.NoFork(), s.Describe())
	}
	out, res, _ := run(t, s, "echo ran", []string{"PATH=/usr/bin:/bin"}, Limits{Pids: 64})
	if res.ExitCode != 0 || out != "ran\n" {
		t.Fatalf("exit %d: %q", res.ExitCode, out)
	}
}

// A report's "begun" line: read now ("begun"), or the time a forking sandbox's job
// process took right before it ran the job's command ("begun <unix ns>") — never
// later than its reading; nothing before the whole line came.
func TestBegunLine(t *testing.T) {
	before := time.Now()
	future := time.Now().Add(time.Hour).UnixNano()
	for _, tc := range []struct {
		in   string
		want func(time.Time) bool
	}{
		{"start\n", time.Time.IsZero},
		{"start\nbegun", time.Time.IsZero},
		{"start\nbegun 12", time.Time.IsZero},
		{"start\nbegun\n", func(at time.Time) bool { return !at.Before(before) }},
		{"start\nbegun 1700000000123456789\nok none\n", func(at time.Time) bool { return at.Equal(time.Unix(0, 1700000000123456789)) }},
		{fmt.Sprintf("start\nbegun %d\n", future), func(at time.Time) bool { return !at.Before(before) && at.Before(time.Now().Add(time.Second)) }},
	} {
		if got := begunLine([]byte(tc.in)); !tc.want(got) {
			t.Errorf("%q: %v", tc.in, got)
		}
	}
	if full, res, ok := parseReport([]byte("start\nbegun 17\nfull file\nx=1\n"), 100); !ok || !full || string(res.Data) != "x=1\n" {
		t.Errorf("a report with a timed begun: %v %+v %v", full, res, ok)
	}
}

// Issue 44, the forking sandbox: a forked job's process, the second of its zygote as
// the first, holds no capability at all — bounding, effective, permitted,
// inheritable and ambient sets empty — and runs with no_new_privs, though the
// namespace's first process that starts it holds CAP_SYS_ADMIN and CAP_SETPCAP.
func TestForkedJobHasNoCapability(t *testing.T) {
	s := newForkSandbox(t, 1)
	lim := Limits{Pids: 64, DiskBytes: 16 << 20}
	script := `grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status`
	for i := 0; i < 2; i++ {
		out, _ := forkRun(t, s, lim, script)
		fields := strings.Fields(out)
		if len(fields) != 12 {
			t.Fatalf("job %d: %q", i, out)
		}
		for k := 0; k < len(fields); k += 2 {
			name, v := fields[k], fields[k+1]
			want := "0000000000000000"
			if name == "NoNewPrivs:" {
				want = "1"
			}
			if v != want {
				t.Errorf("job %d: %s %s, want %s", i, name, v, want)
			}
		}
	}
}

// Issue 44, the hop: a forking sandbox's job gets the pipes made before it came (with
// the sandbox, or while the job before it ran), never another job's, and pipes made
// ahead of a job that does not come are closed with the sandbox.
func TestForkedJobPipesMadeAhead(t *testing.T) {
	s := newForkSandbox(t, 1)
	lim := Limits{Pids: 64, DiskBytes: 16 << 20}
	p, err := s.Take(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	z := p.zy
	hand := func(n int) []*os.File {
		z.makeNext() // made already (with the sandbox, or by the job before): kept as it is
		z.mu.Lock()
		ahead := z.next
		z.mu.Unlock()
		if len(ahead) != 8 {
			t.Fatalf("job %d: %d pipe ends made ahead, want 8", n, len(ahead))
		}
		var out procrun.Capped
		out.Max = 1 << 10
		proc, j, err := p.Hand(Handoff{Argv: []string{"/bin/sh", "-s"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: workDirIn(JobDir),
			Script: fmt.Sprintf("echo job %d; echo r > result", n), Result: "result", ResultMax: 16, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		if res := proc.Wait(); res.ExitCode != 0 || strings.TrimSpace(out.String()) != fmt.Sprintf("job %d", n) {
			t.Fatalf("job %d: exit %d %s: %q", n, res.ExitCode, res.Signal, out.String())
		}
		if j.report.r != ahead[6] {
			t.Errorf("job %d: its report's pipe is not the one made ahead of it", n)
		}
		if r := j.Result(); string(r.Data) != "r\n" {
			t.Errorf("job %d: result %q %s", n, r.Data, r.Problem)
		}
		j.Cleanup()
		return ahead
	}
	first := hand(1)
	if p, err = s.Take(context.Background(), lim); err != nil || p.zy != z {
		t.Fatalf("the second job's sandbox: %v (the same zygote: %v)", err, err == nil && p.zy == z)
	}
	second := hand(2)
	for i := range first {
		if first[i] == second[i] {
			t.Fatalf("pipe end %d of the first job given to the second", i)
		}
	}
	z.makeNext()
	z.mu.Lock()
	left := z.next
	z.mu.Unlock()
	p.destroy()
	for i, f := range left {
		if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
			t.Errorf("pipe end %d made ahead of no job: open after the sandbox's end (%v)", i, err)
		}
	}
}
