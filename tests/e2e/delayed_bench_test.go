package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkDelayedLateness: 200 delayed sh jobs due over ten seconds, one every 50 ms
// (submitted in one job.submit_batch, run_at 2 s to 12 s ahead: 20 jobs a second, which
// the sandboxed runner of a 2-core machine keeps up with, so that the start's lateness is
// the time machinery's and the sandbox's, not a backlog's); the lateness of each is its
// dispatch (dispatched_at_ms) and its start (started_at_ms) after its run_at. Issue 47's
// bar: p99 of the lateness at most 50 ms.
func BenchmarkDelayedLateness(b *testing.B) {
	_, c := benchStack(b, "--log-level", "info", "--concurrency", "32")
	const n = 200
	base := time.Now().Add(2 * time.Second)
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = map[string]any{"job": map[string]any{"script": "true", "script_type": "sh"},
			"run_at": base.Add(time.Duration(i) * 50 * time.Millisecond).UTC().Format(time.RFC3339Nano)}
	}
	var res struct {
		Items []struct {
			Job struct {
				ID uint32 `json:"id"`
			} `json:"job"`
		} `json:"items"`
	}
	b.ResetTimer()
	c.MustCall(b, "job.submit_batch", map[string]any{"context_id": ctx1, "jobs": items}, &res)
	type ran struct {
		Status       string `json:"status"`
		RunAtMs      int64  `json:"run_at_ms"`
		DispatchedMs int64  `json:"dispatched_at_ms"`
		StartedAtMs  int64  `json:"started_at_ms"`
	}
	var dispatch, start []float64
	for _, it := range res.Items {
		var j ran
		ok := c.WaitEvent(b, ctx1, time.Minute, func() bool {
			c.MustCall(b, "job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": it.Job.ID}, &j)
			return j.Status == "finished" || j.Status == "error"
		})
		if !ok || j.Status != "finished" {
			b.Fatalf("delayed job %d: %+v", it.Job.ID, j)
		}
		if j.StartedAtMs < j.RunAtMs {
			b.Errorf("job %d started %d ms before its run_at", it.Job.ID, j.RunAtMs-j.StartedAtMs)
		}
		dispatch = append(dispatch, float64(j.DispatchedMs-j.RunAtMs))
		start = append(start, float64(j.StartedAtMs-j.RunAtMs))
	}
	b.StopTimer()
	pct := func(v []float64, p float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	slowest := 0
	for i := range start {
		if start[i] > start[slowest] {
			slowest = i
		}
	}
	fmt.Printf("the latest start: the %d. job due, %.0f ms late (dispatched %.0f ms late)\n", slowest+1, start[slowest], dispatch[slowest])
	b.ReportMetric(pct(dispatch, 0.5), "dispatch-p50-ms")
	b.ReportMetric(pct(dispatch, 0.99), "dispatch-p99-ms")
	b.ReportMetric(pct(start, 0.5), "start-p50-ms")
	b.ReportMetric(pct(start, 0.99), "start-p99-ms")
	fmt.Printf("%d delayed jobs due over 10 s: lateness of the dispatch p50 %.0f ms, p99 %.0f ms; of the start p50 %.0f ms, p99 %.0f ms\n",
		n, pct(dispatch, 0.5), pct(dispatch, 0.99), pct(start, 0.5), pct(start, 0.99))
	// Issue 47's bar: p99 of the lateness at most 50 ms, the dispatch's (the timer's)
	// and the start's (the timer's, the runner's claim and the sandbox's making). A
	// loaded machine cannot judge it, so it is printed, not failed.
	for _, f := range []struct {
		what string
		v    []float64
	}{{"dispatch", dispatch}, {"start", start}} {
		verdict := "met"
		if pct(f.v, 0.99) > 50 {
			verdict = "NOT met"
		}
		fmt.Printf("issue 47's bar (%s lateness p99 <= 50 ms): %s\n", f.what, verdict)
	}
}
