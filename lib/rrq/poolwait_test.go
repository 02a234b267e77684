package rrq

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// onceThen is an executor command that runs the Go example the first time it starts
// and, at every later start, the shell command later (exit 3: it cannot start; exec
// sleep: it never listens).
func onceThen(t *testing.T, later string) []string {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "executor.sh")
	body := "#!/bin/sh\nif [ -e " + filepath.Join(dir, "started") + " ]; then echo 'cannot start again' >&2; " + later + "; fi\n" +
		": > " + filepath.Join(dir, "started") + "\nexec " + goExampleBinary(t) + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{script}
}

// Acceptance (issue 44, 4): a call waiting for a process of a pool whose processes
// can no longer start fails with ErrNotReady, saying why, once the pool is unhealthy —
// it does not wait for ever (before: it waited on the pool's capacity with no bound,
// here until the test's 60 s deadline).
func TestPoolCallWaitingForAPoolThatCannotStartFails(t *testing.T) {
	p, err := StartPool(testCtx(t, time.Minute), PoolConfig{
		Name: "once", Command: onceThen(t, "exit 3"), RestartBackoff: 10 * time.Millisecond,
		ReadyWait: 10 * time.Minute, // the unhealthy pool ends the wait, not this bound
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := testCtx(t, 60*time.Second)
	if _, err := p.Execute(ctx, NewRequest("job-crash", "crash", nil, nil)); !errors.Is(err, ErrExecutorCrashed) {
		t.Fatalf("crash: %v", err)
	}
	_, err = p.Execute(ctx, NewRequest("job-echo", "echo", nil, nil))
	if !errors.Is(err, ErrNotReady) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "exited before accepting connections") {
		t.Fatalf("a call waiting for a pool that cannot start: %v; want ErrNotReady saying why", err)
	}
	if p.Healthy() == nil {
		t.Fatal("the pool is healthy")
	}
}

// A call that finds no process ready waits at most ReadyWait (here the process's
// restart never listens: its start-up limit is far longer); before, it waited for
// ever.
func TestPoolReadyWaitBoundsTheWaitForAProcess(t *testing.T) {
	p, err := StartPool(testCtx(t, time.Minute), PoolConfig{
		Name: "hangs", Command: onceThen(t, "exec sleep 600"), StartupTimeout: 10 * time.Minute,
		ReadyWait: time.Second, StopGrace: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.KillProcess(0); err != nil {
		t.Fatal(err)
	}
	_, err = p.Execute(testCtx(t, 60*time.Second), NewRequest("job-echo", "echo", nil, nil))
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "no process ready within 1s") {
		t.Fatalf("a call while the only process restarts and never listens: %v; want ErrNotReady within 1s", err)
	}
}

// Acceptance (issue 44, 4): an executor that accepts one connection at a time, run
// without Connections 1, fails its start with ErrOneConnection — both one that keeps
// listening but serves its connections one after the other (before: the pool started
// and a second concurrent call waited, unread, for ever) and one that stops listening
// after its first connection. With Connections 1 both work (TestPoolOneConnection).
func TestPoolOneConnectionExecutorWithoutConnections1(t *testing.T) {
	for _, transport := range []Transport{TransportUnix, TransportTCP} {
		for _, mode := range []string{"serial", "once"} {
			t.Run(string(transport)+"-"+mode, func(t *testing.T) {
				cmd := []string{oneConnBinary(t)}
				if mode == "serial" {
					cmd = append(cmd, "serial")
				}
				p, err := StartPool(testCtx(t, time.Minute), PoolConfig{
					Name: "oneconn", Command: cmd, Transport: transport, AcceptWait: 500 * time.Millisecond,
				})
				if err == nil {
					defer p.Close()
					ctx := testCtx(t, time.Minute)
					a, b := goExecute(ctx, p, NewRequest("job-a", "sleep", nil, map[string]any{"seconds": 1})), goExecute(ctx, p, NewRequest("job-b", "echo", nil, nil))
					ra, rb := await(t, a, time.Minute), await(t, b, time.Minute)
					t.Fatalf("the pool started; two concurrent calls: %s %v / %s %v", ra.out.Status, ra.err, rb.out.Status, rb.err)
				}
				if !errors.Is(err, ErrOneConnection) || !strings.Contains(err.Error(), "Connections 1") {
					t.Fatalf("start: %v; want ErrOneConnection", err)
				}
			})
		}
	}
}
