package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/store"
)

// schedBatch bounds the schedules one pass of the due loop handles; tickBatch the
// ticks of one schedule (a long outage's missed ticks are gone through over passes).
const (
	schedBatch = 256
	tickBatch  = 1000
)

type schedMetrics struct {
	ticks *prometheus.CounterVec // by outcome
}

func newSchedMetrics(reg prometheus.Registerer) schedMetrics {
	return schedMetrics{ticks: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{Name: "hero_schedule_ticks_total",
		Help: "Schedule ticks by outcome: fired (a run made), skipped (overlap policy), buffered (buffer_one), missed (outside the catch-up window)."}, []string{"outcome"})}
}

// runSchedules handles the schedules that are due (coord:sched_due).
func (e *engine) runSchedules(ctx context.Context) {
	for ctx.Err() == nil {
		due, err := e.store.DueSchedules(ctx, time.Now(), schedBatch)
		if err != nil {
			e.log.Error().Err(err).Msg("read due schedules (the next wake-up tries again)")
			return
		}
		for _, d := range due {
			e.handleSchedule(ctx, d)
		}
		if len(due) < schedBatch {
			return
		}
	}
}

// pauseUnticking pauses a schedule that has no next tick (a spec stored before the
// check that refuses it: a cron matching no time, whose zero next tick was due at once,
// again and again, a run made each time), with why as its note: out of coord:sched_due.
func (e *engine) pauseUnticking(ctx context.Context, db *store.DB, id, why string) {
	log := e.log.With().Uint32(obs.KeyContextID, db.ContextID).Str("schedule", id).Logger()
	if err := db.PauseSchedule(ctx, id, "paused by the scheduler: "+why); err != nil {
		log.Error().Err(err).Str("why", why).Msg("pause a schedule with no next tick (the next wake-up tries again)")
		return
	}
	log.Warn().Str("why", why).Msg("schedule paused: it has no next tick")
}

// handleSchedule makes the run of a tick fired and not made (its scheduler died
// before), then takes the schedule's due ticks one by one (lua/sched.lua, op tick: of
// several schedulers one takes each), then fires a buffered tick whose wait is over.
func (e *engine) handleSchedule(ctx context.Context, d store.DueSchedule) {
	log := e.log.With().Uint32(obs.KeyContextID, d.ContextID).Str("schedule", d.ID).Logger()
	db, err := e.store.Ctx(d.ContextID)
	if err != nil {
		return
	}
	s, err := db.LoadSchedule(ctx, d.ID)
	if errors.Is(err, store.ErrNotFound) {
		_ = e.store.Coord(d.ContextID).ZRem(ctx, keys.ScheduleDue, fmt.Sprintf("%d:%s", d.ContextID, d.ID)).Err()
		return
	}
	if err != nil {
		log.Error().Err(err).Msg("load schedule (the next wake-up tries again)")
		return
	}
	tk, err := s.Spec.Parse()
	if err != nil {
		e.pauseUnticking(ctx, db, s.ID, err.Error())
		return
	}
	if s.PendingTickMs != 0 {
		e.makeRun(ctx, db, s, time.UnixMilli(s.PendingTickMs))
	}
	window, _ := time.ParseDuration(s.CatchupWindow)
	now := time.Now()
	tick, fire := time.UnixMilli(s.NextTickMs), time.UnixMilli(s.NextFireMs)
	buffered := s.BufferedTick != 0
	for i := 0; i < tickBatch && s.NextTickMs != 0 && !fire.After(now) && !s.Paused; i++ {
		next := tk.Next(tick)
		if next.IsZero() {
			e.pauseUnticking(ctx, db, s.ID, "its spec has no tick after "+tick.UTC().Format(time.RFC3339))
			return
		}
		nfire := tk.Fire(s.ID, next)
		missed := window > 0 && now.Sub(tick) > window
		res, err := db.Tick(ctx, s.ID, tick, next, nfire, missed)
		if err != nil {
			log.Error().Err(err).Msg("schedule tick (the next wake-up tries again)")
			return
		}
		switch res.Outcome {
		case store.TickStale, store.TickGone, store.TickPaused:
			return
		case store.TickFired:
			e.stopRun(ctx, db, res, s.ID)
			if !res.Fired.Equal(tick) {
				buffered = true // this tick took the buffered one's place
			}
			e.makeRun(ctx, db, s, res.Fired)
		case store.TickBuffered:
			buffered = true
		}
		e.sm.ticks.WithLabelValues(string(res.Outcome)).Inc()
		log.Debug().Time("tick", tick).Str("outcome", string(res.Outcome)).Msg("schedule tick")
		tick, fire = next, nfire
	}
	if buffered {
		t, err := db.FireBuffered(ctx, s.ID)
		if err != nil {
			log.Error().Err(err).Msg("fire buffered tick (the next wake-up tries again)")
			return
		}
		if !t.IsZero() {
			e.sm.ticks.WithLabelValues(string(store.TickFired)).Inc()
			e.makeRun(ctx, db, s, t)
		}
	}
}

