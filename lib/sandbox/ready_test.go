package sandbox

import (
	"errors"
	"os"
	"testing"
	"time"
)

// A forking sandbox's zygote says "start" and closes its report at once: a runner
// that looks only once both are there (starved on a loaded host, or a restart making
// all its sandboxes at once) must take the sandbox as made. Before, one select on the
// word and the end picked either at random, and half such sandboxes were destroyed as
// "the sandbox ended before its job" — the error of the job waiting for it (e2e
// TestRunnerKilledAfterTakeRunsDependentOnce: the restarted runner's first job).
func TestStartSaidBeforeTheReportsEnd(t *testing.T) {
	for i := 0; i < 200; i++ {
		rp := reportOf(t, "start\n")
		<-rp.done // the runner looks only now
		if err := rp.awaitStart(time.Minute); err != nil {
			t.Fatalf("round %d: a sandbox that said start, then closed its report: %v", i, err)
		}
	}
	// Ended without the word: not made.
	if err := reportOf(t, "").awaitStart(time.Minute); !errors.Is(err, errEndedEarly) {
		t.Fatalf("a report ended without start: %v", err)
	}
	if err := reportOf(t, "sta").awaitStart(time.Minute); !errors.Is(err, errEndedEarly) {
		t.Fatalf("a report ended within start: %v", err)
	}
}

// reportOf is a report read from a pipe that got text and was closed.
func reportOf(t *testing.T, text string) *report {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	rp := &report{r: r, done: make(chan struct{}), started: make(chan struct{})}
	go rp.read()
	if _, err := w.WriteString(text); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	return rp
}

// The same with real forking sandboxes: each launched, its report read to its end
// (its zygote said start and closed it) before the runner looks. Each is made.
func TestForkingSandboxMadeWhenTheRunnerLooksLate(t *testing.T) {
	s := newForkSandbox(t, 1)
	for i := 0; i < 12; i++ {
		p, err := s.launchAhead(Limits{DiskBytes: 1 << 20}, false)
		if err != nil {
			t.Fatalf("sandbox %d: %v", i, err)
		}
		select {
		case <-p.job.report.done:
		case <-time.After(time.Minute):
			t.Fatalf("sandbox %d: its zygote did not close its report within a minute", i)
		}
		if err := p.ready(time.Minute); err != nil {
			t.Fatalf("sandbox %d, its report ended after start: %v", i, err)
		}
		if p.zy == nil || !p.zy.alive() {
			t.Fatalf("sandbox %d: not a live forking sandbox", i)
		}
		p.destroy()
	}
}
