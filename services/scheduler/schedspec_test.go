package main

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// A schedule stored with a spec that has no next tick (a cron matching no time, before
// schedule.create refused it: its zero next tick was due at once, again and again) is
// paused by the scheduler that finds it due, naming why, and leaves coord:sched_due.
func TestScheduleOfNoTickIsPaused(t *testing.T) {
	ctx := context.Background()
	st := trimStore(t, 1)
	db, err := st.Ctx(1)
	if err != nil {
		t.Fatal(err)
	}
	var zero time.Time
	sc := &model.Schedule{ID: "never", CallerID: 1, Spec: model.ScheduleSpec{Cron: "0 0 30 2 *"}, Job: []byte(`{"script":"true","script_type":"sh"}`),
		Overlap: model.OverlapSkip, CatchupWindow: "1m"}
	if err := db.PutSchedule(ctx, sc, true, zero, zero); err != nil {
		t.Fatal(err)
	}
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), retryBase: time.Second, retryCap: time.Second, sweepEvery: time.Minute})
	due, err := st.DueSchedules(ctx, time.Now(), 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due schedules: %+v, %v", due, err)
	}
	e.handleSchedule(ctx, due[0])
	got, err := db.LoadSchedule(ctx, "never")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Paused || got.Fired != 0 {
		t.Fatalf("the schedule of no tick after the scheduler found it due: paused %v, fired %d, note %q", got.Paused, got.Fired, got.Note)
	}
	if err := srv.Client(t, 0).ZScore(ctx, keys.ScheduleDue, "1:never").Err(); err == nil {
		t.Fatal("the paused schedule is still due")
	}
}
