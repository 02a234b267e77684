package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

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
	longDone := make(chan harness.Job, 1)
	go func() {
		longDone <- run(ctx1, fmt.Sprintf("echo private > mine; echo \"$PWD\" > %s.tmp; mv %s.tmp %s; sleep 4", where, where, where), nil)
	}()
	var dir string
	deadline := time.Now().Add(20 * time.Second)
	for dir == "" && time.Now().Before(deadline) {
		b, _ := os.ReadFile(where)
		dir = strings.TrimSpace(string(b))
		time.Sleep(10 * time.Millisecond) // a file another process writes: no event to wait on
	}
	if dir == "" {
		t.Fatal("the first job did not say where its work directory is")
	}
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

	// A double-forked child in a new session is gone when its job ends.
	orphan := filepath.Join(scratch, "orphan.sh")
	if err := os.WriteFile(orphan, []byte("sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if j := run(ctx1, "(setsid sh "+orphan+" </dev/null >/dev/null 2>&1 &) ; echo forked", nil); j.Status != "finished" {
		t.Fatalf("forking job: %+v", j)
	}
	if !waitUntil(5*time.Second, func() bool { out, _ := exec.Command("pgrep", "-f", "sh "+orphan).Output(); return len(out) == 0 }) {
		t.Error("a double-forked setsid child outlived its job")
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
	var sleepers []string
	var jobs []jobSpec
	for i := uint32(1); i <= 4; i++ {
		p := filepath.Join(scratch, fmt.Sprintf("job%d.sh", i))
		if err := os.WriteFile(p, []byte("sleep 5\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		sleepers = append(sleepers, p)
		jobs = append(jobs, jobSpec{id: i, typ: "sh", script: "sh " + p})
	}
	createFlow(t, c, 9, nil, jobs...)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 9}, nil)
	alive := func() int {
		n := 0
		for _, p := range sleepers {
			if out, _ := exec.Command("pgrep", "-f", "sh "+p).Output(); len(out) > 0 {
				n++
			}
		}
		return n
	}
	if !waitUntil(20*time.Second, func() bool { return alive() == len(sleepers) }) {
		t.Fatalf("only %d of %d jobs started", alive(), len(sleepers))
	}
	// The runner process alone (not its process group, as the harness's Kill does).
	_ = syscall.Kill(st.Runner.Cmd.Process.Pid, syscall.SIGKILL)
	time.Sleep(time.Second) // the second after the kill is what is measured
	if n := alive(); n > 0 {
		t.Fatalf("%d job processes alive 1 s after kill -9 of the runner", n)
	}
}
