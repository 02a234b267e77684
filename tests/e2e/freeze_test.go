package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/testutil/proctest"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (issue 43): a runner frozen past its lease (SIGSTOP, then SIGCONT), while
// the router's sweep queues its jobs again and no other runner takes them. Job 1 ends
// exit 0 during the freeze, within its own timeout (4 s) but after the timeout has
// passed in the runner's clock; job 2 still runs when the runner comes back. Each is
// recorded once with its real outcome: finished, exit 0, attempt 1, one start and one
// end in the ledger. Before the fix the runner found its leases lost on resume and
// dropped both runs (they ran again), or recorded job 1 as "timeout".
func TestRunnerFrozenPastItsLease(t *testing.T) {
	const lease, freeze = 3 * time.Second, 7 * time.Second
	rs := redistest.Start(t, aofAlways)
	s := harness.StartStack(t, binDir, rs.URL, harness.StackOptions{
		RouterArgs: []string{"--lease", lease.String()},
		RunnerArgs: []string{"--lease", lease.String(), "--heartbeat", "1s", "--concurrency", "4"},
	})
	t.Cleanup(func() {
		_ = s.Runner.Signal(syscall.SIGCONT) // never leave it stopped
		if t.Failed() {
			for _, p := range s.Procs() {
				t.Logf("%s log tail:\n%s", p.Name, tail(p.Output(), 40))
			}
		}
	})
	c := s.Setup(t, ctx1)
	dir := harness.ScratchDir(t)
	ledger, release1, release2 := filepath.Join(dir, "ledger"), filepath.Join(dir, "go1"), filepath.Join(dir, "go2")
	sig, err := proctest.NewSignal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sig.Close()
	wait := func(file string) string {
		return fmt.Sprintf("echo x > %s; while [ ! -e %s ]; do sleep 0.02; done", sig.Path, file)
	}
	createFlow(t, c, 1, nil,
		jobSpec{id: 1, typ: "sh", timeout: 4, script: harness.Ledger(ledger, wait(release1)+"; sleep 0.2") + "echo x > " + sig.Path + "\n"},
		jobSpec{id: 2, typ: "sh", script: harness.Ledger(ledger, wait(release2)+"; sleep 0.2")})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 1}, nil)
	if !sig.Wait(2, 60*time.Second) {
		t.Fatal("the jobs did not start")
	}
	frozen := time.Now()
	if err := s.Runner.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(release1, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !sig.Wait(1, 60*time.Second) {
		t.Fatal("job 1 did not end during the freeze")
	}
	// The router's sweep queues both jobs again once their leases expired.
	rc := rs.Client(t, ctx1)
	deadline := time.Now().Add(time.Minute)
	for rc.LLen(context.Background(), keys.Queue("sh")).Val() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the sweep did not queue the frozen runner's jobs again")
		}
		time.Sleep(50 * time.Millisecond) // Redis's state, polled: a requeue has no event
	}
	time.Sleep(time.Until(frozen.Add(freeze))) // the rest of the freeze under test: past job 1's timeout
	if err := s.Runner.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(release2, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := c.WaitFlow(t, ctx1, 1, 60*time.Second)
	if f.Status != "finished" {
		t.Errorf("flow after the freeze: %+v", f)
	}
	for _, id := range []uint32{1, 2} {
		if j := loadJob(t, c, id); j.Status != "finished" || j.ExitCode != 0 || j.Error != "" || j.Attempt != 1 {
			t.Errorf("job %d after the freeze: status %s exit %d error %q attempt %d", id, j.Status, j.ExitCode, j.Error, j.Attempt)
		}
	}
	checkLedgerOnce(t, ledger, 2)
	if n := rc.LLen(context.Background(), keys.Queue("sh")).Val(); n != 0 {
		t.Errorf("%d queued copies left", n)
	}
	if out := s.Runner.Output(); strings.Contains(out, "lease lost") || !strings.Contains(out, "taken back") {
		t.Errorf("the runner's log does not show its leases taken back (or shows one lost)")
	}
}
