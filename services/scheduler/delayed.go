package main

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/store"
)

// delayedBatch bounds the entries of coord:delayed one pass of the due loop reads.
const delayedBatch = 256

// delayedMetrics count the delayed work released (docs/scheduling.md).
type delayedMetrics struct {
	released *prometheus.CounterVec // by kind: job, flow, limit, keyrate
	late     prometheus.Histogram
}

func newDelayedMetrics(reg prometheus.Registerer) delayedMetrics {
	f := promauto.With(reg)
	return delayedMetrics{
		released: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_delayed_released_total",
			Help: "Delayed jobs dispatched, scheduled flows started, rate-limited queues woken and concurrency keys' rate-held jobs released when their time came, by kind (job, flow, limit, keyrate)."}, []string{"kind"}),
		late: f.NewHistogram(prometheus.HistogramOpts{Name: "hero_delayed_lateness_seconds",
			Help:    "How long after its run_at a delayed job was dispatched or a scheduled flow started.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30}}),
	}
}

// runDelayed releases the delayed work that is due: each job by its dispatch (a
// release: only while it is still scheduled), each flow by its start. Another
// scheduler releasing the same entries changes nothing (store.DueDelayed).
func (e *engine) runDelayed(ctx context.Context) {
	for ctx.Err() == nil {
		now := time.Now()
		items, err := e.store.DueDelayed(ctx, now, delayedBatch)
		if err != nil {
			e.log.Error().Err(err).Msg("read delayed work (the next wake-up tries again)")
			return
		}
		type group struct{ ctx, caller uint32 }
		jobs := map[group][]store.DelayedItem{}
		var order []group
		for _, it := range items {
			switch it.Kind {
			case "flow":
				e.releaseFlow(ctx, it)
				continue
			case "limit", "keyrate":
				e.wakeLimited(ctx, it)
				continue
			}
			g := group{it.ContextID, it.CallerID}
			if _, seen := jobs[g]; !seen {
				order = append(order, g)
			}
			jobs[g] = append(jobs[g], it)
		}
		for _, g := range order {
			e.releaseJobs(ctx, g.ctx, g.caller, jobs[g])
		}
		if len(items) < delayedBatch {
			return
		}
	}
}

// wakeLimited releases a job queue that a rate limit parked until its next token, or
// the jobs a concurrency key's rate held back (store.WakeLimited): runners claim again.
func (e *engine) wakeLimited(ctx context.Context, it store.DelayedItem) {
	db, err := e.store.Ctx(it.ContextID)
	if err != nil {
		_ = e.store.DropDelayed(ctx, it)
		return
	}
	ok, err := db.WakeLimited(ctx, it)
	if err != nil {
		e.log.Error().Err(err).Uint32(obs.KeyContextID, it.ContextID).Str("queue", it.Queue).Str("key", it.Key).Msg("wake a rate-limited queue or key (the next wake-up tries again)")
		return
	}
	if ok {
		e.dm.released.WithLabelValues(it.Kind).Inc()
	}
}

