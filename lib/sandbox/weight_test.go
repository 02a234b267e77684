package sandbox

import (
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
