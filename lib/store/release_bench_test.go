package store_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
)

// BenchmarkReleaseDependents10k: the release of a node's 10,000 dependents (no-op
// handler jobs, an executor of theirs registered, so that each call routes its jobs
// onto their queue as on a node with runners): the completion's first ReleaseChunk,
// then ReleaseDependents. Reports the wall time of the release, its calls, and the
// Redis main thread's CPU time per call and per dependent (the figure that an idle
// machine's command time follows more closely than the wall time of a loaded one).
// HERO_BENCH_PAUSED=1: the flow paused, the release without its dispatch.
func BenchmarkReleaseDependents10k(b *testing.B) {
	const n = 10000
	s, db := servedBench(b, 37, []model.ScriptType{"go"}, "go")
	ctx := context.Background()
	var wall, cpu time.Duration
	calls := 0
	for range b.N {
		b.StopTimer()
		jobs := make([]*model.Job, n+1)
		for k := range jobs {
			jobs[k] = &model.Job{CallerID: 1, ContextID: 37, FunctionName: "go#noop", ScriptType: "go"}
		}
		ids := createJobs(b, s, jobs[:1])
		for k := range jobs[1:] {
			jobs[1+k].Dependends = []uint32{ids[0]}
		}
		for from := 1; from <= n; from += 1000 {
			ids = append(ids, createJobs(b, s, jobs[from:from+1000])...)
		}
		f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 37, Jobs: ids}, "1")
		if err != nil {
			b.Fatal(err)
		}
		got, _ := storetest.StartFlow(b, db, f)
		if _, err := db.DispatchStarted(ctx, f.ID, 1, got[:1], "scheduler", time.Now()); err != nil {
			b.Fatal(err)
		}
		res, errs := db.CompleteNodes(ctx, []store.JobEnd{{FlowID: f.ID, CallerID: 1, JobID: ids[0], Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"}})
		if errs[0] != nil || len(res[0].Ready) != store.ReleaseChunk {
			b.Fatalf("completion: %+v %v", res[0], errs[0])
		}
		if os.Getenv("HERO_BENCH_PAUSED") != "" {
			if _, err := db.PauseFlow(ctx, f.ID, "pause", "op", ""); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		c0, t0 := redisCPU(b), time.Now()
		r, err := db.ReleaseDependents(ctx, f.ID, 1, ids[0])
		t1 := time.Now()
		c1 := redisCPU(b)
		if err != nil || r.Dispatched != n-store.ReleaseChunk && os.Getenv("HERO_BENCH_PAUSED") == "" {
			b.Fatalf("release: %d dispatched, %v", r.Dispatched, err)
		}
		wall, cpu, calls = wall+t1.Sub(t0), cpu+c1-c0, calls+r.Calls
	}
	ms := func(d time.Duration, per int) float64 { return float64(d.Microseconds()) / float64(per) / 1000 }
	b.ReportMetric(ms(wall, b.N), "release-ms")
	b.ReportMetric(float64(calls)/float64(b.N), "calls")
	b.ReportMetric(ms(cpu, calls), "redis-cpu-ms/call")
	b.ReportMetric(float64(cpu.Nanoseconds())/1000/float64(b.N*(n-store.ReleaseChunk)), "redis-cpu-us/dependent")
	fmt.Printf("RELEASE %d dependents: %.1f ms, %d calls, Redis CPU %.2f ms a call (%.2f µs a dependent)\n", n-store.ReleaseChunk,
		ms(wall, b.N), calls/b.N, ms(cpu, calls), float64(cpu.Nanoseconds())/1000/float64(b.N*(n-store.ReleaseChunk)))
}
