package e2e

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// benchJobs is the kind of job a limits benchmark runs: sandboxed `sh true` jobs, or
// no-op handler jobs of the Go example executor (go#noop).
type benchJobs string

const (
	shJobs      benchJobs = "sh"
	handlerJobs benchJobs = "handler"
)

// limitsBenchStack is benchStack with a runner of --concurrency slots that runs jobs
// of kind: for handler jobs, with a pool of the Go example executor (one process
// taking a call per slot).
func limitsBenchStack(b *testing.B, kind benchJobs, slots int) (*harness.Stack, *harness.Client) {
	args := []string{"--concurrency", strconv.Itoa(slots)}
	if kind == handlerJobs {
		goExec := filepath.Join(binDir, harness.ExampleExecutor)
		args = append(args, "--executors", fmt.Sprintf("go;cmd=%s;size=1;inflight=%d;pipeline=%d", goExec, slots, min(32, slots)))
	}
	return benchStack(b, args...)
}

// benchJob is a job of kind with id id, as job.submit takes it.
func benchJob(kind benchJobs, id int) map[string]any {
	if kind == handlerJobs {
		return map[string]any{"id": id, "function_name": "go#noop"}
	}
	return map[string]any{"id": id, "script": "true", "script_type": "sh"}
}

// submitJobsTB submits n jobs of kind to context ctxID with ids from first (one
// job.submit_batch per 1,000).
func submitJobsTB(tb testing.TB, c *harness.Client, kind benchJobs, ctxID uint32, first, n int) {
	tb.Helper()
	for i := 0; i < n; i += 1000 {
		items := make([]map[string]any, 0, 1000)
		for k := i; k < min(i+1000, n); k++ {
			items = append(items, map[string]any{"job": benchJob(kind, first+k)})
		}
		c.MustCall(tb, "job.submit_batch", map[string]any{"context_id": ctxID, "jobs": items}, nil)
	}
}

// startsUs reads the start stamps (µs; 0: not started) of jobs first…first+n-1 of
// caller 1 in context ctxID.
func startsUs(tb testing.TB, ctxID uint32, first, n int) []int64 {
	tb.Helper()
	rdb := redisSrv.Client(tb, int(ctxID))
	p := rdb.Pipeline()
	cmds := make([]interface{ Val() string }, n)
	for i := range n {
		cmds[i] = p.HGet(context.Background(), "job:1:"+strconv.Itoa(first+i), "started_at_us")
	}
	_, _ = p.Exec(context.Background()) // a job not started has no stamp (redis.Nil)
	out := make([]int64, n)
	for i, c := range cmds {
		out[i], _ = strconv.ParseInt(c.Val(), 10, 64)
	}
	return out
}

// countIn counts the stamps in [from, to).
func countIn(us []int64, from, to time.Time) int {
	n := 0
	for _, u := range us {
		if u >= from.UnixMicro() && u < to.UnixMicro() {
			n++
		}
	}
	return n
}

// BenchmarkRateLimit: a rate limit of 50 jobs/s on the context (limit.set, burst
// default 5) with jobs queued on a runner of 32 slots: the starts over 30 s (from the
// jobs' start stamps, after the first second) hold 50/s within 5% (issue 48:
// acceptance 3). Then the limit is changed at run time to 100/s: each of the next 5
// whole seconds is counted; the new rate is to hold from the next second. Then the
// limit is removed: the starts of the next second are what the runner starts without
// a limit, the ceiling of any rate measured here.
//
// handler: no-op handler jobs (go#noop): the runner could start thousands a second,
// so the limit alone paces them. sh: sandboxed `sh true` jobs, each run in a sandbox
// and cgroups made and torn down around it: a 2-core machine gets through some 30 a
// second (the run's last figure), below 50/s, so that run measures the machine, not
// the limit.
func BenchmarkRateLimit(b *testing.B) {
	for _, kind := range []benchJobs{handlerJobs, shJobs} {
		b.Run(string(kind), func(b *testing.B) { benchRateLimit(b, kind) })
	}
}