// releaseJobs dispatches due delayed jobs of one caller.
func (e *engine) releaseJobs(ctx context.Context, ctxID, callerID uint32, items []store.DelayedItem) {
	db, err := e.store.Ctx(ctxID)
	if err != nil {
		for _, it := range items {
			_ = e.store.DropDelayed(ctx, it)
		}
		return
	}
	var jobs []*model.Job
	for _, it := range items {
		j, err := db.LoadJob(ctx, callerID, it.JobID)
		if errors.Is(err, store.ErrNotFound) {
			_ = e.store.DropDelayed(ctx, it) // deleted before its time
			continue
		}
		if err != nil {
			e.log.Error().Err(err).Uint32(obs.KeyContextID, ctxID).Uint32(obs.KeyJobID, it.JobID).Msg("load delayed job (the next wake-up tries again)")
			continue
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return
	}
	res, err := db.ReleaseDelayed(ctx, callerID, jobs, store.ActorScheduler)
	if err != nil {
		e.log.Error().Err(err).Uint32(obs.KeyContextID, ctxID).Int("jobs", len(jobs)).Msg("release delayed jobs (the next wake-up tries again)")
		return
	}
	now := time.Now().UnixMilli()
	for i, r := range res {
		if r.MsgKey == "" {
			continue // released by another scheduler, stopped, or not yet due
		}
		e.m.dispatched.Inc()
		e.dm.released.WithLabelValues("job").Inc()
		e.dm.late.Observe(float64(max(0, now-jobs[i].RunAtMs)) / 1000)
		e.log.Debug().Uint32(obs.KeyContextID, ctxID).Uint32(obs.KeyJobID, r.JobID).Str(obs.KeyMessage, r.MsgKey).Msg("delayed job dispatched")
	}
}

// releaseFlow starts a scheduled flow whose time came; its entry goes once the flow
// started (here or by another scheduler) or cannot start (ended, deleted, a DAG that
// no longer holds: its start fails the same way every time).
func (e *engine) releaseFlow(ctx context.Context, it store.DelayedItem) {
	f, err := e.startFlow(ctx, it.ContextID, it.FlowID, store.ActorScheduler, time.Time{})
	switch {
	case err == nil && f != nil && f.StartedAtMs < it.DueMs:
		// A resumed flow (lua/pause_flow.lua): it started before; its ready nodes go.
		if err := e.dispatchReady(ctx, it.ContextID, it.FlowID); err != nil {
			e.log.Warn().Err(err).Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyFlowID, it.FlowID).Msg("dispatch a resumed flow (the next wake-up tries again)")
			return
		}
	case err == nil:
		if f != nil && f.StartedAtMs >= it.DueMs {
			e.dm.released.WithLabelValues("flow").Inc()
			e.dm.late.Observe(float64(f.StartedAtMs-it.DueMs) / 1000)
		}
	case fault.Transient(err) || ctx.Err() != nil:
		e.log.Warn().Err(err).Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyFlowID, it.FlowID).Msg("start scheduled flow (the next wake-up tries again)")
		return
	default:
		e.log.Warn().Err(err).Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyFlowID, it.FlowID).Msg("scheduled flow cannot start")
	}
	if err := e.store.DropDelayed(ctx, it); err != nil {
		e.log.Warn().Err(err).Msg("drop a started flow's delayed entry (dropped at its next release)")
	}
}

// delayedWake re-arms the due loop's timer when delayed work is added by another
// process (supervisor-daemon's job.submit and flow.start publish on coord:delayedwake):
// one subscription per server, renewed by go-redis after a reconnection (a renewal
// re-arms the timer too: a publication may have been missed meanwhile).
type delayedWake struct {
	store *store.Store
	poke  func()
}

func (w *delayedWake) run(ctx context.Context) error {
	subs := make([]*redis.PubSub, 0, len(w.store.Servers()))
	defer func() {
		for _, s := range subs {
			_ = s.Close()
		}
	}()
	merged := make(chan struct{}, 1)
	for _, srv := range w.store.Servers() {
		sub := srv.Coord().Subscribe(ctx, keys.DelayedWake)
		subs = append(subs, sub)
		go func() {
			for range sub.ChannelWithSubscriptions() {
				select {
				case merged <- struct{}{}:
				default:
				}
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-merged:
			w.poke()
		}
	}
}

// dispatchReady dispatches a started flow's ready nodes (a resumed flow's: the ones
// its pause held back), as the safety sweep would, reading the DAG as the sweep does
// (store.SweepDAG: HSCAN pages, never one command over the whole hash, which for a
// 100,000-job flow would hold Redis tens of milliseconds).
func (e *engine) dispatchReady(ctx context.Context, ctxID, flowID uint32) error {
	db, err := e.store.Ctx(ctxID)
	if err != nil {
		return nil
	}
	g, err := db.SweepDAG(ctx, flowID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	}
	atStart, ready := readyNodes(g, time.Now().UnixMilli())
	e.dispatchReadyNodes(ctx, db, flowID, g.CallerID, atStart, ready)
	return nil
}
