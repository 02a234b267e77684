package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/proctest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (Trust III 1): what a job can reach, on the real runner with its
// sandbox (bubblewrap): not another job's work directory (same context or another),
// not another process (the runner's, another job's), not a service's environment or
// files (the certificates, the admin secret), not Redis or a service port; exactly
// the environment it was given; nothing it double-forks outlives it; over its memory
// or process limit it ends error naming the limit.
func TestJobSandbox(t *testing.T) {
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{RunnerArgs: []string{"--job-memory", "64MiB", "--job-pids", "32"}})
	c := s.Setup(t, ctx1)
	s.Operator().MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, nil)
	c.MustCall(t, "runner.create", map[string]any{"context_id": 2, "runner": map[string]any{"id": 1, "script_types": []string{"sh"}}}, nil)
	scratch := harness.ScratchDir(t)
	pki, err := harness.PKI()
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctxID uint32, script string, env map[string]string) harness.Job {
		t.Helper()
		var j harness.Job
		c.MustCall(t, "job.run", map[string]any{"context_id": ctxID, "job": map[string]any{"script": script, "script_type": "sh", "env_vars": env}}, &j)
		return j
	}

	// A job that keeps a file in its work directory and says where that is.
	where := filepath.Join(scratch, "where")
	written, err := proctest.NewSignal(scratch)
	if err != nil {
		t.Fatal(err)
	}
	defer written.Close()
	longDone := make(chan harness.Job, 1)
	go func() {
		longDone <- run(ctx1, fmt.Sprintf("echo private > mine; echo \"$PWD\" > %s; echo > %s; sleep 4", where, written.Path), nil)
	}()
	if !written.Wait(1, 20*time.Second) {
		t.Fatal("the first job did not say where its work directory is")
	}
	b, _ := os.ReadFile(where)
	dir := strings.TrimSpace(string(b))
	if b, err := os.ReadFile(filepath.Join(dir, "mine")); err != nil || string(b) != "private\n" {
		t.Fatalf("the first job's file on the host: %q %v", b, err)
	}
	probe := fmt.Sprintf(`
cat %[1]s/mine 2>/dev/null && echo LEAK-other-job
ls %[1]s 2>/dev/null && echo LEAK-other-dir
kill -0 %[2]d 2>/dev/null && echo LEAK-signal-runner
test -e /proc/%[2]d && echo LEAK-proc-runner
cat /proc/%[3]d/environ 2>/dev/null && echo LEAK-scheduler-env
cat %[4]s 2>/dev/null && echo LEAK-key
ls %[5]s 2>/dev/null && echo LEAK-pki
(exec 3<>/dev/tcp/%[6]s) 2>/dev/null && echo LEAK-redis
(exec 3<>/dev/tcp/%[7]s) 2>/dev/null && echo LEAK-api
echo "procs=$(ls /proc | grep -c '^[0-9]')"
echo "env=$(env | cut -d= -f1 | sort | tr '\n' ,)"
true
`, dir, s.Runner.Cmd.Process.Pid, s.Scheduler.Cmd.Process.Pid, pki.Files("scheduler").Key, pki.Dir,
		strings.TrimPrefix(strings.TrimSuffix(redisSrv.URL, "/0"), "redis://"), s.API.GRPCAddr)
	for _, ctxID := range []uint32{ctx1, 2} {
		j := run(ctxID, probe, map[string]string{"GIVEN": "yes"})
		out := j.Result["output"]
		if j.Status != "finished" || strings.Contains(out, "LEAK") {
			t.Errorf("context %d: %s %s\n%s", ctxID, j.Status, j.Error, out)
		}
		// The environment, exactly: what the job was given and the HERO_* it needs
		// (sh adds PWD).
		want := []string{"GIVEN", "HERO_ATTEMPT", "HERO_CALLER_ID", "HERO_CONTEXT_ID", "HERO_FLOW_ID", "HERO_JOB_ID", "HERO_RESULT_FILE", "HOME", "LANG", "PATH", "PWD"}
		sort.Strings(want)
		if !strings.Contains(out, "env="+strings.Join(want, ",")+",\n") {
			t.Errorf("context %d: environment:\n%s", ctxID, out)
		}
	}
	if j := <-longDone; j.Status != "finished" {
		t.Fatalf("the first job: %+v", j)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the first job's work directory outlived it: %v", err)
	}

	// A double-forked child in a new session is gone when its job ends (the job ends
	// once the child has said through a pipe that it is up).
	orphan := filepath.Join(scratch, "orphan.sh")
	if err := os.WriteFile(orphan, []byte("echo > up\nsleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if j := run(ctx1, "mkfifo up; (setsid sh "+orphan+" </dev/null >/dev/null 2>&1 &); read x < up; echo forked", nil); j.Status != "finished" {
		t.Fatalf("forking job: %+v", j)
	}
	if left, err := proctest.WaitExit(proctest.Pgrep("sh "+orphan), 5*time.Second); err != nil || len(left) > 0 {
		t.Errorf("a double-forked setsid child outlived its job: %v (%v)", left, err)
	}

	// Limits: memory and processes end the job with the limit's name.
	if j := run(ctx1, "python3 -c 'b = bytearray(256 << 20); print(len(b))'", nil); j.Status != "error" || !strings.HasPrefix(j.Error, "memory_limit") {
		t.Errorf("over the memory limit: %s %q", j.Status, j.Error)
	}
	if j := run(ctx1, "for i in $(seq 1 100); do sleep 30 & done; wait", nil); j.Status != "error" || !strings.HasPrefix(j.Error, "pids_limit") {
		t.Errorf("over the process limit: %s %q", j.Status, j.Error)
	}
	if !strings.Contains(s.Runner.Output(), `"message":"job execution"`) || !strings.Contains(s.Runner.Output(), `"sandbox":"bwrap"`) {
		t.Error("no audit line per execution (sandbox, limits, exit status)")
	}
}

// Acceptance (Trust III 2): kill -9 of the runner during 5 s jobs: 1 s later no job
// process is alive.
func TestRunnerKillLeavesNoJobProcess(t *testing.T) {
	st, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--concurrency", "4"}})
	scratch := harness.ScratchDir(t)
	started, err := proctest.NewSignal(scratch)
	if err != nil {
		t.Fatal(err)
	}
	defer started.Close()
	var sleepers []string
	var jobs []jobSpec
	for i := uint32(1); i <= 4; i++ {
		p := filepath.Join(scratch, fmt.Sprintf("job%d.sh", i))
		if err := os.WriteFile(p, []byte("echo > "+started.Path+"\nsleep 5\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		sleepers = append(sleepers, p)
		jobs = append(jobs, jobSpec{id: i, typ: "sh", script: "sh " + p})
	}
	createFlow(t, c, 9, nil, jobs...)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 9}, nil)
	if !started.Wait(len(sleepers), 20*time.Second) {
		t.Fatal("not every job started")
	}
	var pids []int // each job's `sh <path>` (its sleep lives as long, in its namespace)
	for _, p := range sleepers {
		pids = append(pids, proctest.Pgrep("sh "+p)...)
	}
	if len(pids) != len(sleepers) {
		t.Fatalf("job processes %v, want one per job", pids)
	}
	// The runner process alone (not its process group, as the harness's Kill does).
	_ = syscall.Kill(st.Runner.Cmd.Process.Pid, syscall.SIGKILL)
	if left, err := proctest.WaitExit(pids, time.Second); err != nil || len(left) > 0 {
		t.Fatalf("job processes alive 1 s after kill -9 of the runner: %v (%v)", left, err)
	}
}
