package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/proctest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// BenchmarkScriptChain (issue 44): a 200-job chain of `sh -c true` through the real
// stack with its defaults (signed calls, mTLS, the sandbox on: forking sandboxes made
// ahead), with a bwrap sandbox made ahead for each job (--sandbox-fork=false), with
// each job's sandbox made when it starts (--sandbox-ahead 0, as before issue 44) and
// with --sandbox none. It reports the step (one job's start to the next's:
// started_at_us of job i+1 − job i's) and the dependent hop (a job's started_at_us −
// its dependency's finished_at_us), p50 and p90, and the run between them (a job's
// finished_at_us − its started_at_us), p50: started_at_us is when the job's
// process was about to run, not its claim; and the CPU per job of the stack's
// processes, its Redis and their children (the jobs and their sandboxes), and of the
// runner's children alone.
func BenchmarkScriptChain(b *testing.B) {
	for _, tc := range []struct {
		name string
		args []string
	}{{"sandbox", nil}, {"sandbox-no-fork", []string{"--sandbox-fork=false"}}, {"sandbox-made-per-job", []string{"--sandbox-ahead", "0"}}, {"no-sandbox", []string{"--sandbox", "none"}}} {
		b.Run(tc.name, func(b *testing.B) {
			s, c := benchStack(b, append([]string{"--log-level", "info"}, tc.args...)...)
			ids := createJobs(b, c, 200, true)
			c.MustCall(b, "flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": 1, "jobs": ids}}, nil)
			b.ResetTimer()
			runner := s.Runner.Cmd.Process.Pid
			// The runner's live descendants too: a forking sandbox's jobs are its
			// zygote's children, counted in it (cutime) while it lives.
			live0 := descendantsCPU(runner)
			cpu0, jobs0 := stackTreeCPU(s)+live0, childrenCPU(b, runner)+live0
			c.MustCall(b, "flow.start", map[string]any{"context_id": ctx1, "id": 1}, nil)
			f := c.WaitFlow(b, ctx1, 1, 5*time.Minute)
			b.StopTimer()
			perJob := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(len(ids)) }
			live := descendantsCPU(runner)
			cpu, jobsCPU := perJob(stackTreeCPU(s)+live-cpu0), perJob(childrenCPU(b, runner)+live-jobs0)
			if f.Status != "finished" {
				b.Fatalf("flow: %+v", f)
			}
			jobs := make([]harness.Job, len(ids))
			for i, id := range ids {
				jobs[i] = loadJob2(b, c, id)
			}
			var step, hop, run []float64
			for i := 1; i < len(jobs); i++ {
				step = append(step, float64(jobs[i].StartedAtUs-jobs[i-1].StartedAtUs)/1000)
				hop = append(hop, float64(jobs[i].StartedAtUs-jobs[i-1].FinishedAtUs)/1000)
				run = append(run, float64(jobs[i].FinishedAtUs-jobs[i].StartedAtUs)/1000)
			}
			b.ReportMetric(percentile(step, 0.5), "step-p50-ms")
			b.ReportMetric(percentile(hop, 0.5), "hop-p50-ms")
			b.ReportMetric(cpu, "cpu-ms/job")
			fmt.Printf("200-job sh chain (%s): step p50 %.1f ms, p90 %.1f ms; dependent hop p50 %.2f ms, p90 %.2f ms; run (started_at_us → finished_at_us) p50 %.2f ms; whole chain %.2f s; CPU per job %.1f ms, of which the runner's children (jobs, sandboxes) %.1f ms\n",
				tc.name, percentile(step, 0.5), percentile(step, 0.9), percentile(hop, 0.5), percentile(hop, 0.9), percentile(run, 0.5),
				float64(jobs[len(jobs)-1].FinishedAtUs-jobs[0].StartedAtUs)/1e6, cpu, jobsCPU)
		})
	}
}

// descendantsCPU is the CPU time of a process's live descendants and of the children
// they waited for (proctest.CPU).
func descendantsCPU(root int) time.Duration {
	var sum time.Duration
	for _, pid := range proctest.Descendants(root) {
		sum += proctest.CPU(pid)
	}
	return sum
}

// childrenCPU is the CPU time of a process's children that ended and were waited for
// (cutime + cstime of /proc/<pid>/stat): a runner's jobs and their sandboxes.
func childrenCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	var sum time.Duration
	for _, k := range []int{13, 14} { // cutime cstime
		v, _ := strconv.ParseInt(f[k], 10, 64)
		sum += time.Duration(v) * 10 * time.Millisecond // USER_HZ 100
	}
	return sum
}
