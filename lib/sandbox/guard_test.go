package sandbox

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/proctest"
)

// session starts a process in a session (and process group) of its own, with a
// child in the same group, and returns the group.
func session(t *testing.T) int {
	t.Helper()
	c := exec.Command("sh", "-c", "sleep 300 & exec sleep 300")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) })
	return c.Process.Pid
}

// The guard kills the groups it was told of and not told the end of when its input
// closes; a guard that died is started again, and knows the groups before it.
func TestGuard(t *testing.T) {
	g, err := newGuard("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	a, ended, b := session(t), session(t), session(t)
	for _, p := range []int{a, ended} {
		if err := g.add(p); err != nil {
			t.Fatal(err)
		}
	}
	g.remove(ended)
	// The guard dies (killed, say): another one starts; groups added afterwards are
	// told to it.
	g.mu.Lock()
	first := g.cmd.Process.Pid
	g.mu.Unlock()
	_ = syscall.Kill(first, syscall.SIGKILL)
	if left, _ := proctest.WaitExit([]int{first}, time.Minute); len(left) > 0 {
		t.Fatal("the guard did not die")
	}
	if err := g.add(b); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	if g.cmd.Process.Pid == first {
		t.Error("no new guard")
	}
	g.mu.Unlock()
	g.close()
	for _, p := range []int{a, b} {
		if left, err := proctest.WaitGroupExit(p, time.Minute); err != nil || len(left) > 0 {
			t.Errorf("group %d alive after the guard's input closed: %v (%v)", p, left, err)
		}
	}
	if !slices.Contains(proctest.Group(ended), ended) {
		t.Errorf("the group whose end the guard was told was killed: %v", proctest.Group(ended))
	}
}
