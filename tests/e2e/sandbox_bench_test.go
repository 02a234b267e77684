package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// BenchmarkScriptChain (issue 44): a 200-job chain of `sh -c true` through the real
// stack with its defaults (signed calls, mTLS, the sandbox on: sandboxes made ahead),
// with each job's sandbox made when it starts (--sandbox-ahead 0, as before issue 44)
// and with --sandbox none. It reports the step (one job's start to the next's:
// started_at_us of job i+1 − job i's) and the dependent hop (a job's started_at_us −
// its dependency's finished_at_us), p50 and p90: started_at_us is when the job's
// process was about to run, not its claim.
func BenchmarkScriptChain(b *testing.B) {
	for _, tc := range []struct {
		name string
		args []string
	}{{"sandbox", nil}, {"sandbox-made-per-job", []string{"--sandbox-ahead", "0"}}, {"no-sandbox", []string{"--sandbox", "none"}}} {
		b.Run(tc.name, func(b *testing.B) {
			_, c := benchStack(b, append([]string{"--log-level", "info"}, tc.args...)...)
			ids := createJobs(b, c, 200, true)
			c.MustCall(b, "flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": 1, "jobs": ids}}, nil)
			b.ResetTimer()
			c.MustCall(b, "flow.start", map[string]any{"context_id": ctx1, "id": 1}, nil)
			f := c.WaitFlow(b, ctx1, 1, 5*time.Minute)
			b.StopTimer()
			if f.Status != "finished" {
				b.Fatalf("flow: %+v", f)
			}
			jobs := make([]harness.Job, len(ids))
			for i, id := range ids {
				jobs[i] = loadJob2(b, c, id)
			}
			var step, hop []float64
			for i := 1; i < len(jobs); i++ {
				step = append(step, float64(jobs[i].StartedAtUs-jobs[i-1].StartedAtUs)/1000)
				hop = append(hop, float64(jobs[i].StartedAtUs-jobs[i-1].FinishedAtUs)/1000)
			}
			b.ReportMetric(percentile(step, 0.5), "step-p50-ms")
			b.ReportMetric(percentile(hop, 0.5), "hop-p50-ms")
			fmt.Printf("200-job sh chain (%s): step p50 %.1f ms, p90 %.1f ms; dependent hop p50 %.2f ms, p90 %.2f ms; whole chain %.2f s\n",
				tc.name, percentile(step, 0.5), percentile(step, 0.9), percentile(hop, 0.5), percentile(hop, 0.9),
				float64(jobs[len(jobs)-1].FinishedAtUs-jobs[0].StartedAtUs)/1e6)
		})
	}
}
