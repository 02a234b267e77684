package store_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// BenchmarkSubmitPathRedis measures what getting a standalone no-op handler job in
// costs Redis, per job: job.create (how a flow's jobs are made), job.run's path before job.submit (the create script and its
// load in the supervisor, then the scheduler's load, dispatch script and load), and
// SubmitJobs one job a call (job.submit, job.run now) and 100 a call
// (job.submit_batch). With HERO_PATH_CALLGRIND=1 each stage is a callgrind dump
// (scripts/redis-instructions.sh BenchmarkSubmitPathRedis counts its instructions);
// otherwise it prints Redis's CPU per job.
func BenchmarkSubmitPathRedis(b *testing.B) {
	s, n := pathBench(b)
	ctx := context.Background()
	db := servedContext(b, s, 9, []model.ScriptType{"go"}, "go")
	job := func() *model.Job { return &model.Job{CallerID: 1, ContextID: 9, FunctionName: "go#noop"} }
	callgrind := os.Getenv("HERO_PATH_CALLGRIND") != ""
	if callgrind {
		callgrindDump(b, "setup")
	}
	stage := func(name string, fn func() error) {
		if callgrind { // no INFO in between: callgrind's counts alone
			if err := fn(); err != nil {
				b.Fatal(err)
			}
			callgrindDump(b, name)
			return
		}
		c0 := redisCPU(b)
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("  %-44s %6.1f µs Redis CPU/job\n", name, float64((redisCPU(b)-c0).Microseconds())/float64(n))
	}
	b.ResetTimer()
	stage("flow jobs create 500 a call", func() error { // CreateJobs, as figure (b)'s gRPC batches
		for i := 0; i < n; i += 500 {
			js := make([]*model.Job, min(500, n-i))
			for k := range js {
				js[k] = job()
			}
			for _, r := range s.CreateJobs(ctx, js, "1") {
				if r.Err != nil {
					return r.Err
				}
			}
		}
		return nil
	})
	stage("flow job create one a call", func() error { // job.create, as the jobs of a flow are made
		for range n {
			if _, _, err := s.CreateJob(ctx, job(), "1"); err != nil {
				return err
			}
		}
		return nil
	})
	stage("jobrun before: create and load, load, dispatch, load", func() error {
		for range n {
			j, _, err := s.CreateJob(ctx, job(), "1")
			if err != nil {
				return err
			}
			if j, err = db.LoadJob(ctx, j.CallerID, j.ID); err != nil {
				return err
			}
			if _, _, _, _, err := db.Dispatch(ctx, 0, j, "1", 0); err != nil {
				return err
			}
			if _, err := db.LoadJob(ctx, j.CallerID, j.ID); err != nil {
				return err
			}
		}
		return nil
	})
	stage("submit one a call", func() error {
		for range n {
			if _, err := s.SubmitJobs(ctx, 9, []store.Submission{{Job: job()}}, "1"); err != nil {
				return err
			}
		}
		return nil
	})
	stage("submit batch of 100", func() error {
		for i := 0; i < n; i += 100 {
			subs := make([]store.Submission, min(100, n-i))
			for k := range subs {
				subs[k] = store.Submission{Job: job()}
			}
			if _, err := s.SubmitJobs(ctx, 9, subs, "1"); err != nil {
				return err
			}
		}
		return nil
	})
	b.StopTimer()
}

// BenchmarkSubmitJobs is the store call of a stream's batch (supervisor-daemon's group
// commit): SubmitGuarded of 16 new jobs (a script each, as the peers benchmark
// submits) under a guard, against a real Redis. -benchmem's figures are per batch; it
// reports this process's CPU per job (Redis's is another process's).
func BenchmarkSubmitJobs(b *testing.B) {
	s := open(b)
	ctx := context.Background()
	db := servedContext(b, s, 9, []model.ScriptType{"sh"})
	h, err := db.HGetAll(ctx, "context:9")
	if err != nil {
		b.Fatal(err)
	}
	guard := store.NewContextGuard(h, "id", "admins", "executors", "job_max")
	const size = 16
	subs := make([]store.Submission, size)
	cpu0 := processCPU(b)
	b.ResetTimer()
	for range b.N {
		for i := range subs {
			subs[i] = store.Submission{Job: &model.Job{CallerID: 2, Script: "true", ScriptType: "sh"}, Actor: "2"}
		}
		if _, err := s.SubmitGuarded(ctx, 9, subs, guard); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N*size), "cpu-us/job")
}
