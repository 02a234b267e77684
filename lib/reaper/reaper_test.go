package reaper

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the reaper under test: with REAPER_TEST_SCRIPT set it runs
// that shell script under Run and exits with Run's status.
func TestMain(m *testing.M) {
	if script := os.Getenv("REAPER_TEST_SCRIPT"); script != "" {
		os.Exit(Run("/bin/sh", []string{"-c", script}))
	}
	os.Exit(m.Run())
}

// reaperCmd is the test binary running script under Run.
func reaperCmd(t *testing.T, ctx context.Context, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "REAPER_TEST_SCRIPT="+script)
	return cmd
}

// exitCode is the status a finished command ended with.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode()
	}
	t.Fatalf("the reaper did not exit with a status: %v", err)
	return -1
}

// An orphan handed to the reaper (its parent, a subshell, ended at once) is waited
// for while the service still runs: the service sees the reaper's children come back
// to itself alone (its check gives up after 10 s: exit 9), and the reaper ends with
// the service's status.
func TestOrphansAreReaped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := `( sh -c 'exit 0' & )
i=0
while [ $i -lt 200 ]; do
  set -- $(cat /proc/$PPID/task/*/children)
  [ "$*" = "$$" ] && exit 7
  i=$((i+1)); sleep 0.05
done
echo "children of the reaper: $*" >&2
exit 9`
	out, err := reaperCmd(t, ctx, script).CombinedOutput()
	if code := exitCode(t, err); code != 7 {
		t.Fatalf("exit %d, want 7 (the orphan reaped, the service's status passed on): %s", code, out)
	}
}

// A signal to the reaper goes to the service; a service ended by a signal makes the
// reaper exit 128 + its number.
func TestSignalsArePassedOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := reaperCmd(t, ctx, `trap 'kill $!; exit 5' TERM; echo ready; sleep 30 & wait`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the service did not start: %q %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd.Wait()); code != 5 {
		t.Fatalf("exit %d, want 5: SIGTERM reached the service's trap", code)
	}

	killed := reaperCmd(t, ctx, `echo ready; kill -KILL $$`)
	if code := exitCode(t, killed.Run()); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit %d, want %d for a service killed by SIGKILL", code, 128+int(syscall.SIGKILL))
	}
}

// Not PID 1: IfPID1 does nothing.
func TestIfPID1IsANoOpElsewhere(t *testing.T) {
	if _, ran := IfPID1(); ran {
		t.Fatal("IfPID1 ran the program again in a process that is not PID 1")
	}
}
