package store_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// flowSchedule is a flow's schedule of two jobs, load after extract.
func flowSchedule(id string, overlap model.OverlapPolicy) *model.Schedule {
	return &model.Schedule{ID: id, ContextID: 1, CallerID: 1, Spec: model.ScheduleSpec{Every: "1s"}, Overlap: overlap, CatchupWindow: "1m",
		Flow: &model.FlowTemplate{EnvVars: map[string]string{"DAY": "mon"}, Jobs: []model.TemplateJob{
			{Name: "load", Depends: []string{"extract"}, Job: model.Job{ScriptType: "sh", Script: "echo L"}},
			{Name: "extract", Job: model.Job{ScriptType: "sh", Script: "echo E"}},
		}}}
}

// A flow's schedule's run of a tick (store.MakeFlowRun): a flow of the template's
// jobs (dependencies by name made ids), created, not started, that records its
// schedule and tick, as do its jobs; the same tick again finds it (existing); a tick
// whose creation is under way elsewhere says so and makes nothing; once that creation
// is swept (its maker died), the tick's run is made anew; a template job the store
// refuses leaves nothing of its run.
func TestScheduleFlowRunOnce(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 1)
	rdb := srv.Client(t, 1)
	sc := flowSchedule("etl", model.OverlapSkip)
	t0 := time.UnixMilli(time.Now().UnixMilli()).Truncate(time.Second)
	checkFlowRunMade(t, s, db, sc, t0)
	last := checkCutCreation(t, s, db, sc, t0.Add(time.Second))
	checkRefusedRun(t, s, rdb, t0, last)
}

