package procrun

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// A group signalled by its id after it ended is not signalled when the id names a
// later process by now: a group that ended frees its id, and pids are reused (the
// kernel hands out the id it is told to next: ns_last_pid). Sent by id alone (kill(2)
// of -id, as Proc.Kill's SIGKILL after its grace and the e2e harness's kill at a test's
// end were), the signal lands on the later process's group.
func TestGroupSignalSparesALaterGroupOfItsID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ns_last_pid is root's")
	}
	for attempt := 0; attempt < 100; attempt++ {
		old := exec.Command("sh", "-c", "exit 0")
		old.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := old.Start(); err != nil {
			t.Fatal(err)
		}
		g := GroupOf(old.Process.Pid)
		_ = old.Wait() // the group ended: its id is free
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(g.ID-1)), 0o644); err != nil {
			t.Skip("ns_last_pid:", err)
		}
		later := exec.Command("sleep", "300")
		later.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := later.Start(); err != nil {
			t.Fatal(err)
		}
		if later.Process.Pid != g.ID {
			_ = later.Process.Kill() // another process took the id first: again
			_ = later.Wait()
			continue
		}
		defer func() { _ = later.Process.Kill(); _ = later.Wait() }()
		if err := syscall.Kill(-g.ID, 0); err != nil {
			t.Fatalf("the later group of id %d is not there to be hit: %v", g.ID, err)
		}
		if err := g.Signal(syscall.SIGKILL); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("the ended group's signal went to the later group of its id: %v", err)
		}
		if err := later.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("the later process of the ended group's id was killed: %v", err)
		}
		live := GroupOf(later.Process.Pid)
		if err := live.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("a live group is not signalled: %v", err)
		}
		return
	}
	t.Skip("no pid could be had again in 100 tries (a busy host)")
}
