package store_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// The store benchmarks' shared setup.

// servedBench skips the benchmark unless HERO_BENCH is set, then opens the store and
// makes context ctxID served as servedContext does.
func servedBench(b *testing.B, ctxID uint32, types []model.ScriptType, execs ...string) (*store.Store, *store.DB) {
	b.Helper()
	if os.Getenv("HERO_BENCH") == "" {
		b.Skip("set HERO_BENCH=1")
	}
	s := open(b)
	return s, servedContext(b, s, ctxID, types, execs...)
}

// servedContext creates context ctxID served by runner 1, a local runner of the
// script types types that announces the executors execs: a submission or a dispatch
// routes the context's jobs onto their queues itself, with runner 1's wake tokens, as
// on a node whose runner serves them.
func servedContext(b testing.TB, s *store.Store, ctxID uint32, types []model.ScriptType, execs ...string) *store.DB {
	b.Helper()
	ctx := context.Background()
	db := mustCtx(b, s, ctxID)
	if _, _, err := s.CreateRunner(ctx, ctxID, &model.Runner{ID: 1, Local: true, ScriptTypes: types}, "1"); err != nil {
		b.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, execs); err != nil {
		b.Fatal(err)
	}
	return db
}

// createJobs creates jobs (job.create's way: stored, not dispatched) and returns their
// ids in order; any refusal ends the benchmark.
func createJobs(b *testing.B, s *store.Store, jobs []*model.Job) []uint32 {
	b.Helper()
	ids := make([]uint32, len(jobs))
	for k, r := range s.CreateJobs(context.Background(), jobs, "1") {
		if r.Err != nil {
			b.Fatalf("job %d: %v", k, r.Err)
		}
		ids[k] = r.Job.ID
	}
	return ids
}

// processCPU is the CPU time this process has used (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
