package procrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	k := strings.LastIndexByte(string(b), ')')
	return k < 0 || k+2 >= len(b) || b[k+2] != 'Z'
}

func TestExitCodeOutputAndCleanEnv(t *testing.T) {
	out, errw := &Capped{Max: 5}, &Tail{Max: 4}
	p, err := Start(Spec{Argv: []string{"/bin/sh"}, Env: []string{"A=1"}, Stdin: strings.NewReader("echo \"$A-$HOME\"; echo abcdefg >&2; exit 3"), Stdout: out, Stderr: errw})
	if err != nil {
		t.Fatal(err)
	}
	r := p.Wait()
	if r.ExitCode != 3 || r.Killed != "" || out.String() != "1-\n" || errw.String() != "efg\n" {
		t.Fatalf("%+v %q %q", r, out.String(), errw.String())
	}
	if d := r.Describe("efg"); d != "exit code 3: efg" {
		t.Fatal(d)
	}
}

func TestKillTakesTheWholeGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := fmt.Sprintf("trap '' TERM; sleep 300 & echo $! > %s; wait", pidFile)
	p, err := Start(Spec{Argv: []string{"/bin/sh"}, Stdin: strings.NewReader(script), KillGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	deadline := time.Now().Add(time.Minute)
	for child == 0 && time.Now().Before(deadline) {
		if b, err := os.ReadFile(pidFile); err == nil {
			child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		time.Sleep(5 * time.Millisecond) // a file written by the child: no event to wait on
	}
	if child == 0 {
		t.Fatal("no child pid")
	}
	p.Kill("timeout")
	p.Kill("stopped") // the first reason stays
	r := p.Wait()
	if r.Killed != "timeout" || r.ExitCode != -1 || r.Signal == "" {
		t.Fatalf("%+v", r)
	}
	deadline = time.Now().Add(time.Minute)
	for alive(child) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d survived the group kill", child)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(Spec{}); err == nil {
		t.Fatal("no command must fail")
	}
	if _, err := Start(Spec{Argv: []string{"/no/such/interpreter"}}); err == nil {
		t.Fatal("missing interpreter must fail")
	}
}

// Exited says a process ended before its end is collected (the runner stopped when
// the job ended: its wait has not run), and not while it runs.
func TestExitedBeforeTheEndIsCollected(t *testing.T) {
	release := filepath.Join(t.TempDir(), "go")
	p, err := Start(Spec{Argv: []string{"/bin/sh"}, Stdin: strings.NewReader(fmt.Sprintf("while [ ! -e %s ]; do sleep 0.01; done; exit 0", release))})
	if err != nil {
		t.Fatal(err)
	}
	if p.Exited() {
		t.Fatal("a running process is said to have ended")
	}
	// Hold the lock the wait needs to record the end: the end stays uncollected.
	p.mu.Lock()
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !p.pidfdReadable() {
		if time.Now().After(deadline) {
			p.mu.Unlock()
			t.Fatal("the process's end never showed")
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel's view, no event to wait on
	}
	select {
	case <-p.done:
		t.Fatal("the end was collected while the wait was held")
	default:
	}
	p.mu.Unlock()
	if !p.Exited() || p.Wait().ExitCode != 0 || !p.Exited() {
		t.Fatal("the ended process: Exited false, or not exit 0")
	}
}
