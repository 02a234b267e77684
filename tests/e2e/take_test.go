package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/proctest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Issue 44 (the dependent hop): the end of a job that makes its dependent ready claims
// the dependent for its own runner in the same Redis script (the take), which starts
// it without a wake-up or a claim. Each dependent of a chain is started that way,
// once, with its dependency's result in its environment.
func TestDependentTakenByFinisher(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	createFlow(t, c, 71, nil,
		jobSpec{id: 1, typ: "sh", script: "echo V=1 > $HERO_RESULT_FILE"},
		jobSpec{id: 2, typ: "sh", script: "echo two $HERO_DEP_1_V; echo V=2 > $HERO_RESULT_FILE", deps: []uint32{1}},
		jobSpec{id: 3, typ: "sh", script: "echo three $HERO_DEP_2_V", deps: []uint32{2}},
	)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 71}, nil)
	f := c.WaitFlow(t, ctx1, 71, time.Minute)
	if f.Status != "finished" || f.Result["2.output"] != "two 1\n" || f.Result["3.output"] != "three 2\n" {
		t.Fatalf("flow %s, results %v", f.Status, f.Result)
	}
	evs := events(t, c)
	for _, id := range []uint32{1, 2, 3} {
		if n := countEvents(evs, "job.started", id); n != 1 {
			t.Errorf("job %d started %d times", id, n)
		}
		if j := loadJob(t, c, id); j.Status != "finished" || j.Attempt != 1 {
			t.Errorf("job %d: %+v", id, j)
		}
	}
	// Jobs 2 and 3 were taken (the runner counts a take when it starts the job).
	if n := metric(t, s.Runner, "hero_runner_jobs_taken_total"); n != 2 {
		t.Errorf("hero_runner_jobs_taken_total = %v, want 2 (jobs 2 and 3 taken by their dependency's end)", n)
	}
}

// Issue 44: kill -9 of the runner right after a finish took a dependent (its end
// written, the dependent claimed for the runner, nothing of it running: the runner's
// test hook stops it there): the dependent is not lost; the restarted runner (same
// worker id) takes it back and it runs once.
func TestRunnerKilledAfterTakeRunsDependentOnce(t *testing.T) {
	scratch := harness.ScratchDir(t)
	sig, err := proctest.NewSignal(scratch)
	if err != nil {
		t.Fatal(err)
	}
	defer sig.Close()
	s, c := newStack(t, harness.StackOptions{
		RunnerWrap: []string{"env", "HERO_TEST_PAUSE_AT=taken", "HERO_TEST_PAUSE_FILE=" + sig.Path},
		RunnerArgs: []string{"--lease", "10m", "--heartbeat", "5s"},
	})
	// The take needs the runner idle on its wake list when job 1 ends; a start that
	// found it otherwise (a loaded machine: job 2 claimed without a take, run and
	// finished, the runner never paused) is made again with a new flow, up to 3 times.
	var flow, one, two uint32
	var ledger string
	for attempt := uint32(0); ; attempt++ {
		if attempt == 3 {
			t.Fatal("the runner did not take the dependent in 3 flows")
		}
		flow, one, two = 72+attempt, 10*attempt+1, 10*attempt+2
		ledger = filepath.Join(scratch, fmt.Sprintf("ledger-%d", flow))
		createFlow(t, c, flow, nil,
			jobSpec{id: one, typ: "sh", script: "echo V=1 > $HERO_RESULT_FILE"},
			jobSpec{id: two, typ: "sh", script: fmt.Sprintf("echo ran >> %s; echo two $HERO_DEP_%d_V", ledger, one), deps: []uint32{one}},
		)
		c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": flow}, nil)
		if waitTakeOrEnd(t, c, sig, two) {
			break
		}
		t.Logf("flow %d: job %d ran without a take (the runner was not idle on its wake list): again", flow, two)
	}
	if j := loadJob(t, c, one); j.Status != "finished" {
		t.Fatalf("job %d at the take: %+v", one, j)
	}
	if j := loadJob(t, c, two); j.Status != "started" {
		t.Fatalf("job %d at the take: %+v, want started (claimed by the take)", two, j)
	}
	s.Runner.Kill()
	s.Start("runner")
	f := c.WaitFlow(t, ctx1, flow, time.Minute)
	if f.Status != "finished" || f.Result[fmt.Sprintf("%d.output", two)] != "two 1\n" {
		t.Fatalf("flow after the kill: %s %v; job %d: %+v", f.Status, f.Result, two, loadJob(t, c, two))
	}
	b, _ := os.ReadFile(ledger)
	if n := strings.Count(string(b), "ran"); n != 1 {
		t.Errorf("job %d's command ran %d times, want once", two, n)
	}
	evs := events(t, c)
	if n := countEvents(evs, "job.finished", two); n != 1 {
		t.Errorf("job %d finished %d times", two, n)
	}
	if j := loadJob(t, c, two); j.Status != "finished" || j.Attempt != 1 {
		t.Errorf("job %d: %+v", two, j)
	}
}

// waitTakeOrEnd waits until the runner paused at a take (sig) — true — or job two
// finished without one (the take pauses the runner before the job runs) — false.
func waitTakeOrEnd(t *testing.T, c *harness.Client, sig *proctest.Signal, two uint32) bool {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !sig.Wait(1, 20*time.Millisecond) {
		if loadJob(t, c, two).Status == "finished" {
			return false
		}
		if time.Now().After(deadline) {
			t.Fatalf("neither a take nor job %d's end within a minute", two)
		}
	}
	return true
}
