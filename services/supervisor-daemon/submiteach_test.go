package main

import (
	"context"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// eachOf makes submissions of context 1 for submitEach.
func eachOf(items ...submitItem) []eachSubmit {
	out := make([]eachSubmit, len(items))
	for i, it := range items {
		out[i] = eachSubmit{ctx: context.Background(), ctxID: 1, item: it}
	}
	return out
}

// The submissions of one batch are each handled as if alone — a refused one gets its
// own error, two with one unique key are one job, the others each their own job —
// and the jobs go to the group commit together: one store call for all of them.
func TestSubmitEachStoresABatchTogether(t *testing.T) {
	srv, st := submitStore(t)
	s := benchService(t, st)
	rec := heldSubmit(st)
	s.groups.shutdown()
	s.groups = newSubmitGroups(rec.submit, st.ServerFor, maxGroupJobs, 1, nil)
	defer s.groups.shutdown()
	defer rec.open() // before shutdown, which waits for the held call
	ctx := context.Background()
	// A submission held in its store call: the batch's jobs wait for the next one.
	held := make(chan error, 1)
	go func() {
		_, err := s.groups.add(ctx, 1, nil, shSub("2", "echo held"))
		held <- err
	}()
	waitClosed(t, "the first store call", rec.entered)
	sh := func(script string) *jobIn { return &jobIn{Script: script, ScriptType: "sh"} }
	in := eachOf(
		submitItem{Job: sh("echo 0")},
		submitItem{Job: &jobIn{Script: "true", ScriptType: "no-such-type"}},
		submitItem{Job: sh("echo 2"), UniqueKey: "each", UniqueTTLSeconds: 60},
		submitItem{Job: sh("echo 3"), UniqueKey: "each", UniqueTTLSeconds: 60},
		submitItem{Job: sh("echo 4")},
		submitItem{Job: nil},
	)
	type answer struct {
		out  []*submitResult
		errs []error
	}
	done := make(chan answer, 1)
	go func() {
		out, errs := s.submitEach(ctx, Principal{Actor: 2}, in, "job.submit")
		done <- answer{out, errs}
	}()
	waitFor(t, "the batch's jobs queued behind the held call", func() bool { return s.groups.queued(st.ServerFor(1)) == 4 })
	rec.open()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	a := <-done
	rdb := srv.Client(t, 1)
	for _, i := range []int{0, 4} {
		if a.errs[i] != nil || a.out[i] == nil || a.out[i].Existing {
			t.Fatalf("submission %d: %+v %v", i, a.out[i], a.errs[i])
		}
		if got := rdb.HGet(ctx, keys.Job(2, a.out[i].Job.ID), "script").Val(); got != in[i].item.Job.Script {
			t.Errorf("submission %d's job holds %q; want %q", i, got, in[i].item.Job.Script)
		}
	}
	if apiCode(a.errs[1]) != codeInvalidParams || a.out[1] != nil {
		t.Errorf("submission 1 (a script type that does not exist): %+v %v; want invalid params", a.out[1], a.errs[1])
	}
	if apiCode(a.errs[5]) != codeInvalidParams || a.out[5] != nil {
		t.Errorf("submission 5 (no job): %+v %v; want invalid params", a.out[5], a.errs[5])
	}
	x, y := a.out[2], a.out[3]
	if a.errs[2] != nil || a.errs[3] != nil || x.Job.ID != y.Job.ID || x.Existing || !y.Existing {
		t.Errorf("submissions 2 and 3 (one unique key): %+v %v, %+v %v; want one job, created then existing", x, a.errs[2], y, a.errs[3])
	}
	if got := rec.sizes(); len(got) != 2 || got[1] != 4 {
		t.Errorf("store calls of %v jobs; want the held one, then the batch's 4 jobs in one", got)
	}
}

// A batch whose cached context changed meanwhile: nothing of the first try is stored,
// the context is read again, and each submission is stored then (as submit's retry).
func TestSubmitEachContextChanged(t *testing.T) {
	srv, st := submitStore(t)
	a, s := benchService(t, st), benchService(t, st) // two replicas: a changes the context s has cached
	ctx := context.Background()
	sh := &jobIn{Script: "true", ScriptType: "sh"}
	if _, err := s.jobSubmit(ctx, Principal{Actor: 2}, jobSubmitParams{ContextID: 1, Job: sh}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.contextUpdate(ctx, Principal{Operator: true}, contextUpdateParams{ID: 1, JobMax: &model.JobLimits{Pids: 100}}); err != nil {
		t.Fatal(err)
	}
	loads := 0
	load := s.contexts.load
	s.contexts.load = func(ctx context.Context, id uint32) (*model.Context, map[string]string, error) {
		loads++
		return load(ctx, id)
	}
	rdb := srv.Client(t, 1)
	before := rdb.ZCard(ctx, keys.JobIndex).Val()
	out, errs := s.submitEach(ctx, Principal{Actor: 2}, eachOf(submitItem{Job: sh}, submitItem{Job: sh}, submitItem{Job: sh}), "job.submit")
	for i := range out {
		if errs[i] != nil || out[i] == nil || out[i].Existing {
			t.Fatalf("submission %d: %+v %v", i, out[i], errs[i])
		}
	}
	if n := rdb.ZCard(ctx, keys.JobIndex).Val() - before; n != 3 {
		t.Errorf("%d jobs stored; want 3", n)
	}
	if loads != 1 {
		t.Errorf("the changed context was read %d times; want once, for the three", loads)
	}
}

// queued is the number of submissions of server srv's group commit waiting for a group.
func (g *submitGroups) queued(srv *store.Server) int {
	if c := g.commits.committer(srv); c != nil {
		return c.Queued()
	}
	return 0
}

// waitFor waits until cond holds (another goroutine's progress), checked every
// millisecond, or fails the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A stream's count of submissions being stored: room beyond its bound is taken only
// once enough were answered; alone, a request as large as the bound fits; a context
// that ends stops the wait.
func TestInflightBoundsTheSubmissionsStored(t *testing.T) {
	f := newInflight(4)
	ctx := context.Background()
	if !f.take(ctx, 4) {
		t.Fatal("4 submissions of a bound of 4, none stored: refused")
	}
	f.answered(4)
	if !f.take(ctx, 3) {
		t.Fatal("3 submissions once the 4 were answered: refused")
	}
	got := make(chan bool, 1)
	go func() { got <- f.take(ctx, 2) }() // 3 + 2 > 4: waits for an answer
	f.answered(1)
	if !<-got || f.n != 4 {
		t.Fatalf("2 more after 1 of 3 was answered: counted %d; want 4 (the answer taken before the room)", f.n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if f.take(cctx, 1) {
		t.Errorf("room taken beyond the bound by a stream whose context ended")
	}
}
