package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"

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
	if n := metricValue(t, s.Runner.AdminAddr, `hero_jobs_failed_total{reason="disk_limit",script_type="sh"}`); n != 1 {
		t.Errorf("hero_jobs_failed_total{reason=disk_limit} = %v, want 1", n)
	}
	if after := free(); after+16<<20 < before {
		t.Errorf("the host's free space went from %d to %d bytes", before, after)
	}
}
