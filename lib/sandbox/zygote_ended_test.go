package sandbox

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// A forking sandbox's job has ended, as far as its timeout can tell, from the moment
// its zygote's answer is on the control socket: a runner stopped (SIGSTOP) while its
// job ended resumes with the wait for that answer and the job's expired timeout
// running at once, and the timeout must find the job ended whichever runs first.
// Before, the wait took the answer off the socket before marking it read, and a
// timeout that looked in between killed, and recorded as timed out, a job that had
// ended in time (e2e TestRunnerFrozenPastItsLease, now and then under load).
func TestForkJobEndedOnceAnswered(t *testing.T) {
	for i := 0; i < 2000; i++ {
		z, peer := socketPairZygote(t)
		fj := &forkJob{}
		if fj.ended(z) {
			t.Fatal("a job the zygote has not answered for is seen ended")
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if r := fj.wait(z); r.ExitCode != 0 || r.Signal != "" || r.Err != nil {
				t.Errorf("the answer read: %+v", r)
			}
		}()
		if _, err := peer.Write([]byte("E 0 0\n")); err != nil {
			t.Fatal(err)
		}
		for running := true; running; {
			select {
			case <-done:
				running = false
			default:
			}
			if !fj.ended(z) {
				t.Fatalf("round %d: the zygote has answered, and the job is not seen ended", i)
			}
		}
		_ = z.conn.Close()
		_ = peer.Close()
	}
}

// socketPairZygote is a zygote's control socket and the zygote's end of it.
func socketPairZygote(t *testing.T) (*zygote, *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "control")
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	uc := c.(*net.UnixConn)
	return &zygote{conn: uc, rd: bufio.NewReader(uc)}, os.NewFile(uintptr(fds[1]), "zygote")
}

// A process listed in a forking sandbox's cgroup that is gone by the time its parent
// is read (the job namespace's first process ending after its answer, on a loaded
// host) leaves nothing behind: the sandbox is sound for its next job. Before, it
// counted as a process of a job left over, and the sandbox was destroyed.
func TestOnlyZygoteSkipsProcessesGone(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	if !onlyZygote([]int{self, gone.Process.Pid}, self) {
		t.Error("a process gone since the cgroup was read counts as left over")
	}
	// the test's own parent is no child of this process: left over
	if onlyZygote([]int{os.Getppid()}, self) {
		t.Error("a process that is not of the sandbox counts as the zygote's")
	}
}
