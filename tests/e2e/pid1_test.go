package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// A runner that is PID 1 of its PID namespace (its image's entrypoint on Kubernetes)
// waits for the processes its jobs' sandboxes leave behind: bubblewrap leaves one
// per job, adopted by PID 1, and a PID 1 that never waits for them keeps each as a
// zombie until the pod's pids limit refuses every job (lib/reaper). Twenty sandboxed
// jobs run; then no process of the runner's PID namespace is a zombie.
func TestRunnerAsPID1ReapsWhatSandboxesLeave(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unshare --pid needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) not found")
	}
	s, c := newStack(t, harness.StackOptions{RunnerWrap: []string{unshare, "--pid", "--fork", "--kill-child", "--mount-proc"}})
	var jobs []jobSpec
	for i := uint32(1); i <= 20; i++ {
		jobs = append(jobs, jobSpec{id: i, typ: "sh", script: "true"})
	}
	createFlow(t, c, 30, nil, jobs...)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 30}, nil)
	if f := c.WaitFlow(t, ctx1, 30, 60*time.Second); f.Status != "finished" {
		t.Fatalf("flow ended %s: %s", f.Status, f.Error)
	}
	pid1 := childOf(t, s.Runner.Cmd.Process.Pid)
	// A job's leftover is adopted by PID 1 and waited for within moments of its end:
	// wait for PID 1 to have no zombie child, with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for {
		z := zombiesOf(pid1)
		if len(z) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PID 1 of the runner's namespace has %d zombie children 10 s after its jobs ended: %v", len(z), z)
		}
		time.Sleep(50 * time.Millisecond)
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

// zombiesOf lists the children of process parent that are zombies, with their names
// (a zombie has no namespace links left in /proc: it is found by its parent).
func zombiesOf(parent int) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		st, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid int
		if _, err := fmt.Sscan(s[i+2:], &state, &ppid); err != nil || ppid != parent || state != "Z" {
			continue
		}
		out = append(out, filepath.Base(d)+" "+s[strings.IndexByte(s, '(')+1:i])
	}
	return out
}
