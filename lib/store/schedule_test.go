package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A schedule's tick is taken once (lua/sched.lua): a second attempt at the same tick,
// as a second scheduler's, is stale and changes nothing; a fired tick stays pending
// (its entry in coord:sched_due within 10 s) until its run is recorded; skip skips a
// tick while the last run has not ended; pause takes the schedule out of
// coord:sched_due and a paused schedule takes no tick.
func TestScheduleTickOnce(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 1)
	ctx := context.Background()
	rdb, coord := srv.Client(t, 1), srv.Client(t, 0)
	t0 := time.UnixMilli(time.Now().UnixMilli()).Add(-time.Minute).Truncate(time.Second)
	sc := &model.Schedule{ID: "s1", CallerID: 1, Spec: model.ScheduleSpec{Every: "1s"}, Job: []byte(`{"script":"true"}`), Overlap: model.OverlapSkip, CatchupWindow: "1m"}
	if err := db.PutSchedule(ctx, sc, true, t0, t0); err != nil {
		t.Fatal(err)
	}
	if err := db.PutSchedule(ctx, sc, true, t0, t0); err == nil {
		t.Fatal("a second create of the same id was accepted")
	}
	due, err := s.DueSchedules(ctx, time.Now(), 10)
	if err != nil || len(due) != 1 || due[0].ID != "s1" || due[0].ContextID != 1 {
		t.Fatalf("due schedules: %+v, %v", due, err)
	}
	t1 := t0.Add(time.Second)
	res, err := db.Tick(ctx, "s1", t0, t1, t1, false)
	if err != nil || res.Outcome != store.TickFired || !res.Fired.Equal(t0) {
		t.Fatalf("first tick: %+v, %v", res, err)
	}
	if res, _ := db.Tick(ctx, "s1", t0, t1, t1, false); res.Outcome != store.TickStale {
		t.Fatalf("the same tick again: %+v, want stale", res)
	}
	got, _ := db.LoadSchedule(ctx, "s1")
	if got.Fired != 1 || got.PendingTickMs != t0.UnixMilli() || got.NextTickMs != t1.UnixMilli() {
		t.Fatalf("after the tick: %+v", got)
	}
	// The run is recorded (a running job): the next tick is skipped under skip.
	rdb.HSet(ctx, keys.Job(1, 7), "status", string(model.JobStarted))
	if ok, err := db.TickRan(ctx, "s1", t0, "1:7", ""); err != nil || !ok {
		t.Fatalf("ran: %v %v", ok, err)
	}
	if ok, _ := db.TickRan(ctx, "s1", t0, "1:7", ""); ok {
		t.Fatal("a run recorded twice")
	}
	t2 := t1.Add(time.Second)
	if res, _ := db.Tick(ctx, "s1", t1, t2, t2, false); res.Outcome != store.TickSkipped {
		t.Fatalf("a tick while the run goes on, under skip: %+v", res)
	}
	if score := coord.ZScore(ctx, keys.ScheduleDue, "1:s1").Val(); int64(score) != t2.UnixMilli() {
		t.Fatalf("due at %v, want the next tick %d", score, t2.UnixMilli())
	}
	checkPauseResumeDelete(t, db, t2)
}

// checkPauseResumeDelete: a paused schedule leaves coord:sched_due and takes no tick;
// resumed, it is due at its next tick; deleted, nothing of it stays.
func checkPauseResumeDelete(t *testing.T, db *store.DB, t2 time.Time) {
	t.Helper()
	ctx := context.Background()
	rdb, coord := srv.Client(t, 1), srv.Client(t, 0)
	if err := db.PauseSchedule(ctx, "s1", "why not"); err != nil {
		t.Fatal(err)
	}
	if n := coord.ZCard(ctx, keys.ScheduleDue).Val(); n != 0 {
		t.Fatal("a paused schedule is still due")
	}
	if res, _ := db.Tick(ctx, "s1", t2, t2.Add(time.Second), t2.Add(time.Second), false); res.Outcome != store.TickPaused {
		t.Fatalf("a tick of a paused schedule: %+v", res)
	}
	next := time.Now().Add(time.Second).Truncate(time.Second)
	if err := db.ResumeSchedule(ctx, "s1", "", next, next); err != nil {
		t.Fatal(err)
	}
	if score := coord.ZScore(ctx, keys.ScheduleDue, "1:s1").Val(); int64(score) != next.UnixMilli() {
		t.Fatalf("resumed: due at %v, want %d", score, next.UnixMilli())
	}
	if err := db.DeleteSchedule(ctx, "s1"); err != nil || coord.ZCard(ctx, keys.ScheduleDue).Val() != 0 || rdb.Exists(ctx, keys.Schedule("s1")).Val() != 0 {
		t.Fatalf("delete: %v", err)
	}
}

// A schedule created paused is paused by its creation's own step: never due, its note
// kept (the pause was a second call after the create, and a create that ended between
// the two left the schedule firing).
func TestScheduleCreatedPaused(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 45)
	ctx := context.Background()
	coord := srv.Client(t, 0)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	sc := &model.Schedule{ID: "p1", CallerID: 1, Spec: model.ScheduleSpec{Every: "1s"}, Job: []byte(`{"script":"true"}`), Overlap: model.OverlapSkip,
		CatchupWindow: "1m", Paused: true, Note: "not yet"}
	if err := db.PutSchedule(ctx, sc, true, t0, t0); err != nil {
		t.Fatal(err)
	}
	if err := coord.ZScore(ctx, keys.ScheduleDue, "45:p1").Err(); err == nil {
		t.Fatal("a schedule created paused is due")
	}
	got, err := db.LoadSchedule(ctx, "p1")
	if err != nil || !got.Paused || got.Note != "not yet" {
		t.Fatalf("the schedule created paused: %+v, %v", got, err)
	}
}

// A deleted context takes its entries of DB 0's shared sets with it: a scheduled
// flow's start (coord:delayed) and a schedule's next fire (coord:sched_due), which
// stayed and fired into a context no longer there.
func TestDeleteContextTakesItsDelayedWork(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 46)
	ctx := context.Background()
	coord := srv.Client(t, 0)
	var ids []uint32
	for _, r := range s.CreateJobs(ctx, []*model.Job{{ID: 1, CallerID: 1, ContextID: 46, Script: "true", ScriptType: "sh"}}, "1") {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, r.Job.ID)
	}
	if _, _, err := s.CreateFlow(ctx, &model.Flow{ID: 3, CallerID: 1, ContextID: 46, Jobs: ids}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.ScheduleFlow(ctx, 3, time.Now().Add(time.Hour), "1"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(time.Hour)
	if err := db.PutSchedule(ctx, &model.Schedule{ID: "d1", CallerID: 1, Spec: model.ScheduleSpec{Every: "1h"}, Job: []byte(`{"script":"true"}`),
		Overlap: model.OverlapSkip, CatchupWindow: "1m"}, true, t0, t0); err != nil {
		t.Fatal(err)
	}
	if coord.ZScore(ctx, keys.Delayed, "46:flow:3").Err() != nil || coord.ZScore(ctx, keys.ScheduleDue, "46:d1").Err() != nil {
		t.Fatal("the scheduled flow or the schedule is not due")
	}
	if err := s.DeleteContext(ctx, 46, true); err != nil {
		t.Fatal(err)
	}
	if coord.ZScore(ctx, keys.Delayed, "46:flow:3").Err() == nil || coord.ZScore(ctx, keys.ScheduleDue, "46:d1").Err() == nil {
		t.Fatal("the deleted context's scheduled flow or schedule is still due")
	}
}
