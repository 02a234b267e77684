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

	"github.com/hero-coordinator/hero/lib/testutil/proctest"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// aofAlways is a Redis that loses no acknowledged write when it is killed.
var aofAlways = redistest.Options{ExtraArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}}

// Acceptance (issue 17, 1 and 2): Redis goes down while 16 jobs finish, every
// optional worker on (the Hero Dispatcher worker, an executor pool), both ways
// (SHUTDOWN NOSAVE for 3 s, kill -9 for 10 s). Every service keeps running; every
// job's work is done exactly once (one end line per job in the ledger, attempt 1);
// and no flow waits out a lease (10 minutes here): the flow ends within the test's
// minute of Redis's return. Before the fix the runner either crashed (the dispatcher worker's nil
// connection) or dropped the ends it could not write, and the jobs ran again once
// their leases expired.
func TestRedisRestartWhileJobsFinish(t *testing.T) {
	for _, tc := range []struct {
		how  string
		down time.Duration
	}{{redistest.DownShutdown, 3 * time.Second}, {redistest.DownKill, 10 * time.Second}} {
		t.Run(fmt.Sprintf("%s-%s", tc.how, tc.down), func(t *testing.T) {
			rs := redistest.Start(t, aofAlways)
			s := harness.StartStack(t, binDir, rs.URL, harness.StackOptions{
				RouterArgs: []string{"--lease", "10m"},
				RunnerArgs: append([]string{"--lease", "10m", "--heartbeat", "5s", "--concurrency", "16"}, harness.OptionalWorkers(binDir)...),
			})
			t.Cleanup(func() {
				if t.Failed() {
					for _, p := range s.Procs() {
						t.Logf("%s log tail:\n%s", p.Name, tail(p.Output(), 40))
					}
				}
			})
			c := s.Setup(t, ctx1)
			dir := harness.ScratchDir(t)
			ledger, release := filepath.Join(dir, "ledger"), filepath.Join(dir, "go")
			// Each job starts, waits for the release (the test takes Redis down first),
			// then ends while Redis is down.
			started, err := proctest.NewSignal(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer started.Close()
			body := fmt.Sprintf("echo x > %s; while [ ! -e %s ]; do sleep 0.05; done; sleep 0.5", started.Path, release)
			var jobs []jobSpec
			for i := uint32(1); i <= 16; i++ {
				jobs = append(jobs, jobSpec{id: i, typ: "sh", script: harness.Ledger(ledger, body)})
			}
			jobs = append(jobs, jobSpec{id: 17, typ: "sh", script: harness.Ledger(ledger, "true"), deps: []uint32{1, 8, 16}})
			createFlow(t, c, 1, nil, jobs...)
			c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 1}, nil)
			if !started.Wait(16, 60*time.Second) {
				t.Fatalf("16 jobs did not start: %d", countLines(t, ledger, "start"))
			}
			if err := rs.Down(tc.how); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.down) // the outage under test
			if err := rs.Up(); err != nil {
				t.Fatal(err)
			}
			up := time.Now()
			f := c.WaitFlow(t, ctx1, 1, 90*time.Second)
			took := time.Since(up)
			if f.Status != "finished" {
				t.Errorf("flow after the outage: %+v", f)
			}
			if took > time.Minute {
				t.Errorf("the flow ended %v after Redis came back: it waited out a lease", took)
			}
			checkLedgerOnce(t, ledger, 17)
			// The dispatcher worker still serves.
			checkDispatcherServes(t, s)
			if bad := s.Exited(); len(bad) > 0 {
				t.Errorf("services after the outage: %v", bad)
			}
		})
	}
}

// checkDispatcherServes runs a Hero Dispatcher job through the API and the runner's
// dispatcher worker.
func checkDispatcherServes(t *testing.T, s *harness.Stack) {
	t.Helper()
	var run struct {
		Reply string `json:"reply"`
	}
	if err := s.Operator().Call("dispatcher.run_job", map[string]any{"worker_id": "local", "timeout": 30,
		"job": map[string]any{"script": "echo hero"}}, &run); err != nil || run.Reply != "hero\n" {
		t.Errorf("a dispatcher job: %+v %v", run, err)
	}
}

// countLines counts the ledger's lines of a kind (0 when it does not exist yet).
func countLines(t *testing.T, ledger, kind string) int {
	lines, err := harness.ReadLedger(ledger)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, l := range lines {
		if l.Kind == kind {
			n++
		}
	}
	return n
}

// checkLedgerOnce: each of n jobs ended exactly once, on its first attempt, and
// started once.
func checkLedgerOnce(t *testing.T, ledger string, n int) {
	t.Helper()
	lines, err := harness.ReadLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	starts, ends := map[string]int{}, map[string]int{}
	for _, l := range lines {
		if l.Kind == "start" {
			starts[l.Job]++
		} else {
			ends[l.Job]++
		}
		if l.Attempt != "1" {
			t.Errorf("job %s: %s of attempt %s", l.Job, l.Kind, l.Attempt)
		}
	}
	if len(ends) != n {
		t.Errorf("%d jobs ended, want %d", len(ends), n)
	}
	for j, k := range ends {
		if k != 1 || starts[j] != 1 {
			t.Errorf("job %s: %d starts, %d ends; want one each", j, starts[j], k)
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Acceptance (issue 17, 1): a runner stopped (SIGTERM) while Redis is down and a job's
// end is unwritten hands the end over: its restart under the same worker id writes
// it, and the job is not run again (one start, one end in the ledger). Before the fix
// the end was dropped and the restart handed the job back to its queue, to run again.
func TestRunnerHandsOverEndsAtShutdown(t *testing.T) {
	rs := redistest.Start(t, aofAlways)
	s := harness.StartStack(t, binDir, rs.URL, harness.StackOptions{
		RunnerArgs: []string{"--lease", "30s", "--heartbeat", "5s", "--shutdown-timeout", "2s"},
	})
	c := s.Setup(t, ctx1)
	dir := harness.ScratchDir(t)
	ledger, release := filepath.Join(dir, "ledger"), filepath.Join(dir, "go")
	sig, err := proctest.NewSignal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sig.Close()
	body := fmt.Sprintf("echo x > %s; while [ ! -e %s ]; do sleep 0.05; done", sig.Path, release)
	createFlow(t, c, 1, nil,
		jobSpec{id: 1, typ: "sh", script: harness.Ledger(ledger, body) + "echo x > " + sig.Path + "\n"},
		jobSpec{id: 2, typ: "sh", script: harness.Ledger(ledger, "true"), deps: []uint32{1}})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 1}, nil)
	if !sig.Wait(1, 60*time.Second) {
		t.Fatal("job 1 did not start")
	}
	if err := rs.Down(redistest.DownKill); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !sig.Wait(1, time.Minute) { // the script ended: its end cannot be written
		t.Fatal("job 1 did not end")
	}
	if err := s.Runner.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Runner.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := rs.Up(); err != nil {
		t.Fatal(err)
	}
	s.Start("runner")
	f := c.WaitFlow(t, ctx1, 1, 60*time.Second)
	if f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}
	checkLedgerOnce(t, ledger, 2)
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Runner.WaitLog(wctx, "wrote a job end handed over by the previous process"); err != nil {
		t.Error(err)
	}
}
