package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Concurrency keys: 3 keys × 30 jobs (submitted key by key) with a limit of 2 per key,
// claimed by a runner with 8 slots that ends its oldest run after each claim: at no
// time do more than 2 jobs of a key run, every job runs once, and the keys take turns
// from the first claim on (a key's 30 jobs do not all run first). A held job says why
// in its held field and a job.held event; its release removes the field and records
// job.released. Without lib_ck the first claim starts 8 jobs of key a.
func TestConcurrencyKeyLimit(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	var subs []store.Submission
	for _, k := range []string{"a", "b", "c"} {
		for range 30 {
			subs = append(subs, store.Submission{Job: &model.Job{CallerID: 1, Script: "true", ScriptType: "sh", ConcurrencyKey: k, ConcurrencyLimit: 2}})
		}
	}
	if _, err := s.SubmitJobs(ctx, 1, subs, "actor:1"); err != nil {
		t.Fatal(err)
	}
	var running []ckRun
	perKey := map[string]int{}
	ran := map[uint32]bool{}
	var order []string
	// a held job says why
	if j, err := db.LoadJob(ctx, 1, 30); err != nil || j.Held == "" || j.Status != model.JobDispatched {
		t.Fatalf("job 30 (key a, beyond its limit): %+v, %v", j, err)
	}
	for step := 0; len(ran) < len(subs) || len(running) > 0; step++ {
		if step > 1000 {
			t.Fatalf("stuck: %d of %d jobs ran, running %d", len(ran), len(subs), len(running))
		}
		for _, r := range claimFree(t, db, 8-len(running)) {
			k := r.j.ConcurrencyKey
			perKey[k]++
			if perKey[k] > 2 || ran[r.j.ID] {
				t.Fatalf("key %s runs %d jobs at once, or job %d ran twice", k, perKey[k], r.j.ID)
			}
			ran[r.j.ID] = true
			order = append(order, k)
			running = append(running, r)
		}
		if len(running) == 0 {
			continue
		}
		r := running[0]
		running = running[1:]
		if ok, err := db.FinishJob(ctx, r.c, r.j, store.JobOutcome{Status: model.JobFinished}); !ok || err != nil {
			t.Fatalf("finish %d: %v %v", r.j.ID, ok, err)
		}
		perKey[r.j.ConcurrencyKey]--
	}
	// the keys take turns: each 6 starts in a row hold every key
	for i := 0; i+6 <= 60; i++ {
		seen := map[string]bool{}
		for _, k := range order[i : i+6] {
			seen[k] = true
		}
		if len(seen) != 3 {
			t.Fatalf("starts %d…%d were of keys %v: %v", i, i+5, seen, order)
		}
	}
	checkKeysDone(t, []string{"a", "b", "c"}, 84)
	j, err := db.LoadJob(ctx, 1, 90)
	if err != nil || j.Held != "" {
		t.Errorf("a released job keeps its held field: %q, %v", j.Held, err)
	}
}

// A run whose lease is swept (its process killed, kill -9) keeps its key's place: its
// job is queued first and runs again, and the key's held job runs after its end.
func TestConcurrencyKeyLeaseExpiry(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	var subs []store.Submission
	for range 2 {
		subs = append(subs, store.Submission{Job: &model.Job{CallerID: 1, Script: "true", ScriptType: "sh", ConcurrencyKey: "k"}})
	}
	if _, err := s.SubmitJobs(ctx, 1, subs, "actor:1"); err != nil {
		t.Fatal(err)
	}
	got, err := db.ClaimStarts(ctx, "queue:sh", "dead", 10*time.Millisecond, make([]string, 2), store.Wake{})
	if err != nil || len(got) != 1 || got[0].Outcome != store.StartRun {
		t.Fatalf("first claim: %+v %v (want one job: the other is held)", got, err)
	}
	first := got[0].Job.ID
	// the lease expires; the sweep takes it back (wait for the clock to pass it)
	var moved []store.Requeued
	for deadline := time.Now().Add(time.Minute); len(moved) == 0; {
		if moved, err = db.RequeueExpired(ctx, time.Now(), 100); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease was never swept")
		}
	}
	got, err = db.ClaimStarts(ctx, "queue:sh", "w2", time.Minute, make([]string, 2), store.Wake{})
	if err != nil || len(got) != 1 || got[0].Outcome != store.StartRun || got[0].Job.ID != first {
		t.Fatalf("after the sweep: %+v %v (want job %d started again, alone)", got, err, first)
	}
	if ok, err := db.FinishJob(ctx, got[0].Claim, got[0].Job, store.JobOutcome{Status: model.JobFinished}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	got, err = db.ClaimStarts(ctx, "queue:sh", "w2", time.Minute, make([]string, 2), store.Wake{})
	if err != nil || len(got) != 1 || got[0].Outcome != store.StartRun || got[0].Job.ID == first || got[0].Job.Held != "" {
		t.Fatalf("the held job after the end: %+v %v", got, err)
	}
}

