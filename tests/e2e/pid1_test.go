package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/proctest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// A runner that is PID 1 of its PID namespace (its image's entrypoint on Kubernetes)
// waits for the processes its jobs' sandboxes leave behind: bubblewrap leaves one
// per job, adopted by PID 1, and a PID 1 that never waits for them keeps each as a
// zombie until the pod's pids limit refuses every job (lib/reaper). Twenty sandboxed
// jobs run; once their flow has ended, PID 1 holds at most the leftovers of the last
// jobs still being waited for (a reaper waits for each as it comes: a few at most),
// not one per job (without lib/reaper: 21, while script jobs' sandboxes had bwrap's
// own init; a script job's wrapper is its PID 1 now, and only executors' sandboxes
// leave one each).
func TestRunnerAsPID1ReapsWhatSandboxesLeave(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unshare --pid needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) not found")
	}
	s, c := newStack(t, harness.StackOptions{RunnerWrap: []string{unshare, "--pid", "--fork", "--kill-child", "--mount-proc"}})
	const jobs = 20
	var specs []jobSpec
	for i := uint32(1); i <= jobs; i++ {
		specs = append(specs, jobSpec{id: i, typ: "sh", script: "true"})
	}
	createFlow(t, c, 30, nil, specs...)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 30}, nil)
	if f := c.WaitFlow(t, ctx1, 30, 60*time.Second); f.Status != "finished" {
		t.Fatalf("flow ended %s: %s", f.Status, f.Error)
	}
	pid1 := childOf(t, s.Runner.Cmd.Process.Pid)
	if z := proctest.ZombieChildren(pid1); len(z) > 2 {
		t.Fatalf("PID 1 of the runner's namespace holds %d zombies after %d jobs: %v", len(z), jobs, z)
	}
}

// childOf is the one child of process pid (unshare's: the runner, PID 1 of its
// namespace).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	var child int
	if _, err := fmt.Sscan(string(b), &child); err != nil {
		t.Fatalf("process %d has no child: %q", pid, b)
	}
	return child
}
