package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A cgroup made with a CPU weight has it (cgroup v1's cpu.shares here, the weight ×
// 10.24; a hierarchy in a temporary directory): an executor pool's cgroup weighs
// more than a job's against the jobs beside it. Without a weight the file is left to
// the kernel's default.
func TestCgroupCPUWeight(t *testing.T) {
	base := t.TempDir()
	cg := detectCgroups(base, "hero-jobs")
	if cg == nil || cg.v2 {
		t.Fatalf("no v1 hierarchy in %s: %v", base, cg)
	}
	g, err := cg.create("job-1-1", Limits{CPUWeight: 800})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(g.dirs["cpu"], "cpu.shares"))
	if err != nil || strings.TrimSpace(string(b)) != "8192" {
		t.Fatalf("cpu.shares %q (%v), want 8192", b, err)
	}
	plain, err := cg.create("job-1-2", Limits{Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(plain.dirs["cpu"], "cpu.shares")); !os.IsNotExist(err) {
		t.Fatalf("a job's cgroup without a weight got cpu.shares: %v", err)
	}
}

// Issue 44: an executor pool's cgroup is made beside the jobs' cgroups, under the
// executors' own parent (hero-executors), not among them (hero-jobs): the jobs, however
// many, weigh one share of the CPU against the pools. A gone runner's pool cgroups
// there are removed at the next start, as its job cgroups are. (A v1 hierarchy in a
// temporary directory; nothing is launched.)
func TestExecutorPoolCgroupBesideTheJobs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups are made by a root runner")
	}
	base := t.TempDir()
	// A runner that died: the kernel let its lock go. Its lock file is in a directory
	// of the test's own (a runner another test starts meanwhile would take it).
	gone := newOwner(t.TempDir())
	if gone.lock == nil {
		t.Fatal("no lock file made in the test's directory")
	}
	_ = gone.lock.Close()
	lockFile := filepath.Join(gone.dir, gone.instance+".lock")
	t.Cleanup(func() { _ = os.Remove(lockFile) })
	// Its cgroups under both parents: the lock file goes only once both are reaped.
	left := filepath.Join(base, "cpu", "hero-executors", gone.cgroupName(2))
	leftJob := filepath.Join(base, "cpu", "hero-jobs", gone.cgroupName(1))
	for _, d := range []string{left, leftJob} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(context.Background(), Options{Mode: ModeNone, CgroupBase: base, OwnersDir: gone.dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range []string{left, leftJob, lockFile} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("a gone runner's %s is left after the start (%v)", d, err)
		}
	}
	for _, tc := range []struct {
		x      Extra
		parent string
	}{{Extra{HostDir: true, Executor: true}, "hero-executors"}, {Extra{}, "hero-jobs"}} {
		j, err := s.PrepareWith(t.TempDir(), []string{"/bin/true"}, Limits{Pids: 10, CPUWeight: 400}, tc.x)
		if err != nil {
			t.Fatal(err)
		}
		for ctl, dir := range j.group.dirs {
			if want := filepath.Join(base, ctl, tc.parent); filepath.Dir(dir) != want {
				t.Errorf("%+v: cgroup %s, want one in %s", tc.x, dir, want)
			}
		}
		j.Cleanup()
	}
}
