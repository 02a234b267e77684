package e2e

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkConsole (issue 50, scale; make bench, HERO_BENCH=1, needs chromium): in
// headless Chromium against the real services,
//   - flow_page_ms: a 10,000-job flow's page (a root, 100 branches, 9,899 leaves under
//     them) from navigation until its DAG is drawn and the page follows the flow's
//     events (window.heroLive), per load;
//   - live_ms: from flow.cancel through the API until the open page shows the flow's
//     new state, once;
//   - failed_list_ms: the jobs list filtered to failures (50 failed among the flow's
//     10,000 jobs and the others), one page of 50, timed in the page, per load.
func BenchmarkConsole(b *testing.B) {
	s, c := benchStack(b)
	_, newB := newBrowser(b, "https://"+s.API.HTTPAddr+"/ui/")
	const flowID, n, branches = 900, 10000, 100
	var jobs []any
	ids := make([]uint32, 0, n)
	for i := uint32(1); i <= n; i++ {
		var deps []uint32
		switch {
		case i == 1:
		case i <= 1+branches:
			deps = []uint32{1}
		default:
			deps = []uint32{2 + i%branches}
		}
		jobs = append(jobs, map[string]any{"id": 100000 + i, "script_type": "sh", "script": "true", "depends": idsPlus(deps)})
		ids = append(ids, 100000+i)
		if len(jobs) == 1000 || i == n {
			c.MustCall(b, "job.create_batch", map[string]any{"context_id": ctx1, "jobs": jobs}, nil)
			jobs = nil
		}
	}
	c.MustCall(b, "flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": flowID, "jobs": ids}}, nil)
	var failing []any
	for i := 0; i < 50; i++ {
		failing = append(failing, map[string]any{"job": map[string]any{"script_type": "sh", "script": "exit 1"}})
	}
	c.MustCall(b, "job.submit_batch", map[string]any{"context_id": ctx1, "jobs": failing}, nil)
	var failed struct {
		Items []any `json:"items"`
	}
	c.WaitEvent(b, ctx1, time.Minute, func() bool {
		c.MustCall(b, "job.list", map[string]any{"context_id": ctx1, "status": "error", "limit": 100}, &failed)
		return len(failed.Items) == 50
	})
	if len(failed.Items) != 50 {
		b.Fatalf("%d failed jobs, want 50", len(failed.Items))
	}

	br := newB()
	br.loginActor(1, false)
	var pageMs, listMs float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		br.open(fmt.Sprintf("#/c/1/flow/%d", flowID))
		br.waitJS("the DAG drawn and live", `window.heroLive === 1 && document.querySelectorAll('#dag g.node').length > 100`)
		pageMs += float64(time.Since(start).Microseconds()) / 1000
		var ms float64
		br.eval(`(async () => { const t = performance.now(); const r = await fetch('/ui/api/list?kind=jobs&context_id=1&status=error&limit=50');
			const d = await r.json(); if (d.items.length !== 50) throw new Error('got ' + d.items.length); return performance.now() - t; })()`, &ms)
		listMs += ms
	}
	b.StopTimer()
	b.ReportMetric(pageMs/float64(b.N), "flow_page_ms")
	b.ReportMetric(listMs/float64(b.N), "failed_list_ms")
	var nodes int
	br.eval(`document.querySelectorAll('#dag g.node').length`, &nodes)
	b.ReportMetric(float64(nodes), "drawn_nodes")
	c.MustCall(b, "flow.start", map[string]any{"context_id": ctx1, "id": flowID}, nil)
	br.waitJS("started", `document.querySelector('#flow-status')?.dataset.status === 'started'`)
	start := time.Now()
	c.MustCall(b, "flow.cancel", map[string]any{"context_id": ctx1, "id": flowID}, nil)
	br.waitJS("the cancel seen live", `document.querySelector('#flow-status')?.dataset.status === 'error'`)
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "live_ms")
}

func idsPlus(deps []uint32) []uint32 {
	out := make([]uint32, len(deps))
	for i, d := range deps {
		out[i] = 100000 + d
	}
	return out
}
