package proctest

import (
	"bufio"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWaitExit(t *testing.T) {
	short := exec.Command("sh", "-c", "read x") // ends when its stdin closes
	stdin, err := short.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	long := exec.Command("sleep", "30")
	for _, c := range []*exec.Cmd{short, long} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = long.Process.Kill(); _ = long.Wait() }()
	pids := []int{short.Process.Pid, long.Process.Pid}

	if left, err := WaitExit(pids, 100*time.Millisecond); err != nil || !slices.Equal(slices.Sorted(slices.Values(left)), slices.Sorted(slices.Values(pids))) {
		t.Fatalf("both running: left %v, %v", left, err)
	}
	_ = stdin.Close()
	// The exited process is a zombie (not reaped yet): it counts as exited.
	start := time.Now()
	left, err := WaitExit(pids[:1], time.Minute)
	if err != nil || len(left) != 0 {
		t.Fatalf("after its exit: left %v, %v (%v)", left, err, time.Since(start))
	}
	if left, err := WaitExit(pids, 100*time.Millisecond); err != nil || !slices.Equal(left, pids[1:]) {
		t.Fatalf("one exited: left %v, %v", left, err)
	}
	_ = short.Wait()
	if left, err := WaitExit(pids[:1], time.Second); err != nil || len(left) != 0 {
		t.Fatalf("reaped: left %v, %v", left, err)
	}
}

func TestSignal(t *testing.T) {
	s, err := NewSignal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Wait(1, 50*time.Millisecond) {
		t.Fatal("a line before anyone wrote one")
	}
	if err := exec.Command("sh", "-c", "echo a > "+s.Path+"; echo b > "+s.Path).Run(); err != nil {
		t.Fatal(err)
	}
	if !s.Wait(2, time.Minute) {
		t.Fatal("two lines written, not seen")
	}
	if err := exec.Command("sh", "-c", "echo c > "+s.Path).Run(); err != nil {
		t.Fatal(err)
	}
	if !s.Wait(1, time.Minute) {
		t.Fatal("the third line not seen")
	}
	if s.Wait(1, 50*time.Millisecond) {
		t.Fatal("more lines than were written")
	}
	if got := Pgrep("no-such-process-anywhere-4711"); len(got) != 0 {
		t.Errorf("Pgrep of nothing: %v", got)
	}
}

func TestRoots(t *testing.T) {
	// A shell and its child: only the shell is a root of the two.
	sh := exec.Command("sh", "-c", "sleep 30 & echo $!; wait")
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Process.Kill(); _, _ = sh.Process.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(child, syscall.SIGKILL) }()
	if p := Parent(child); p != sh.Process.Pid {
		t.Fatalf("Parent(%d) = %d; want %d", child, p, sh.Process.Pid)
	}
	if got := Roots([]int{child, sh.Process.Pid}); len(got) != 1 || got[0] != sh.Process.Pid {
		t.Fatalf("Roots = %v; want [%d]", got, sh.Process.Pid)
	}
}
