package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A delayed submission stores the job scheduled with its run time, no message and
// nothing queued, and enters coord:delayed; its release dispatches it once (a second
// release, as a second scheduler's, changes nothing) and removes the entry; a delayed
// job stopped before its time is never dispatched.
func TestDelayedJobReleasedOnce(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 1)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	if _, _, err := s.CreateRunner(ctx, 1, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	runAt := time.Now().Add(time.Hour)
	out, err := s.SubmitJobs(ctx, 1, []store.Submission{
		{Job: &model.Job{CallerID: 1, Script: "echo a", ScriptType: "sh"}, RunAt: runAt},
		{Job: &model.Job{CallerID: 1, Script: "echo b", ScriptType: "sh"}, RunAt: runAt},
	}, "actor:1")
	if err != nil {
		t.Fatal(err)
	}
	a, b := out[0].Job, out[1].Job
	for _, j := range []*model.Job{a, b} {
		got, err := db.LoadJob(ctx, 1, j.ID)
		if err != nil || got.Status != model.JobScheduled || got.RunAtMs != runAt.UnixMilli() || got.Attempt != 0 {
			t.Fatalf("job %d after a delayed submit: %+v, %v", j.ID, got, err)
		}
	}
	if n := rdb.LLen(ctx, "queue:sh").Val(); n != 0 {
		t.Fatalf("a delayed job was queued at once (queue:sh holds %d)", n)
	}
	if n := rdb.ZCard(ctx, keys.JobIndex+":"+string(model.JobScheduled)).Val(); n != 2 {
		t.Errorf("scheduled index holds %d jobs, want 2", n)
	}
	checkDelayedEntries(t, s, runAt)
	checkReleases(t, db, a, b)
}

// checkDelayedEntries: nothing is due before run_at; both are at run_at.
func checkDelayedEntries(t *testing.T, s *store.Store, runAt time.Time) {
	t.Helper()
	ctx := context.Background()
	if due, err := s.DueDelayed(ctx, time.Now(), 10); err != nil || len(due) != 0 {
		t.Fatalf("due before their time: %v, %v", due, err)
	}
	due, err := s.DueDelayed(ctx, runAt, 10)
	if err != nil || len(due) != 2 || due[0].Kind != "job" || due[0].ContextID != 1 {
		t.Fatalf("due at their time: %+v, %v", due, err)
	}
	if next, err := s.NextDelayed(ctx); err != nil || next.UnixMilli() != runAt.UnixMilli() {
		t.Fatalf("next delayed: %v, %v", next, err)
	}
}

// checkReleases: an early release leaves a scheduled; b stopped is never dispatched;
// a due release dispatches a once.
func checkReleases(t *testing.T, db *store.DB, a, b *model.Job) {
	t.Helper()
	ctx := context.Background()
	rdb, coord := srv.Client(t, 1), srv.Client(t, 0)
	// Not yet due: a release (an early one) leaves it scheduled, its entry kept.
	res, err := db.ReleaseDelayed(ctx, 1, []*model.Job{a}, store.ActorScheduler)
	if err != nil || res[0].MsgKey != "" || res[0].Why != "not due" {
		t.Fatalf("early release: %+v, %v", res, err)
	}
	// b is stopped before its time.
	if ok, _, err := db.CancelScheduled(ctx, 1, b.ID, "actor:1"); err != nil || !ok {
		t.Fatalf("cancel scheduled: %v %v", ok, err)
	}
	if n := coord.ZCard(ctx, keys.Delayed).Val(); n != 1 {
		t.Fatalf("coord:delayed holds %d entries after the cancel, want 1", n)
	}
	// Due now (run_at moved back): released once.
	rdb.HSet(ctx, keys.Job(1, a.ID), "run_at_ms", time.Now().Add(-time.Second).UnixMilli())
	coord.ZAdd(ctx, keys.Delayed, redis.Z{Score: float64(time.Now().UnixMilli()), Member: "1:job:1:" + u32(b.ID)})
	for i := range 2 {
		res, err := db.ReleaseDelayed(ctx, 1, []*model.Job{a, b}, store.ActorScheduler)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && (res[0].MsgKey == "" || res[0].Attempt != 1 || res[1].MsgKey != "" || res[1].Why != string(model.JobError)) {
			t.Fatalf("first release: %+v", res)
		}
		if i == 1 && (res[0].MsgKey != "" || res[0].Why != string(model.JobDispatched)) {
			t.Fatalf("second release dispatched again: %+v", res)
		}
	}
	if n := rdb.LLen(ctx, "queue:sh").Val(); n != 1 {
		t.Fatalf("queue:sh holds %d jobs after the releases, want 1", n)
	}
	if n := coord.ZCard(ctx, keys.Delayed).Val(); n != 0 {
		t.Fatalf("coord:delayed holds %d entries after the releases", n)
	}
	if got, _ := db.LoadJob(ctx, 1, b.ID); got.Status != model.JobError || got.Error != "cancelled" {
		t.Fatalf("the stopped job: %+v", got)
	}
}
