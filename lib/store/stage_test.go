package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// stageJobs creates the jobs ids of a staged flow (caller 12, context 3).
func stageJobs(t *testing.T, s *store.Store, flowID uint32, ids ...uint32) []store.JobCreated {
	t.Helper()
	jobs := make([]*model.Job, len(ids))
	for i, id := range ids {
		jobs[i] = &model.Job{ID: id, CallerID: 12, ContextID: 3, Script: "true", ScriptType: "sh"}
	}
	out, err := s.CreateStagedJobs(context.Background(), 3, flowID, 12, jobs, "12")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countJobs counts the job hashes of context 3.
func countJobs(t *testing.T) int {
	t.Helper()
	ks, err := srv.Client(t, 3).Keys(context.Background(), keys.JobPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(ks)
}

// A flow begun with BeginFlow: its jobs are created under the flow's id with the ids
// it reserved, and flow.create stores it and drops the stage; an id outside the range,
// or a flow listing fewer jobs than begun, is refused naming why.
func TestStagedFlowCreatedAsAUnit(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 3)
	ctx := context.Background()
	st, err := db.BeginFlow(ctx, 12, 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs() != 3 || st.FlowID == 0 {
		t.Fatalf("stage %+v", st)
	}
	// a job created the usual way meanwhile takes an id past the range
	j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 12, ContextID: 3, Script: "true", ScriptType: "sh"}, "12")
	if err != nil || j.ID <= st.LastJob {
		t.Fatalf("job %+v beside a stage %+v: %v", j, st, err)
	}
	res := stageJobs(t, s, st.FlowID, st.FirstJob, st.FirstJob+1, st.LastJob+5)
	if res[0].Err != nil || res[1].Err != nil || res[0].Job.FlowID != st.FlowID {
		t.Fatalf("staged jobs: %+v", res)
	}
	if res[2].Err == nil || !strings.Contains(res[2].Err.Error(), "not one flow.begin gave") {
		t.Fatalf("a job outside the range: %v", res[2].Err)
	}
	_, _, err = s.CreateFlow(ctx, &model.Flow{ID: st.FlowID, CallerID: 12, ContextID: 3, Jobs: []uint32{st.FirstJob, st.FirstJob + 1}}, "12")
	if err == nil || !strings.Contains(err.Error(), "began the flow for 3") {
		t.Fatalf("a flow of fewer jobs than begun: %v", err)
	}
	stageJobs(t, s, st.FlowID, st.LastJob)
	f, _, err := s.CreateFlow(ctx, &model.Flow{ID: st.FlowID, CallerID: 12, ContextID: 3, Jobs: []uint32{st.FirstJob, st.FirstJob + 1, st.LastJob}}, "12")
	if err != nil || f.ID != st.FlowID || len(f.Jobs) != 3 {
		t.Fatalf("flow %+v: %v", f, err)
	}
	if n := srv.Client(t, 3).Exists(ctx, keys.FlowStage(st.FlowID)).Val(); n != 0 {
		t.Fatal("the stage stays after the flow was stored")
	}
	if srv.Client(t, 0).ZScore(ctx, keys.Expire, "3:stage:"+strconv.FormatUint(uint64(st.FlowID), 10)).Err() == nil {
		t.Fatal("the stage's expiry stays after the flow was stored")
	}
	// the stage is gone: no more jobs under it
	if _, err := s.CreateStagedJobs(ctx, 3, st.FlowID, 12, []*model.Job{{ID: st.FirstJob, CallerID: 12, ContextID: 3, Script: "true", ScriptType: "sh"}}, "12"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("jobs under a stored flow's stage: %v", err)
	}
	// another caller's stage is not this caller's
	st2, err := db.BeginFlow(ctx, 12, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.TouchFlowStage(ctx, st2.FlowID, 13); err == nil || !strings.Contains(err.Error(), "begun by caller 12") {
		t.Fatalf("another caller's stage: %v", err)
	}
}

// A stage whose client went away: once its expiry passes, the sweep (the scheduler's
// retention pops it from coord:expire) deletes its jobs chunk by chunk and nothing of
// it is left; jobs of the caller that are not the stage's stay. A renewed stage is left
// (its entry put back), and flow.abort (force) sweeps an open one at once.
func TestStageSweptWhenItsClientIsGone(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 3)
	ctx := context.Background()
	other, _, err := s.CreateJob(ctx, &model.Job{CallerID: 12, ContextID: 3, Script: "true", ScriptType: "sh"}, "12")
	if err != nil {
		t.Fatal(err)
	}
	n := store.StageSweepChunk*2 + 7
	st, err := db.BeginFlow(ctx, 12, n, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	stageAll(t, s, st)
	if got := countJobs(t); got != n+1 {
		t.Fatalf("%d jobs, want %d", got, n+1)
	}
	popped := popExpired(t, s)
	if len(popped) != 1 || popped[0].Kind != "stage" || popped[0].FlowID != st.FlowID {
		t.Fatalf("popped %+v", popped)
	}
	calls := 0
	for more := true; more; calls++ {
		var err error
		if more, _, err = db.SweepFlowStage(ctx, st.FlowID, false); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 3 {
		t.Errorf("%d sweep calls for %d jobs, want 3 chunks", calls, n)
	}
	if got := countJobs(t); got != 1 {
		t.Fatalf("%d jobs left after the sweep, want 1 (the caller's other job)", got)
	}
	if _, err := db.LoadJob(ctx, 12, other.ID); err != nil {
		t.Fatalf("the other job went: %v", err)
	}
	if srv.Client(t, 3).Exists(ctx, keys.FlowStage(st.FlowID)).Val() != 0 {
		t.Fatal("the stage is left after its sweep")
	}
	if c := srv.Client(t, 3).ZCard(ctx, keys.JobIndex).Val(); c != 1 {
		t.Fatalf("job index holds %d, want 1", c)
	}
	if c := srv.Client(t, 0).ZCard(ctx, keys.Expire).Val(); c != 0 {
		t.Fatalf("coord:expire holds %d entries", c)
	}

}

// A stage that has not expired is left by the sweep; flow.abort (force) sweeps it.
func TestStageAborted(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 3)
	ctx := context.Background()
	st, err := db.BeginFlow(ctx, 12, 2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	stageJobs(t, s, st.FlowID, st.FirstJob, st.LastJob)
	if more, del, err := db.SweepFlowStage(ctx, st.FlowID, false); err != nil || more || del != 0 {
		t.Fatalf("sweep of a live stage: %v %d %v", more, del, err)
	}
	if got := countJobs(t); got != 2 {
		t.Fatalf("%d jobs after the sweep of a live stage, want 2", got)
	}
	if del, err := db.SweepFlowStageAll(ctx, st.FlowID, true); err != nil || del != 2 {
		t.Fatalf("abort: %d deleted, %v", del, err)
	}
	if got := countJobs(t); got != 0 {
		t.Fatalf("%d jobs left after the abort", got)
	}
}

// stageAll creates every job of a stage, 1,000 a call.
func stageAll(t *testing.T, s *store.Store, st store.Stage) {
	t.Helper()
	for from := st.FirstJob; from <= st.LastJob; from += 1000 {
		var ids []uint32
		for id := from; id < from+1000 && id <= st.LastJob; id++ {
			ids = append(ids, id)
		}
		for _, r := range stageJobs(t, s, st.FlowID, ids...) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
}

// popExpired waits (a minute at most) until an entry of coord:expire falls due and
// pops it.
func popExpired(t *testing.T, s *store.Store) []store.Expired {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		items, err := s.PopExpired(ctx, time.Now(), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) > 0 {
			return items
		}
		next, _ := s.NextExpiry(ctx)
		time.Sleep(time.Until(next) + time.Millisecond) // until the next entry's due time
	}
	t.Fatal("no entry of coord:expire fell due within a minute")
	return nil
}

// A flow.abort racing the creation of the stage's jobs leaves none of them: a creation
// whose stage ended after its touch deletes the jobs it made (the abort's sweep may
// have passed their ids already: they stayed, outside any flow for good) and is
// refused.
func TestStageAbortRacesItsJobs(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 3)
	ctx := context.Background()
	rc := srv.Client(t, 3)
	for trial := range 10 {
		st, err := db.BeginFlow(ctx, 12, 2*store.StageSweepChunk, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		jobs := make([]*model.Job, 0, 2*store.StageSweepChunk)
		for id := st.FirstJob; id <= st.LastJob; id++ {
			jobs = append(jobs, &model.Job{ID: id, CallerID: 12, ContextID: 3, Script: "true", ScriptType: "sh"})
		}
		done := make(chan struct{}, 2)
		var cerr error
		go func() { _, cerr = s.CreateStagedJobs(ctx, 3, st.FlowID, 12, jobs, "12"); done <- struct{}{} }()
		go func() { _, _ = db.SweepFlowStageAll(ctx, st.FlowID, true); done <- struct{}{} }()
		<-done
		<-done
		var ks []string
		for id := st.FirstJob; id <= st.LastJob; id++ {
			ks = append(ks, keys.Job(12, id))
		}
		if left := rc.Exists(ctx, ks...).Val(); left > 0 {
			t.Fatalf("trial %d: %d jobs of aborted flow %d left (the creation: %v)", trial, left, st.FlowID, cerr)
		}
	}
}