func benchRateLimit(b *testing.B, kind benchJobs) {
	_, c := limitsBenchStack(b, kind, 32)
	c.MustCall(b, "limit.set", map[string]any{"context_id": ctx1, "scope": "context", "rate": 50, "per": "1s"}, nil)
	const n = 5000 // 50/s × 31 s and 100/s × 6 s, and some left for the unlimited second
	b.ResetTimer()
	submitJobsTB(b, c, kind, ctx1, 1, n)
	var t0 time.Time
	if !c.WaitEvent(b, ctx1, time.Minute, func() bool {
		for _, u := range startsUs(b, ctx1, 1, 20) {
			if u != 0 && (t0.IsZero() || time.UnixMicro(u).Before(t0)) {
				t0 = time.UnixMicro(u)
			}
		}
		return !t0.IsZero()
	}) {
		b.Fatal("no job started")
	}
	from, to := t0.Add(time.Second), t0.Add(31*time.Second)
	<-time.After(time.Until(to)) // the measurement's window, not a wait for an event
	c.MustCall(b, "limit.set", map[string]any{"context_id": ctx1, "scope": "context", "rate": 100, "per": "1s"}, nil)
	changed := time.Now()
	<-time.After(time.Until(changed.Add(6 * time.Second)))
	c.MustCall(b, "limit.delete", map[string]any{"context_id": ctx1, "scope": "context"}, nil)
	removed := time.Now()
	<-time.After(time.Until(removed.Add(2 * time.Second)))
	b.StopTimer()
	us := startsUs(b, ctx1, 1, n)
	got := float64(countIn(us, from, to)) / 30
	dev := math.Abs(got-50) / 50 * 100
	b.ReportMetric(got, "jobs/s@50")
	b.ReportMetric(dev, "deviation-%")
	verdict := "met"
	if dev > 5 {
		verdict = "NOT met"
	}
	fmt.Printf("%s jobs: rate limit 50/s over 30 s: %.2f jobs/s (%.1f%% off); issue 48's bar (within 5%%): %s\n", kind, got, dev, verdict)
	line := "after the change to 100/s, starts per whole second:"
	for k := 0; k < 5; k++ {
		s := changed.Add(time.Duration(k) * time.Second)
		line += fmt.Sprintf(" %d", countIn(us, s, s.Add(time.Second)))
	}
	next := countIn(us, changed.Add(time.Second), changed.Add(2*time.Second))
	b.ReportMetric(float64(next), "jobs-in-next-second@100")
	fmt.Println(line)
	queued := 0
	for _, u := range us {
		if u == 0 || u >= removed.UnixMicro() {
			queued++
		}
	}
	free := countIn(us, removed, removed.Add(time.Second))
	b.ReportMetric(float64(free), "jobs/s-unlimited")
	fmt.Printf("without the limit, starts in the first second: %d (of %d jobs queued when it was removed)\n", free, queued)
}

// BenchmarkFairnessLatency: context 1 has 10,000 jobs queued on a runner it shares
// with context 2 (concurrency 2); 20 times, a job is submitted to context 2 and its
// wait from its dispatch to its start is measured (issue 48: within 20 ms).
//
// A job of context 2 waits for one of the two slots to come free, that is for a job
// of context 1 to end: handler: no-op handler jobs (go#noop), which hold a slot for a
// millisecond or so: the wait is the runner's and the claim's. sh: sandboxed `sh
// true` jobs, which hold a slot from their claim to their sandbox's teardown (some
// 100 ms on a 2-core machine): the wait is about that (printed: context 1's starts a
// second, and so the time a slot is held).
func BenchmarkFairnessLatency(b *testing.B) {
	for _, kind := range []benchJobs{handlerJobs, shJobs} {
		b.Run(string(kind), func(b *testing.B) { benchFairnessLatency(b, kind) })
	}
}

func benchFairnessLatency(b *testing.B, kind benchJobs) {
	st, c := limitsBenchStack(b, kind, 2)
	st.Operator().MustCall(b, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, nil)
	c.MustCall(b, "runner.create", map[string]any{"context_id": 2, "runner": map[string]any{"id": 1, "script_types": []string{"sh"}}}, nil)
	const n = 10000
	submitJobsTB(b, c, kind, ctx1, 1, n)
	b.ResetTimer()
	began := time.Now()
	var waits []float64
	var spans [][2]int64 // each job of context 2: its dispatch and its start (µs)
	for i := 1; i <= 20; i++ {
		c.MustCall(b, "job.submit", map[string]any{"context_id": 2, "job": benchJob(kind, i)}, nil)
		var j orderJob
		if !c.WaitEvent(b, 2, time.Minute, func() bool { j = loadOrderJob(b, c, 2, uint32(i)); return j.StartedAtUs != 0 }) {
			b.Fatalf("context 2's job %d did not start within a minute", i)
		}
		waits = append(waits, float64(j.StartedAtUs-j.Dispatched*1000)/1000)
		spans = append(spans, [2]int64{j.Dispatched * 1000, j.StartedAtUs})
	}
	b.StopTimer()
	ended := time.Now()
	us := startsUs(b, ctx1, 1, n)
	// context 1's starts while each job of context 2 waited (acceptance 2 counts them:
	// fewer than 10)
	passed := 0
	for _, sp := range spans {
		k := 0
		for _, u := range us {
			if u > sp[0] && u < sp[1] {
				k++
			}
		}
		passed = max(passed, k)
	}
	left := 0
	for _, u := range us {
		if u == 0 {
			left++
		}
	}
	during := countIn(us, began, ended)
	perSec := float64(during) / ended.Sub(began).Seconds()
	p50, most := percentile(waits, 0.5), percentile(waits, 1)
	b.ReportMetric(p50, "wait-p50-ms")
	b.ReportMetric(most, "wait-max-ms")
	b.ReportMetric(perSec, "ctx1-starts/s")
	b.ReportMetric(float64(passed), "ctx1-starts-while-waiting-max")
	verdict := "met"
	if p50 > 20 {
		verdict = "NOT met"
	}
	fmt.Printf("%s jobs: context 2's job with context 1's backlog (%d of %d not started at the end): wait p50 %.1f ms, max %.1f ms; issue 48's bar (p50 within 20 ms): %s\n", kind, left, n, p50, most, verdict)
	fmt.Printf("%s jobs: context 1 started %d jobs in the %.1f s measured (%.0f/s: a slot held %.1f ms a job), at most %d while one of context 2's waited\n",
		kind, during, ended.Sub(began).Seconds(), perSec, 2000/max(perSec, 0.001), passed)
}
