package store_test

import (
	"context"
	"os"
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
		createJobs(b, s, jobs)
		f, _, err := s.CreateFlow(ctx, &model.Flow{ID: uint32(i + 1), CallerID: 1, ContextID: 30, Jobs: ids}, "1")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		c0, t0 := processCPU(b), time.Now()
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
		load, plan, start, cpu = load+t1.Sub(t0), plan+t2.Sub(t1), start+t3.Sub(t2), cpu+processCPU(b)-c0
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) / 1000 }
	b.ReportMetric(per(load), "load-ms")
	b.ReportMetric(per(plan), "plan-ms")
	b.ReportMetric(per(start), "start-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-us/job")
}

// BenchmarkClaimStartsRunner: what a runner's claim of 9 standalone handler jobs (the
// size of a claim under load, BenchmarkPeers (a)) costs this process: ClaimStartsFresh,
// which starts them and gives each one's job (its DUMP in the claim's reply, read by
// HashFromDump, parsed into a model.Job). Reports this
// process's CPU per job (-benchmem: the allocations per call of 9).
func BenchmarkClaimStartsRunner(b *testing.B) {
	const per = 9
	s, db := servedBench(b, 9, []model.ScriptType{"go"}, "go")
	ctx := context.Background()
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
		c0 := processCPU(b)
		got, err := db.ClaimStartsFresh(ctx, q, "runner", time.Minute, per, store.Wake{})
		cpu += processCPU(b) - c0
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

// BenchmarkFinishRunner: what a runner's finish of 12 standalone handler jobs that
// succeeded (the size of a finish under load, BenchmarkPeers (a)) costs this process:
// FinishJobsApplied, their ends applied by the script (the runner's --apply-ends).
// Reports this process's CPU per job (-benchmem: the allocations per call of 12).
func BenchmarkFinishRunner(b *testing.B) {
	const per = 12
	s, db := servedBench(b, 9, []model.ScriptType{"go"}, "go")
	ctx := context.Background()
	if err := s.SetSchedulerSettings(ctx, time.Hour, time.Minute); err != nil {
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
			subs[i] = store.Submission{Job: &model.Job{CallerID: 1, ContextID: 9, FunctionName: "go#noop", Args: []byte(`[1,2]`)}}
		}
		if _, err := s.SubmitJobs(ctx, 9, subs, "1"); err != nil {
			b.Fatal(err)
		}
		got, err := db.ClaimStartsFresh(ctx, q, "runner", time.Minute, per, store.Wake{})
		if err != nil || len(got) != per {
			b.Fatalf("claim: %d %v", len(got), err)
		}
		fs := make([]store.Finish, per)
		for i, st := range got {
			fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Apply: true,
				Outcome: store.JobOutcome{Status: model.JobFinished, StartedAt: time.Now()}}
		}
		b.StartTimer()
		c0 := processCPU(b)
		oks, errs, applied := store.FinishJobsApplied(ctx, fs)
		cpu += processCPU(b) - c0
		for i := range oks {
			if !oks[i] || errs[i] != nil {
				b.Fatalf("finish %d: %v %v", i, oks[i], errs[i])
			}
		}
		if applied.Ends != per {
			b.Fatalf("applied %+v, want %d ends", applied, per)
		}
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*per)/1000, "cpu-us/job")
}
