package store_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// BenchmarkFlowStart: what the scheduler's start of a 10,000-job flow of independent
// jobs does before its first dispatch (figure (b) of docs/benchmarks.md: its jobs wait
// for it), one stage after the other: the read of what the start needs of each job
// (LoadStartJobs), the plan (PlanDAG) and the start script (StartFlow). Reports each
// stage's time and this process's CPU per job (-cpuprofile shows where).
func BenchmarkFlowStart(b *testing.B) {
	if os.Getenv("HERO_BENCH") == "" {
		b.Skip("set HERO_BENCH=1")
	}
	const n = 10000
	s := open(b)
	ctx := context.Background()
	db := mustCtx(b, s, 30)
	var load, plan, start, cpu time.Duration
	for i := range b.N {
		b.StopTimer()
		jobs := make([]*model.Job, n)
		ids := make([]uint32, n)
		base := uint32(i*n + 1)
		for k := range jobs {
			ids[k] = base + uint32(k)
			jobs[k] = &model.Job{ID: ids[k], CallerID: 1, ContextID: 30, FunctionName: "go#noop", ScriptType: "go"}
		}
		for k, r := range s.CreateJobs(ctx, jobs, "1") {
			if r.Err != nil {
				b.Fatalf("job %d: %v", k, r.Err)
			}
		}
		f, _, err := s.CreateFlow(ctx, &model.Flow{ID: uint32(i + 1), CallerID: 1, ContextID: 30, Jobs: ids}, "1")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		c0, t0 := cpuNow(), time.Now()
		got, err := db.LoadStartJobs(ctx, 1, ids)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		deps, err := store.PlanDAG(f, got)
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		ready, _, ok, err := db.StartFlow(ctx, f, got, deps, "1")
		if err != nil || !ok || len(ready) != n {
			b.Fatalf("start: %d ready, %v %v", len(ready), ok, err)
		}
		t3 := time.Now()
		load, plan, start, cpu = load+t1.Sub(t0), plan+t2.Sub(t1), start+t3.Sub(t2), cpu+cpuNow()-c0
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) / 1000 }
	b.ReportMetric(per(load), "load-ms")
	b.ReportMetric(per(plan), "plan-ms")
	b.ReportMetric(per(start), "start-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-us/job")
}

// cpuNow is this process's CPU time so far (user + system).
func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClaimStartsRunner: what a runner's claim of 9 standalone handler jobs (the
// size of a claim under load, BenchmarkPeers (a)) costs this process: ClaimStartsFresh,
// which starts them and gives each one's job (read after the claim: more than
// lua/lib_claim.lua's INLINE_READS started, parsed into a model.Job). Reports this
// process's CPU per job (-benchmem: the allocations per call of 9).
func BenchmarkClaimStartsRunner(b *testing.B) {
	if os.Getenv("HERO_BENCH") == "" {
		b.Skip("set HERO_BENCH=1")
	}
	const per = 9
	s := open(b)
	ctx := context.Background()
	db := mustCtx(b, s, 9)
	if _, _, err := s.CreateRunner(ctx, 9, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		b.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"go"}); err != nil {
		b.Fatal(err)
	}
	q := keys.Queue((&model.Job{FunctionName: "go#noop"}).QueueSuffix())
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		subs := make([]store.Submission, per)
		for i := range subs {
			subs[i] = store.Submission{Job: &model.Job{CallerID: 1, ContextID: 9, FunctionName: "go#noop", Awaited: true,
				EnvVars: map[string]string{"A": "1"}, Args: []byte(`[1,2]`)}}
		}
		if _, err := s.SubmitJobs(ctx, 9, subs, "1"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		c0 := cpuNow()
		got, err := db.ClaimStartsFresh(ctx, q, "runner", time.Minute, per, store.Wake{})
		cpu += cpuNow() - c0
		if err != nil || len(got) != per {
			b.Fatalf("claim: %d %v", len(got), err)
		}
		for _, st := range got {
			if st.Job == nil || st.Job.FunctionName != "go#noop" {
				b.Fatalf("started %+v", st)
			}
		}
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*per)/1000, "cpu-us/job")
}
