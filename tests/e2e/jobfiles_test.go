package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/proctest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (issue 42, "nothing the job leaves is read with the runner's rights";
// "a disk bound per job"), on the real runner with its sandbox: a result file that
// is a symbolic link (to the runner's own environment, were it followed), a FIFO, or
// larger than the runner takes ends its job error naming why, without the runner
// reading through the link or waiting on the FIFO; the runner goes on serving every
// context (a job in another context finishes with its result afterwards). A job that
// fills its disk (--job-disk) ends error "disk_limit: …", counted under that reason,
// and the host's free space is what it was.
func TestJobFilesTheRunnerDoesNotTake(t *testing.T) {
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{RunnerArgs: []string{"--job-disk", "32MiB"}})
	c := s.Setup(t, ctx1)
	s.Operator().MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, nil)
	c.MustCall(t, "runner.create", map[string]any{"context_id": 2, "runner": map[string]any{"id": 1, "script_types": []string{"sh"}}}, nil)
	run := func(ctxID uint32, script string) harness.Job {
		t.Helper()
		var j harness.Job
		c.MustCall(t, "job.run", map[string]any{"context_id": ctxID, "job": map[string]any{"script": script, "script_type": "sh"}}, &j)
		return j
	}
	for _, tc := range []struct{ script, want string }{
		{`ln -sf /proc/self/environ "$HERO_RESULT_FILE"`, "result file: not a regular file (a symbolic link)"},
		{`mkfifo "$HERO_RESULT_FILE"`, "result file: not a regular file (a FIFO)"},
		{`head -c 2000000 /dev/zero | tr '\0' 'a' | fold -w 1000 | sed 's/^/K=/' > "$HERO_RESULT_FILE"`, "result file: larger than 1048576 bytes"},
	} {
		j := run(ctx1, tc.script)
		if j.Status != "error" || j.Error != tc.want {
			t.Errorf("%s: %s %q, want error %q", tc.script, j.Status, j.Error, tc.want)
		}
		for k, v := range j.Result {
			if k != "output" || strings.Contains(v, "REDIS") || strings.Contains(v, "PATH=") {
				t.Errorf("%s: result %q=%q taken", tc.script, k, v)
			}
		}
	}
	if j := run(2, `echo DONE=yes > "$HERO_RESULT_FILE"`); j.Status != "finished" || j.Result["DONE"] != "yes" {
		t.Fatalf("a job in another context afterwards: %+v", j)
	}

	free := func() uint64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(os.TempDir(), &st); err != nil {
			t.Fatal(err)
		}
		return st.Bavail * uint64(st.Bsize)
	}
	before := free()
	j := run(ctx1, "head -c 100000000 /dev/zero > big; head -c 100000000 /dev/zero > /tmp/more; echo went on")
	if j.Status != "error" || !strings.HasPrefix(j.Error, "disk_limit: the job's files filled its 32 MiB of disk") {
		t.Errorf("a job filling its disk: %s %q", j.Status, j.Error)
	}
	// The runner counts a job's end once its end is written, which job.run may return
	// on first.
	failed := func() float64 {
		return metricValue(t, s.Runner.AdminAddr, `hero_jobs_failed_total{reason="disk_limit",script_type="sh"}`)
	}
	if !waitUntil(time.Minute, func() bool { return failed() == 1 }) {
		t.Errorf("hero_jobs_failed_total{reason=disk_limit} = %v, want 1", failed())
	}
	// 200 MB written, 32 MiB kept: the host's disk did not take them (other processes
	// of the host may write meanwhile: a margin).
	if after := free(); after+64<<20 < before {
		t.Errorf("the host's free space went from %d to %d bytes", before, after)
	}
}

// Acceptance (issue 43, "a job's processes never outlive their runner"): kill -9 of
// the runner (its process alone) at each step of a job's start — after the claim
// (nothing of the job running), with its process spawned and waiting at its gate,
// through the gate with its sandbox being made (the runner's test hook,
// HERO_TEST_PAUSE_AT, stops it there), and with the job's command running — leaves
// no process of the job alive, and the job's command never starts after the
// runner's death (the job's own ledger line, "start <unix ns>", says when it began).
func TestRunnerKilledMidStartRunsNothingAfter(t *testing.T) {
	for _, step := range []string{"claimed", "spawned", "gated", "begun"} {
		t.Run(step, func(t *testing.T) { killRunnerAt(t, step) })
	}
}

func killRunnerAt(t *testing.T, step string) {
	scratch := harness.ScratchDir(t)
	sig, err := proctest.NewSignal(scratch)
	if err != nil {
		t.Fatal(err)
	}
	defer sig.Close()
	var opt harness.StackOptions
	if step != "begun" {
		opt.RunnerWrap = []string{"env", "HERO_TEST_PAUSE_AT=" + step, "HERO_TEST_PAUSE_FILE=" + sig.Path}
	}
	st, c := newStack(t, opt)
	ledger := filepath.Join(scratch, "ledger")
	job := filepath.Join(scratch, "job.sh")
	if err := os.WriteFile(job, []byte(fmt.Sprintf("echo \"start $(date +%%s%%N)\" >> %s\necho up > %s\nsleep 5\n", ledger, sig.Path)), 0o755); err != nil {
		t.Fatal(err)
	}
	createFlow(t, c, 9, nil, jobSpec{id: 1, typ: "sh", script: "sh " + job})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 9}, nil)
	if !sig.Wait(1, time.Minute) {
		t.Fatalf("the runner did not get to %s", step)
	}
	// The job's processes: the runner's (the trampoline, bwrap; its guard too), the
	// job's command; and every process of their groups, once they are gone.
	runner := st.Runner.Cmd.Process.Pid
	pids := append(proctest.Descendants(runner), proctest.Pgrep("sh "+job)...)
	groups := map[int]bool{}
	for _, p := range pids {
		if g, err := syscall.Getpgid(p); err == nil && g != runner {
			groups[g] = true
		}
	}
	killed := time.Now()
	if err := syscall.Kill(st.Runner.Cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if left, err := proctest.WaitExit(pids, time.Minute); err != nil || len(left) > 0 {
		t.Fatalf("job processes alive after the runner's death: %v (%v)", left, err)
	}
	for g := range groups {
		if left, err := proctest.WaitGroupExit(g, time.Minute); err != nil || len(left) > 0 {
			t.Fatalf("processes of the job's group %d alive after the runner's death: %v (%v)", g, left, err)
		}
	}
	t.Logf("the job's processes (%d, groups %v) gone %v after the runner's death", len(pids), groups, time.Since(killed).Round(time.Millisecond))
	if left := proctest.Pgrep("sh " + job); len(left) > 0 {
		t.Fatalf("the job's command after the runner's death: %v", left)
	}
	b, _ := os.ReadFile(ledger)
	var starts int
	for _, l := range strings.Fields(strings.ReplaceAll(string(b), "start ", "")) {
		ns, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			t.Fatalf("ledger %q", b)
		}
		if at := time.Unix(0, ns); at.After(killed) {
			t.Errorf("the job's command started %v after the runner's death", at.Sub(killed))
		}
		starts++
	}
	// Killed at "gated", the job's sandbox was being made: its command may have
	// started before the runner's death, or not at all.
	if (step == "claimed" || step == "spawned") && starts != 0 || step == "begun" && starts != 1 {
		t.Errorf("killed at %s: the job's command started %d times", step, starts)
	}
}
