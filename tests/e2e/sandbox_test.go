package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
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
	// Its jobs run in forking sandboxes (the default, issue 44; hero-zygote next to
	// the runner, when the harness could build it): /readyz says so, and what follows
	// holds of them.
	if _, err := os.Stat(filepath.Join(binDir, "hero-zygote")); err == nil {
		if _, body := readyzBody(t, s.Runner); !strings.Contains(body, "jobs forked by forking sandboxes") {
			t.Fatalf("the runner's /readyz does not say its jobs are forked by forking sandboxes: %s", body)
		}
	}
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
	if !written.Wait(1, time.Minute) {
		t.Fatal("the first job did not say where its work directory is")
	}
	b, _ := os.ReadFile(where)
	dir := strings.TrimSpace(string(b))
	// Its work directory is in its own filesystem, in its sandbox only: nothing of it
	// is on the host. Every sandboxed job's has the same name (made ahead with its
	// sandbox): the next jobs see their own there, empty, never this one's.
	if dir != "/tmp/hero-job" {
		t.Fatalf("the first job's work directory: %q", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "mine")); !os.IsNotExist(err) {
		t.Fatalf("the first job's file is on the host: %v", err)
	}
	probe := fmt.Sprintf(`
cat %[1]s/mine 2>/dev/null && echo LEAK-other-job
[ -z "$(ls -A %[1]s)" ] || echo LEAK-other-dir
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
		want := []string{"GIVEN", "HERO_ATTEMPT", "HERO_CALLER_ID", "HERO_CONTEXT_ID", "HERO_FLOW_ID", "HERO_JOB_ID", "HERO_RESULT_FILE", "HOME", "LANG", "PATH", "PWD", "TRACEPARENT"}
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
	if left, err := proctest.WaitExit(proctest.Pgrep("sh "+orphan), time.Minute); err != nil || len(left) > 0 {
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
	if !started.Wait(len(sleepers), time.Minute) {
		t.Fatal("not every job started")
	}
	var pids []int // each job's `sh <path>` (its sleep lives as long, in its namespace)
	for _, p := range sleepers {
		pids = append(pids, proctest.Pgrep("sh "+p)...)
	}
	// A shell's child caught between its fork and its exec of sleep still has the
	// shell's command line: one root per job.
	if roots := proctest.Roots(pids); len(roots) != len(sleepers) {
		t.Fatalf("job processes %v (roots %v), want one per job", pids, roots)
	}
	// Its forking sandboxes' zygotes (issue 44: the jobs run in them by default).
	zygotes := descendantsNamed(st.Runner.Cmd.Process.Pid, "/.hero-zygote")
	if _, err := os.Stat(filepath.Join(binDir, "hero-zygote")); err == nil && len(zygotes) < len(sleepers) {
		t.Fatalf("zygotes under the runner: %v, want one per running job at least", zygotes)
	}
	// The runner process alone (not its process group, as the harness's Kill does).
	_ = syscall.Kill(st.Runner.Cmd.Process.Pid, syscall.SIGKILL)
	if left, err := proctest.WaitExit(pids, time.Second); err != nil || len(left) > 0 {
		t.Fatalf("job processes alive 1 s after kill -9 of the runner: %v (%v)", left, err)
	}
	if left, err := proctest.WaitExit(zygotes, time.Minute); err != nil || len(left) > 0 {
		t.Fatalf("zygotes alive after kill -9 of the runner: %v (%v)", left, err)
	}
}

// descendantsNamed are the live descendants of root whose command line starts with
// name.
func descendantsNamed(root int, name string) []int {
	var out []int
	for _, pid := range proctest.Descendants(root) {
		if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); bytes.HasPrefix(cmd, []byte(name+"\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// Acceptance (Trust III 1, network on): with outbound network a job gets an
// interface and DNS, yet reaches neither Redis nor a service port — not on the host's
// loopback (through the user-mode stack's gateway), not on the host's own addresses
// (a service listening on every address). The control run, with the host's addresses
// left out of the deny list, reaches that service: the network works, the deny list
// is what stops it.
func TestJobNetworkOutbound(t *testing.T) {
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{RunnerArgs: []string{"--job-network", "outbound"}})
	c := s.Setup(t, ctx1)
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("hello\n"))
			_ = conn.Close()
		}
	}()
	hostIP := nonLoopbackIPv4(t)
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	u, err := url.Parse(redisSrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]string{
		"svc-host": net.JoinHostPort(hostIP, port(ln.Addr().String())), "svc-gw": net.JoinHostPort("10.0.2.2", port(ln.Addr().String())),
		"redis-lo": u.Host, "redis-gw": net.JoinHostPort("10.0.2.2", u.Port()), "redis-host": net.JoinHostPort(hostIP, u.Port()),
		"api-gw": net.JoinHostPort("10.0.2.2", port(s.API.GRPCAddr)), "api-host": net.JoinHostPort(hostIP, port(s.API.GRPCAddr)),
	}
	script := "grep -q tap0 /proc/net/dev && echo has-tap\ngrep -q 10.0.2.3 /etc/resolv.conf && echo has-dns\n"
	// Each probe ends on the connection's own answer (connected, refused, or the
	// prohibit route's error at once); timeout 60 is a safety net, never the answer.
	for tag, addr := range targets {
		h, p, _ := net.SplitHostPort(addr)
		script += fmt.Sprintf("timeout 60 bash -c 'exec 3<>/dev/tcp/%s/%s && echo %s-ok $(head -n1 <&3)' 2>/dev/null || echo %s-refused\n", h, p, tag, tag)
	}
	run := func() string {
		var j harness.Job
		c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"script": script, "script_type": "sh"}}, &j)
		if j.Status != "finished" {
			t.Fatalf("probe: %s %s\n%s", j.Status, j.Error, j.Result["output"])
		}
		return j.Result["output"]
	}
	out := run()
	for _, want := range []string{"has-tap", "has-dns"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("network on, want %s:\n%s", want, out)
		}
	}
	for tag := range targets {
		if !strings.Contains(out, tag+"-refused\n") {
			t.Errorf("%s (%s) reachable from a job:\n%s", tag, targets[tag], out)
		}
	}

	s.Runner.Kill()
	s.Args["runner"] = append(s.Args["runner"], "--job-network-deny", "198.51.100.0/24")
	s.Start("runner")
	if out := run(); !strings.Contains(out, "svc-host-ok hello\n") || !strings.Contains(out, "svc-gw-refused\n") {
		t.Errorf("control (host addresses not denied): want the service reached through the host's address only:\n%s", out)
	}
}

func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this host")
	return ""
}

// Acceptance (Trust III, limits per context and per job): a context's job_max is the
// operators' and bounds what its admins and jobs ask for (refused at submission,
// nothing stored); its job_defaults apply to jobs that ask nothing; a job's own limits
// win; the runner refuses what is above its own maximum.
func TestJobLimitsPerContext(t *testing.T) {
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{RunnerArgs: []string{"--job-pids", "512", "--job-memory-max", "512MiB"}})
	c := s.Setup(t, ctx1)
	op := s.Operator()
	const mib = 1 << 20

	// job_max is the operators' alone; job_defaults within it are the admins'.
	if err := c.Call("context.update", map[string]any{"id": ctx1, "job_max": map[string]any{"pids": 1000}}, nil); err == nil || !strings.Contains(err.Error(), "job_max") {
		t.Fatalf("an admin set job_max: %v", err)
	}
	op.MustCall(t, "context.update", map[string]any{"id": ctx1, "job_max": map[string]any{"memory_bytes": 256 * mib, "pids": 100, "network": "none"}}, nil)
	if err := c.Call("context.update", map[string]any{"id": ctx1, "job_defaults": map[string]any{"memory_bytes": 1024 * mib}}, nil); err == nil || !strings.Contains(err.Error(), "job_defaults") {
		t.Fatalf("defaults above job_max accepted: %v", err)
	}
	var ctxOut struct {
		JobDefaults map[string]any `json:"job_defaults"`
		JobMax      map[string]any `json:"job_max"`
	}
	c.MustCall(t, "context.update", map[string]any{"id": ctx1, "job_defaults": map[string]any{"pids": 16}}, &ctxOut)
	if ctxOut.JobDefaults["pids"] != float64(16) || ctxOut.JobMax["memory_bytes"] != float64(256*mib) {
		t.Fatalf("context after update: %+v", ctxOut)
	}

	run := func(ctxID uint32, script string, limits map[string]any) (harness.Job, error) {
		var j harness.Job
		err := c.Call("job.run", map[string]any{"context_id": ctxID, "job": map[string]any{"script": script, "script_type": "sh", "limits": limits}}, &j)
		return j, err
	}
	// Above job_max: refused at submission, naming the limit; nothing stored.
	for _, over := range []map[string]any{{"memory_bytes": 512 * mib}, {"pids": 101}, {"network": "outbound"}} {
		if _, err := run(ctx1, "echo no", over); err == nil || !strings.Contains(err.Error(), "job.limits") {
			t.Errorf("job asking %v: %v", over, err)
		}
	}
	var list struct {
		Items []harness.Job `json:"items"`
	}
	c.MustCall(t, "job.list", map[string]any{"context_id": ctx1}, &list)
	if len(list.Items) != 0 {
		t.Fatalf("refused jobs were stored: %+v", list.Items)
	}

	// The context's default (16 processes) applies to a job that asks nothing; a
	// job's own limit wins.
	fork := "for i in $(seq 1 40); do sleep 30 & done; wait"
	if j, err := run(ctx1, fork, nil); err != nil || j.Status != "error" || !strings.HasPrefix(j.Error, "pids_limit") {
		t.Errorf("40 processes under the context's default of 16: %+v %v", j, err)
	}
	quick := "for i in $(seq 1 40); do sleep 0.1 & done; wait; echo fine"
	if j, err := run(ctx1, quick, map[string]any{"pids": 64}); err != nil || j.Status != "finished" {
		t.Errorf("40 processes asking for 64: %+v %v", j, err)
	}
	var loaded harness.Job
	if j, _ := run(ctx1, "echo ok", map[string]any{"memory_bytes": 128 * mib}); j.ID != 0 {
		c.MustCall(t, "job.load", map[string]any{"context_id": ctx1, "caller_id": j.CallerID, "id": j.ID}, &loaded)
	}
	if loaded.Limits["memory_bytes"] != float64(128*mib) {
		t.Errorf("job.load shows the job's limits: %+v", loaded.Limits)
	}

	// The runner's own maximum (512 MiB) refuses a job of a context without one.
	op.MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, nil)
	c.MustCall(t, "runner.create", map[string]any{"context_id": 2, "runner": map[string]any{"id": 1, "script_types": []string{"sh"}}}, nil)
	j, err := run(2, "echo big", map[string]any{"memory_bytes": 1024 * mib})
	if err != nil || j.Status != "error" || !strings.Contains(j.Error, "memory_bytes") || !strings.Contains(j.Error, "runner's maximum") {
		t.Errorf("above the runner's maximum: %+v %v", j, err)
	}
}