// checkKeysDone checks that the keys' running sets and held lists are gone and that
// the context's events hold held job.held and as many job.released events.
func checkKeysDone(t *testing.T, ks []string, held int) {
	t.Helper()
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	for _, k := range ks {
		if n := rdb.Exists(ctx, keys.ConcurrencyRunning(k), keys.ConcurrencyHeld(k)).Val(); n != 0 {
			t.Errorf("key %s: its running set %v or held list %v is left after every job ran", k, rdb.SMembers(ctx, keys.ConcurrencyRunning(k)).Val(), rdb.LRange(ctx, keys.ConcurrencyHeld(k), 0, -1).Val())
		}
	}
	evs, err := rdb.XRange(ctx, keys.Events, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	nh, released := 0, 0
	for _, e := range evs {
		switch e.Values["type"] {
		case string(model.EventJobHeld):
			nh++
		case string(model.EventJobReleased):
			released++
		}
	}
	if nh != held || released != held {
		t.Errorf("job.held events %d, job.released %d: want %d each", nh, released, held)
	}
}

// ckRun is a run the concurrency tests hold.
type ckRun struct {
	c *store.Claim
	j *model.Job
}

// claimFree claims up to free jobs of queue:sh and returns the runs (each must start).
func claimFree(t *testing.T, db *store.DB, free int) []ckRun {
	t.Helper()
	if free <= 0 {
		return nil
	}
	got, err := db.ClaimStarts(context.Background(), "queue:sh", "w1", time.Minute, make([]string, free), store.Wake{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]ckRun, 0, len(got))
	for _, x := range got {
		if x.Outcome != store.StartRun {
			t.Fatalf("claim %s: outcome %v, %v", x.Claim.Item, x.Outcome, x.Err)
		}
		out = append(out, ckRun{x.Claim, x.Job})
	}
	return out
}

// dispatchFlow creates a flow of one job per spec (no dependencies) and dispatches
// every job, as the scheduler does: the dispatch routes them (lib_route's
// route_target reads their fields, coord:features says which).
func dispatchFlow(t *testing.T, s *store.Store, db *store.DB, specs []model.Job) *model.Flow {
	t.Helper()
	ctx := context.Background()
	var ids []uint32
	for _, sp := range specs {
		sp.CallerID, sp.ContextID, sp.Script, sp.ScriptType = 1, 1, "true", "sh"
		j, _, err := s.CreateJob(ctx, &sp, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 1, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := db.LoadJobs(ctx, 1, f.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := store.PlanDAG(f, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := db.StartFlow(ctx, f, jobs, deps, "1"); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if _, _, ok, why, err := db.Dispatch(ctx, f.ID, j, "scheduler", 0); err != nil || !ok {
			t.Fatalf("dispatch %d: %s %v", j.ID, why, err)
		}
	}
	return f
}

// A flow's jobs (created, then dispatched: lib_route reads their fields because the
// context's coord:features names the features) keep their priorities and their
// concurrency key's limit; cancelling the flow gives the places of its queued jobs of
// a key back, and the key's held job of another flow is queued. Without coord:features
// the dispatch would read no priority and hold nothing.
func TestOrderFeaturesOnTheDispatchPath(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	pf := dispatchFlow(t, s, db, []model.Job{{Priority: 5}, {}, {Priority: 1}})
	if got := claimAll(t, db, 3); len(got) != 3 || got[0] != pf.Jobs[2] || got[1] != pf.Jobs[1] || got[2] != pf.Jobs[0] {
		t.Fatalf("claim order %v, want %v", got, []uint32{pf.Jobs[2], pf.Jobs[1], pf.Jobs[0]})
	}
	f := dispatchFlow(t, s, db, []model.Job{{ConcurrencyKey: "k"}, {ConcurrencyKey: "k"}})
	other := dispatchFlow(t, s, db, []model.Job{{ConcurrencyKey: "k"}})
	rdb := srv.Client(t, 1)
	if got := rdb.SMembers(ctx, keys.OrderFeatures).Val(); len(got) != 2 {
		t.Fatalf("coord:features: %v", got)
	}
	for _, id := range []uint32{f.Jobs[1], other.Jobs[0]} {
		if j, err := db.LoadJob(ctx, 1, id); err != nil || j.Held == "" {
			t.Fatalf("job %d of key k (limit 1) is not held: %+v %v", id, j, err)
		}
	}
	// cancel the first flow: its queued job of key k gives its place back, its own
	// held job has ended, and the other flow's held job is queued
	if _, _, err := db.CancelFlow(ctx, f.ID, "t", time.Hour); err != nil {
		t.Fatal(err)
	}
	got, err := db.ClaimStarts(ctx, "queue:sh", "w1", time.Minute, make([]string, 8), store.Wake{})
	if err != nil {
		t.Fatal(err)
	}
	var run []uint32
	for _, x := range got {
		if x.Outcome == store.StartRun {
			run = append(run, x.Job.ID)
		}
	}
	if len(run) != 1 || run[0] != other.Jobs[0] {
		t.Fatalf("after the cancel the claim ran %v, want the other flow's job %d of key k", run, other.Jobs[0])
	}
}
