package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
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

// millionJobsLoader writes jobs ARGV[2]..ARGV[3] of caller 1 in the script's DB as a
// finished job each (every 1000th failed), with the jobs' index and its status
// indexes, as the store writes them: a benchmark's data, made in Redis in one script
// per 5,000 jobs (short enough that Redis answers the others between them) rather than
// through the API.
const millionJobsLoader = `
local base_s, from, to, base_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
for i = from, to do
  local st = 'finished'
  if i % 1000 == 0 then st = 'error' end
  local score = base_ms + math.floor(i / 25)
  redis.call('HSET', 'job:1:' .. i, 'id', i, 'caller_id', 1, 'context_id', 1, 'script', 'true', 'script_type', 'sh',
    'status', st, 'created_at', base_s, 'updated_at', base_s, 'error', st == 'error' and 'exit status 1' or '')
  redis.call('ZADD', KEYS[1], score, '1:' .. i)
  redis.call('ZADD', KEYS[1] .. ':' .. st, score, '1:' .. i)
end
return to - from + 1`

// BenchmarkConsoleMillionJobs (issue 50, scale; make bench, HERO_BENCH=1, needs
// chromium): the jobs list filtered to failures in headless Chromium at 1,000,000
// jobs of a context (1,000 of them failed), loaded by millionJobsLoader:
//   - failed_list_ms: /ui/api/list?kind=jobs&status=error, one page of 50, timed in
//     the page (fetch to parsed answer), the mean of 5 loads per iteration;
//   - failed_page_ms: from navigation to #/c/1/jobs?status=error until its 50 rows
//     are shown, per load;
//   - all_list_ms: the unfiltered first page of 50, for comparison.
func BenchmarkConsoleMillionJobs(b *testing.B) {
	s, _ := benchStack(b)
	rc := redisSrv.Client(b, int(ctx1))
	ctx := context.Background()
	const n, batch, loads = 1_000_000, 5_000, 5
	now := time.Now()
	t0 := time.Now()
	for from := 1; from <= n; from += batch {
		if err := rc.Eval(ctx, millionJobsLoader, []string{keys.JobIndex}, now.Unix(), from, min(from+batch-1, n), now.UnixMilli()).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("1,000,000 jobs loaded in %v", time.Since(t0).Round(time.Millisecond))
	br := newBrowserFor(b, "https://"+s.API.HTTPAddr+"/ui/")
	br.loginActor(1, false)
	timeList := func(query string) float64 {
		var ms float64
		br.eval(`(async () => { const t = performance.now(); const r = await fetch('/ui/api/list?kind=jobs&context_id=1&limit=50`+query+`');
			const d = await r.json(); if (!d.items || d.items.length !== 50) throw new Error(JSON.stringify(d).slice(0, 200)); return performance.now() - t; })()`, &ms)
		return ms
	}
	var listMs, pageMs, allMs float64
	b.ResetTimer()
	for i := 0; i < b.N*loads; i++ {
		start := time.Now()
		br.open("#/c/1/jobs?status=error")
		br.waitJS("the failed jobs shown", `document.querySelectorAll('#jobs-table tbody tr').length === 50`)
		pageMs += float64(time.Since(start).Microseconds()) / 1000
		listMs += timeList("&status=error")
		allMs += timeList("")
	}
	b.StopTimer()
	b.ReportMetric(listMs/float64(b.N*loads), "failed_list_ms")
	b.ReportMetric(pageMs/float64(b.N*loads), "failed_page_ms")
	b.ReportMetric(allMs/float64(b.N*loads), "all_list_ms")
	// A million keys take longer to free than a call waits: freed in the background.
	if err := rc.FlushDBAsync(ctx).Err(); err != nil {
		b.Logf("flush the loaded jobs: %v", err)
	}
}

// newBrowserFor is one signed-out browser of a new Chromium.
func newBrowserFor(b *testing.B, base string) *browser {
	_, newB := newBrowser(b, base)
	return newB()
}
