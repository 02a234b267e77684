package main

import (
	"context"
	"errors"
	"testing"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Submissions authorize against cached contexts, and a change made through another
// replica holds from the very next submission: an executor removed is refused (its
// job not stored), added back is accepted, a job above a lowered job_max is refused,
// and a deleted context is not found. Replica b reads the context once while it does
// not change.
func TestSubmitSeesContextChanges(t *testing.T) {
	srv, st := submitStore(t)
	a, b := benchService(t, st), benchService(t, st) // two replicas of supervisor-daemon
	ctx := context.Background()
	op, executor := Principal{Operator: true}, Principal{Actor: 2}
	rdb := srv.Client(t, 1)
	jobs := func() int64 { return rdb.ZCard(ctx, keys.JobIndex).Val() }
	submit := func(s *service, p Principal, in *jobIn) error {
		_, err := s.jobSubmit(ctx, p, jobSubmitParams{ContextID: 1, Job: in})
		return err
	}
	sh := &jobIn{Script: "true", ScriptType: "sh"}
	loads := 0
	load := b.contexts.load
	b.contexts.load = func(ctx context.Context, id uint32) (*model.Context, map[string]string, error) {
		loads++
		return load(ctx, id)
	}
	for range 3 {
		if err := submit(b, executor, sh); err != nil {
			t.Fatal(err)
		}
	}
	if loads != 1 {
		t.Errorf("3 submissions read the context %d times; want 1", loads)
	}

	update := func(in contextUpdateParams) {
		t.Helper()
		in.ID = 1
		if _, err := a.contextUpdate(ctx, op, in); err != nil {
			t.Fatal(err)
		}
	}
	none, two := []uint32{}, []uint32{2}
	update(contextUpdateParams{Executors: &none})
	before := jobs()
	if err := submit(b, executor, sh); apiCode(err) != codePermission {
		t.Fatalf("a removed executor's next submission: %v; want permission denied", err)
	}
	if _, err := b.jobRun(ctx, executor, jobRunParams{ContextID: 1, Job: sh}); apiCode(err) != codePermission {
		t.Fatalf("a removed executor's job.run: %v; want permission denied", err)
	}
	if after := jobs(); after != before {
		t.Errorf("refused submissions stored %d jobs", after-before)
	}
	update(contextUpdateParams{Executors: &two})
	if err := submit(b, executor, sh); err != nil {
		t.Fatalf("an executor added back: %v", err)
	}

	update(contextUpdateParams{JobMax: &model.JobLimits{Pids: 10}})
	if err := submit(b, executor, &jobIn{Script: "true", ScriptType: "sh", Limits: &model.JobLimits{Pids: 20}}); apiCode(err) != codeInvalidParams {
		t.Fatalf("a job above a lowered job_max: %v; want invalid params", err)
	}
	if err := st.DeleteContext(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := submit(b, executor, sh); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted context: %v; want not found", err)
	}
}