// makeRun makes the run of a fired tick: a job.submit of the schedule's job as its
// caller, with the (schedule, tick) as its unique key, and records it (op ran). A run
// that cannot be made for good (no runner serves it now) is recorded as the
// schedule's last_error; a passing fault leaves the tick pending (tried again soon).
func (e *engine) makeRun(ctx context.Context, db *store.DB, s *model.Schedule, tick time.Time) {
	log := e.log.With().Uint32(obs.KeyContextID, db.ContextID).Str("schedule", s.ID).Time("tick", tick).Logger()
	if s.Flow != nil {
		e.makeFlowRun(ctx, db, s, tick, log)
		return
	}
	var j model.Job
	if err := json.Unmarshal(s.Job, &j); err != nil {
		_, _ = db.TickRan(ctx, s.ID, tick, "", "the schedule's job does not decode: "+err.Error())
		return
	}
	j.ID, j.CallerID, j.ContextID, j.ScheduleID, j.ScheduleTickMs = 0, s.CallerID, db.ContextID, s.ID, tick.UnixMilli()
	res, err := e.store.SubmitJobs(ctx, db.ContextID, []store.Submission{{Job: &j, UniqueKey: store.RunUniqueKey(db.ContextID, s.ID, tick),
		UniqueTTL: store.RunUniqueTTL, Actor: "schedule:" + s.ID}}, "")
	if err != nil {
		if fault.Transient(err) || ctx.Err() != nil {
			log.Warn().Err(err).Msg("make a schedule's run (tried again soon)")
			return
		}
		log.Warn().Err(err).Msg("a schedule's run cannot be made")
		if _, err := db.TickRan(ctx, s.ID, tick, "", err.Error()); err != nil {
			log.Error().Err(err).Msg("record a schedule's run")
		}
		return
	}
	run := fmt.Sprintf("%d:%d", res[0].Job.CallerID, res[0].Job.ID)
	if _, err := db.TickRan(ctx, s.ID, tick, run, ""); err != nil {
		log.Error().Err(err).Msg("record a schedule's run (made again, the same job, when it is due)")
	}
	log.Info().Str("run", run).Bool("existing", res[0].Existing).Msg("schedule fired")
}

// stopRun stops a schedule's previous run (cancel_previous): its job, or its flow.
func (e *engine) stopRun(ctx context.Context, db *store.DB, res store.TickResult, id string) {
	if res.PrevFlow != 0 {
		if _, _, err := e.cancelFlow(ctx, db.ContextID, res.PrevFlow, "schedule:"+id); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, errAlreadyEnded) {
			e.log.Warn().Err(err).Uint32(obs.KeyContextID, db.ContextID).Str("schedule", id).Uint32(obs.KeyFlowID, res.PrevFlow).Msg("cancel a schedule's previous flow")
		}
		return
	}
	run := res.PrevJob
	if run == "" {
		return
	}
	c, n, _ := strings.Cut(run, ":")
	caller, _ := strconv.ParseUint(c, 10, 32)
	job, _ := strconv.ParseUint(n, 10, 32)
	actor := "schedule:" + id
	if ok, _, err := db.CancelScheduled(ctx, uint32(caller), uint32(job), actor); err == nil && ok {
		return
	}
	if _, _, err := db.RequestStop(ctx, uint32(caller), uint32(job), actor); err != nil && !errors.Is(err, store.ErrNotFound) {
		e.log.Warn().Err(err).Uint32(obs.KeyContextID, db.ContextID).Str("schedule", id).Str("run", run).Msg("stop a schedule's previous run")
	}
}

// makeFlowRun makes the run of a fired tick of a flow's schedule: its flow, created as
// a unit under the tick's uniqueness key (store.MakeFlowRun) and started, then
// recorded (op ran). A creation under way elsewhere, or a passing fault, leaves the
// tick pending (tried again soon); a flow that cannot be made or started for good is
// recorded as the schedule's last_error.
func (e *engine) makeFlowRun(ctx context.Context, db *store.DB, s *model.Schedule, tick time.Time, log zerolog.Logger) {
	actor := "schedule:" + s.ID
	run, err := e.store.MakeFlowRun(ctx, s, tick, actor)
	if err == nil && run.Flow != nil && !run.UnderWay && run.Flow.Status == model.FlowDispatched {
		_, err = e.startFlow(ctx, db.ContextID, run.Flow.ID, actor, time.Time{})
	}
	switch {
	case err != nil && (fault.Transient(err) || ctx.Err() != nil):
		log.Warn().Err(err).Msg("make a schedule's flow (tried again soon)")
		return
	case err != nil:
		log.Warn().Err(err).Msg("a schedule's flow cannot be made")
		if _, err := db.TickRan(ctx, s.ID, tick, "", err.Error()); err != nil {
			log.Error().Err(err).Msg("record a schedule's run")
		}
		return
	case run.UnderWay:
		log.Info().Uint32(obs.KeyFlowID, run.Flow.ID).Msg("a schedule's flow is being made elsewhere (recorded when it is done)")
		return
	case run.Job != "":
		_, err = db.TickRan(ctx, s.ID, tick, run.Job, "")
	default:
		_, err = db.TickRanFlow(ctx, s.ID, tick, run.Flow.ID)
	}
	if err != nil {
		log.Error().Err(err).Msg("record a schedule's run (found again, the same flow, when it is due)")
		return
	}
	if run.Flow != nil {
		log.Info().Uint32(obs.KeyFlowID, run.Flow.ID).Bool("existing", run.Existing).Msg("schedule fired a flow")
	}
}
