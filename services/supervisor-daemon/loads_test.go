package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Concurrent reads of ended jobs (job.run's, grouped by endedLoads) each get their
// own job, whatever their caller; a job that is gone is ErrNotFound for its read
// alone; after shutdown a read is refused.
func TestEndedLoads(t *testing.T) {
	_, st := submitStore(t)
	ctx := context.Background()
	var refs []model.JobRef
	for i := range 12 {
		caller := uint32(1 + i%2)
		out, err := st.SubmitGuarded(ctx, 1, []store.Submission{{Job: &model.Job{CallerID: caller, ContextID: 1, Script: fmt.Sprintf("echo %d", i), ScriptType: "sh"}, Actor: "t"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, model.JobRef{ContextID: 1, CallerID: caller, ID: out[0].Job.ID})
	}
	refs = append(refs, model.JobRef{ContextID: 1, CallerID: 2, ID: 999999}) // never created
	l := newEndedLoads(st)
	jobs, errs := make([]*model.Job, len(refs)), make([]error, len(refs))
	var wg sync.WaitGroup
	for i, r := range refs {
		wg.Go(func() { jobs[i], errs[i] = l.load(ctx, r) })
	}
	wg.Wait()
	for i, r := range refs[:12] {
		if errs[i] != nil {
			t.Fatalf("load %v: %v", r, errs[i])
		}
		if j := jobs[i]; j.CallerID != r.CallerID || j.ID != r.ID || j.Script != fmt.Sprintf("echo %d", i) {
			t.Errorf("load %v: job %d:%d %q", r, j.CallerID, j.ID, j.Script)
		}
	}
	if err := errs[12]; !errors.Is(err, store.ErrNotFound) {
		t.Errorf("load of a job never created: %v; want ErrNotFound", err)
	}
	l.shutdown()
	if _, err := l.load(ctx, refs[0]); err != errShuttingDown {
		t.Errorf("load after shutdown: %v; want errShuttingDown", err)
	}
}

// A job.run call whose job ended while the grouped reads shut down still gets its
// job (read on its own), not a refusal that its retry would answer by running the job
// again.
func TestLoadEndedAfterShutdown(t *testing.T) {
	_, st := submitStore(t)
	ctx := context.Background()
	out, err := st.SubmitGuarded(ctx, 1, []store.Submission{{Job: &model.Job{CallerID: 1, ContextID: 1, Script: "echo x", ScriptType: "sh"}, Actor: "t"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := st.Ctx(1)
	if err != nil {
		t.Fatal(err)
	}
	s := benchService(t, st)
	s.loads = newEndedLoads(st)
	s.loads.shutdown()
	j, err := s.loadEnded(ctx, db, out[0].Job)
	if err != nil || j.ID != out[0].Job.ID || j.Script != "echo x" {
		t.Fatalf("loadEnded after shutdown: %+v, %v", j, err)
	}
}