// checkFlowRunMade: the run of tick t0 is a created flow of the template's jobs that
// records its schedule and tick, as do its jobs; made again, it is found.
func checkFlowRunMade(t *testing.T, s *store.Store, db *store.DB, sc *model.Schedule, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	run, err := s.MakeFlowRun(ctx, sc, t0, "schedule:etl")
	if err != nil || run.Flow == nil || run.Existing || run.UnderWay || run.Flow.Status != model.FlowDispatched {
		t.Fatalf("first run: %+v, %v", run, err)
	}
	f, err := db.LoadFlow(ctx, run.Flow.ID)
	if err != nil || f.ScheduleID != "etl" || f.ScheduleTickMs != t0.UnixMilli() || len(f.Jobs) != 2 || f.EnvVars["DAY"] != "mon" {
		t.Fatalf("the run's flow: %+v, %v", f, err)
	}
	extract, load := f.Jobs[0], f.Jobs[1] // dependencies first
	jobs, err := db.LoadJobs(ctx, 1, f.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	if jobs[0].Script != "echo E" || jobs[1].Script != "echo L" || len(jobs[1].Dependends) != 1 || jobs[1].Dependends[0] != extract ||
		jobs[1].FlowID != f.ID || jobs[0].ScheduleID != "etl" || jobs[1].ScheduleTickMs != t0.UnixMilli() {
		t.Fatalf("the run's jobs (extract %d, load %d): %+v %+v", extract, load, jobs[0], jobs[1])
	}
	again, err := s.MakeFlowRun(ctx, sc, t0, "schedule:etl")
	if err != nil || !again.Existing || again.Flow == nil || again.Flow.ID != f.ID {
		t.Fatalf("the same tick again: %+v, %v (want flow %d, existing)", again, err, f.ID)
	}
}

// checkCutCreation: a tick whose run's creation was cut short is under way (nothing
// made), then, its stage swept, made anew; it returns the last job id made.
func checkCutCreation(t *testing.T, s *store.Store, db *store.DB, sc *model.Schedule, t1 time.Time) uint32 {
	t.Helper()
	ctx := context.Background()
	state, cut, err := s.BeginFlowRun(ctx, sc, t1)
	if err != nil || state != "begun" {
		t.Fatalf("begin: %s %d, %v", state, cut, err)
	}
	if r, err := s.MakeFlowRun(ctx, sc, t1, "schedule:etl"); err != nil || !r.UnderWay || r.Flow.ID != cut {
		t.Fatalf("a tick whose run is being made elsewhere: %+v, %v", r, err)
	}
	if _, err := db.SweepFlowStageAll(ctx, cut, true); err != nil {
		t.Fatal(err)
	}
	r, err := s.MakeFlowRun(ctx, sc, t1, "schedule:etl")
	if err != nil || r.Existing || r.UnderWay || r.Flow == nil || r.Flow.ID == cut || r.Flow.ScheduleTickMs != t1.UnixMilli() {
		t.Fatalf("the tick after its cut creation was swept: %+v, %v", r, err)
	}
	return r.Flow.Jobs[1]
}

// checkRefusedRun: a run with a job the store refuses leaves nothing: no flow, no
// stage, none of its jobs (the two ids after last).
func checkRefusedRun(t *testing.T, s *store.Store, rdb *redis.Client, t0 time.Time, last uint32) {
	t.Helper()
	ctx := context.Background()
	bad := flowSchedule("bad", model.OverlapSkip)
	bad.Flow.Jobs[0].Job.ScriptType = ""
	if r, err := s.MakeFlowRun(ctx, bad, t0, "schedule:bad"); err == nil {
		t.Fatalf("a run with a job of no type: %+v", r)
	}
	v := rdb.Get(ctx, keys.Unique(store.RunUniqueKey(1, "bad", t0))).Val()
	id, err := strconv.ParseUint(strings.TrimPrefix(v, keys.FlowPrefix), 10, 32)
	if err != nil || rdb.Exists(ctx, keys.Flow(uint32(id)), keys.FlowStage(uint32(id))).Val() != 0 {
		t.Fatalf("a refused run left its flow or its stage (%q): %v", v, err)
	}
	if n := rdb.Exists(ctx, keys.Job(1, last+1), keys.Job(1, last+2)).Val(); n != 0 {
		t.Fatalf("a refused run left %d of its jobs", n)
	}
	st, err := s.MakeFlowRun(ctx, bad, t0, "schedule:bad")
	if err == nil || st.Flow != nil {
		t.Fatalf("a refused run tried again: %+v", st)
	}
}

// A flow's schedule's overlap policy judges "still running" by its last run's flow:
// skip skips a tick while that flow has not ended (created, started) and fires once it
// ended; cancel_previous fires and names that flow to stop.
func TestScheduleFlowOverlap(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 1)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	sc := flowSchedule("etl", model.OverlapSkip)
	t0 := time.UnixMilli(time.Now().UnixMilli()).Add(-time.Minute).Truncate(time.Second)
	if err := db.PutSchedule(ctx, sc, true, t0, t0); err != nil {
		t.Fatal(err)
	}
	tick := func(at time.Time) store.TickResult {
		t.Helper()
		res, err := db.Tick(ctx, "etl", at, at.Add(time.Second), at.Add(time.Second), false)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := tick(t0); res.Outcome != store.TickFired || !res.Fired.Equal(t0) {
		t.Fatalf("first tick: %+v", res)
	}
	run, err := s.MakeFlowRun(ctx, sc, t0, "schedule:etl")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := db.TickRanFlow(ctx, "etl", t0, run.Flow.ID); err != nil || !ok {
		t.Fatalf("ran: %v %v", ok, err)
	}
	if got, _ := db.LoadSchedule(ctx, "etl"); got.LastFlow != run.Flow.ID || got.LastRun != "" || got.Flow == nil || len(got.Flow.Jobs) != 2 {
		t.Fatalf("the schedule after its run: %+v", got)
	}
	t1, t2, t3 := t0.Add(time.Second), t0.Add(2*time.Second), t0.Add(3*time.Second)
	if res := tick(t1); res.Outcome != store.TickSkipped {
		t.Fatalf("a tick while the last flow is created, not ended, under skip: %+v", res)
	}
	rdb.HSet(ctx, keys.Flow(run.Flow.ID), "status", string(model.FlowFinished))
	if res := tick(t2); res.Outcome != store.TickFired {
		t.Fatalf("a tick once the last flow finished: %+v", res)
	}
	if ok, _ := db.TickRanFlow(ctx, "etl", t2, run.Flow.ID); !ok {
		t.Fatal("ran t2")
	}
	rdb.HSet(ctx, keys.Flow(run.Flow.ID), "status", string(model.FlowStarted))
	sc.Overlap = model.OverlapCancelPrevious
	if err := db.PutSchedule(ctx, sc, false, t3, t3); err != nil {
		t.Fatal(err)
	}
	if res := tick(t3); res.Outcome != store.TickFired || res.PrevFlow != run.Flow.ID || res.PrevJob != "" {
		t.Fatalf("cancel_previous while the last flow runs: %+v (want flow %d to stop)", res, run.Flow.ID)
	}
}
