package main

import (
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/execcore"
	"github.com/hero-coordinator/hero/lib/model"
)

// A job's scratch directory (--sandbox none: a host directory under --work-dir) that
// cannot be made is the host's fault, not the job's: the runner makes it again
// before the job ends in error. Here --work-dir is gone at the job's first try and
// back before its second: the job finishes, run once.
func TestScratchDirectoryMadeAgain(t *testing.T) {
	h := newHarness(t)
	away := h.cfg.WorkDir + ".away"
	var tries atomic.Int32
	h.r.onScratchRetry = func(try int) {
		tries.Store(int32(try))
		if err := os.Rename(away, h.cfg.WorkDir); err != nil {
			t.Errorf("putting --work-dir back: %v", err)
		}
	}
	h.start()
	if err := os.Rename(h.cfg.WorkDir, away); err != nil {
		t.Fatal(err)
	}
	j := h.submit(`echo ran >> "`+h.dir+`/runs"`, 0)
	got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError)
	if got.Status != model.JobFinished {
		t.Fatalf("job %s, error %q: want finished after its scratch directory was made again", got.Status, got.Error)
	}
	if n := tries.Load(); n != 1 {
		t.Errorf("%d failed tries before the directory was made, want 1", n)
	}
	if b, err := os.ReadFile(h.dir + "/runs"); err != nil || string(b) != "ran\n" {
		t.Errorf("the job's runs: %q (%v), want one", b, err)
	}
}

// A scratch directory that can never be made ends the job in error after
// execcore.SandboxTries tries, saying so.
func TestScratchDirectoryNeverMadeEndsTheJobAfterItsTries(t *testing.T) {
	h := newHarness(t)
	var tries atomic.Int32
	h.r.onScratchRetry = func(try int) { tries.Store(int32(try)) }
	h.start()
	if err := os.Rename(h.cfg.WorkDir, h.cfg.WorkDir+".away"); err != nil {
		t.Fatal(err)
	}
	j := h.submit(`true`, 0)
	got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError)
	want := "runner cannot make a scratch directory (3 tries): "
	if got.Status != model.JobError || !strings.HasPrefix(got.Error, want) {
		t.Fatalf("job %s, error %q: want error %q…", got.Status, got.Error, want)
	}
	if n := tries.Load(); n != execcore.SandboxTries-1 {
		t.Errorf("%d retries, want %d", n, execcore.SandboxTries-1)
	}
}
