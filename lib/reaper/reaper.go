// Package reaper is a minimal init for a service that runs as PID 1 of a container
// and starts processes: the runner on Kubernetes, where its image's entrypoint is the
// runner itself. Processes whose parent dies are handed to PID 1, and bubblewrap leaves
// one such process behind for every sandboxed job (its intermediate process, adopted
// once the job's command has ended); a PID 1 that never waits for them keeps each as a
// zombie, holding its PID until the pod's pids limit refuses every new job. Run starts
// the service as its child, waits for every process it is handed (wait4(-1), woken by
// SIGCHLD), passes signals on to the service, and ends with its exit status — what
// tini does for docker compose's runner (`init: true`).
package reaper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// childEnv marks the service started by Run: it does not start another.
const childEnv = "HERO_REAPER_CHILD"

// IfPID1 runs the program again under Run when this process is PID 1 (and not already
// Run's child): ran says whether it did, code is the exit status to end with.
func IfPID1() (code int, ran bool) {
	if os.Getpid() != 1 || os.Getenv(childEnv) != "" {
		return 0, false
	}
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return Run(exe, os.Args[1:]), true
}

// Run starts path with args as its child (stdin, stdout and stderr shared), waits for
// it and for every process handed to this one (it makes itself a child subreaper, so
// that the orphans of its descendants come to it even when it is not PID 1), passes on
// every signal it gets but SIGCHLD (and SIGURG, the Go runtime's), and returns the child's exit status (128 + the
// signal's number when a signal ended it; 1 when it could not start).
func Run(path string, args []string) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "reaper: become a child subreaper: %v\n", err)
	}
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs) // before the start: no SIGCHLD is missed
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "reaper: start %s: %v\n", path, err)
		return 1
	}
	child := cmd.Process.Pid
	for {
		if code, done := reap(child); done {
			return code
		}
		s := <-sigs
		if s == syscall.SIGCHLD || s == syscall.SIGURG { // SIGURG: the Go runtime's own
			continue
		}
		_ = cmd.Process.Signal(s)
	}
}

// reap waits for every process that has ended; done when one was the child, with its
// exit status.
func reap(child int) (code int, done bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return 0, false
		}
		if pid != child {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ws.ExitStatus(), true
	}
}
