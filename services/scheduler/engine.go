package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/retry"
	"github.com/hero-coordinator/hero/lib/store"
)

var errAlreadyEnded = errors.New("flow already ended")

// engine runs flows. All state is in Redis; the engine's only memory is a wake-up
// channel for its due-time loop and where the events' safety sweep goes on (trimSweep).
type engine struct {
	store      *store.Store
	log        zerolog.Logger
	retryBase  time.Duration
	retryCap   time.Duration
	sweepEvery time.Duration
	retention  time.Duration
	wakeDue    chan struct{}
	trimNext   int64 // the rank in keys.Contexts where the events' next sweep page starts
	trimPage   int   // the most contexts per page of that sweep (trimPage)
	trimTicks  int   // its ticks per pass (trimTicks)
	trimCount  int64 // the contexts there were at its last page
	m          metrics
	dm         delayedMetrics
	sm         schedMetrics
	// life ends with the process: dispatches retried through a Redis fault outlive
	// the call (a JobsDone) that made their nodes ready.
	life context.Context
}

type engineParams struct {
	store      *store.Store
	log        zerolog.Logger
	reg        prometheus.Registerer
	retryBase  time.Duration
	retryCap   time.Duration
	sweepEvery time.Duration
	retention  time.Duration
	life       context.Context // the process's lifetime (nil: never ends)
}

type metrics struct {
	flowsStarted  prometheus.Counter
	flowsFinished *prometheus.CounterVec
	dispatched    prometheus.Counter
	retried       prometheus.Counter
	jobsEnded     *prometheus.CounterVec
	recovered     prometheus.Counter
	expired       *prometheus.CounterVec
	cancelled     prometheus.Counter
	writeRetries  prometheus.Counter
}

func newEngine(p engineParams) *engine {
	f := promauto.With(p.reg)
	e := &engine{
		store: p.store, log: p.log, retryBase: p.retryBase, retryCap: p.retryCap, sweepEvery: p.sweepEvery, retention: p.retention,
		wakeDue: make(chan struct{}, 1), trimPage: trimPage, trimTicks: trimTicks,
		m: metrics{
			flowsStarted:  f.NewCounter(prometheus.CounterOpts{Name: "hero_flows_started_total", Help: "Flows started."}),
			flowsFinished: f.NewCounterVec(prometheus.CounterOpts{Name: obs.MetricFlowsEnded, Help: obs.MetricFlowsEndedHelp}, []string{"status"}),
			dispatched:    f.NewCounter(prometheus.CounterOpts{Name: obs.MetricJobsDispatched, Help: obs.MetricJobsDispatchedHelp}),
			retried:       f.NewCounter(prometheus.CounterOpts{Name: "hero_jobs_retried_total", Help: "Failed job runs scheduled for another attempt."}),
			jobsEnded:     f.NewCounterVec(prometheus.CounterOpts{Name: obs.MetricJobEnds, Help: obs.MetricJobEndsHelp}, []string{"outcome"}),
			recovered:     f.NewCounter(prometheus.CounterOpts{Name: "hero_scheduler_recovered_total", Help: "Nodes the safety sweep had to dispatch or complete (lost wake-ups)."}),
			expired:       f.NewCounterVec(prometheus.CounterOpts{Name: "hero_retention_deleted_total", Help: "Ended flows and standalone jobs deleted when their retention ended, and flow creations that expired unfinished (flow.begin without flow.create), by kind (flow, job, stage)."}, []string{"kind"}),
			cancelled:     f.NewCounter(prometheus.CounterOpts{Name: "hero_flows_cancelled_total", Help: "Flows cancelled."}),
			writeRetries:  f.NewCounter(prometheus.CounterOpts{Name: "hero_scheduler_dispatch_retries_total", Help: "Dispatches of ready jobs retried after a passing Redis fault."}),
		},
		dm:   newDelayedMetrics(p.reg),
		sm:   newSchedMetrics(p.reg),
		life: p.life,
	}
	if e.life == nil {
		e.life = context.Background()
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "hero_flows_active", Help: "Flows started and not yet ended."}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := p.store.ActiveFlowCount(ctx)
		if err != nil {
			return 0
		}
		return float64(n)
	})
	return e
}

// startFlow validates the flow's DAG and starts it, or with runAt after now schedules
// its start then (the scheduler that finds it due starts it: runDelayed).
func (e *engine) startFlow(ctx context.Context, ctxID, flowID uint32, actor string, runAt time.Time) (*model.Flow, error) {
	db, err := e.store.Ctx(ctxID)
	if err != nil {
		return nil, &model.ValidationError{Object: "flow", Field: "context_id", Msg: err.Error()}
	}
	f, err := db.LoadFlow(ctx, flowID)
	if err != nil {
		return nil, err
	}
	switch {
	case f.Status == model.FlowStarted, f.StartedAt != 0 || f.StartedAtMs != 0:
		return f, nil // a retried start (its reply lost), whatever the flow did since
	case f.Status == model.FlowFinished, f.Status == model.FlowError:
		return nil, fmt.Errorf("%w: flow %d is %s", errAlreadyEnded, flowID, f.Status)
	}
	jobs, err := db.LoadStartJobs(ctx, f.CallerID, f.Jobs)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, &store.PlanError{Msg: fmt.Sprintf("flow %d: %v", flowID, err)}
		}
		return nil, err
	}
	dependents, err := store.PlanDAG(f, jobs)
	if err != nil {
		return nil, err
	}
	if runAt.After(time.Now()) {
		if err := db.ScheduleFlow(ctx, flowID, runAt, actor); err != nil {
			return nil, err
		}
		e.pokeDue()
		e.log.Info().Uint32(obs.KeyContextID, ctxID).Uint32(obs.KeyFlowID, flowID).Time("run_at", runAt).Str("actor", actor).Msg("flow scheduled")
		return db.LoadFlow(ctx, flowID)
	}
	// A large flow's start is many calls (store.StartFlow's chunks): a caller that
	// gives up midway (its deadline, a client gone) must not cut it short, which would
	// leave it to begin again. It has its own bound.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	startedAt := time.Now()
	// A small flow's ready nodes are dispatched by its start's own call; the others
	// (a large flow's, jobs pinned to a runner) are left to dispatchNodes.
	ready, dispatched, st, started, err := db.StartFlowDispatch(ctx, f, jobs, dependents, actor)
	if err != nil {
		return nil, err
	}
	if !started {
		now, err := db.LoadFlow(ctx, flowID)
		if err != nil {
			return nil, err
		}
		if model.FlowStatus(st) == model.FlowStarted || now.StartedAt != 0 || now.StartedAtMs != 0 {
			return now, nil // started by a concurrent call
		}
		if st := model.FlowStatus(st); st == model.FlowDispatched || st == model.FlowScheduled {
			return now, nil // a large flow's start in chunks that a concurrent call took over, which goes on
		}
		if st == store.FlowDeleting {
			return nil, &store.ConflictError{Msg: fmt.Sprintf("flow %d is being deleted (a flow.delete again finishes it)", flowID)}
		}
		return nil, fmt.Errorf("%w: flow %d is %s", errAlreadyEnded, flowID, st)
	}
	e.m.flowsStarted.Inc()
	e.m.dispatched.Add(float64(dispatched))
	e.log.Info().Uint32(obs.KeyContextID, ctxID).Uint32(obs.KeyFlowID, flowID).Int("jobs", len(jobs)).Int("dispatched", dispatched).Str("actor", actor).Msg("flow started")
	byID := make(map[uint32]*model.Job, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	e.dispatchNodes(ctx, db, flowID, f.CallerID, ready, byID, startedAt)
	return db.LoadFlow(ctx, flowID)
}

// dispatchBatch bounds how many nodes one dispatch script handles.
const dispatchBatch = 256

// dispatchNodes sends ready nodes to the router, a batch per script call. A failure
// leaves the nodes ready; the safety sweep dispatches them later. startedAt is the
// start of the flow whose ready nodes these are (zero: nodes made ready since).
func (e *engine) dispatchNodes(ctx context.Context, db *store.DB, flowID, callerID uint32, ids []uint32, cache map[uint32]*model.Job, startedAt time.Time) {
	for len(ids) > 0 {
		n := min(len(ids), dispatchBatch)
		e.dispatchBatch(ctx, db, flowID, callerID, ids[:n], cache, startedAt)
		ids = ids[n:]
	}
}

func (e *engine) dispatchBatch(ctx context.Context, db *store.DB, flowID, callerID uint32, ids []uint32, cache map[uint32]*model.Job, startedAt time.Time) {
	jobs := make([]*model.Job, 0, len(ids))
	var missing []uint32
	for _, id := range ids {
		if j := cache[id]; j != nil {
			jobs = append(jobs, j)
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		loaded, err := db.LoadDispatchJobs(ctx, callerID, missing)
		if err != nil {
			// One unreadable job must not hold back the others: load them one by one.
			for _, id := range missing {
				j, err := db.LoadJob(ctx, callerID, id)
				if err != nil {
					e.log.Error().Err(err).Uint32(obs.KeyContextID, db.ContextID).Uint32(obs.KeyFlowID, flowID).Uint32(obs.KeyJobID, id).Msg("load job to dispatch")
					continue
				}
				jobs = append(jobs, j)
			}
		} else {
			jobs = append(jobs, loaded...)
		}
	}
	if len(jobs) == 0 {
		return
	}
	var res []store.Dispatched
	var err error
	if startedAt.IsZero() {
		res, err = db.DispatchMany(ctx, flowID, callerID, jobs, store.ActorScheduler, 0)
	} else {
		res, err = db.DispatchStarted(ctx, flowID, callerID, jobs, store.ActorScheduler, startedAt)
	}
	if err != nil {
		e.log.Error().Err(err).Uint32(obs.KeyContextID, db.ContextID).Uint32(obs.KeyFlowID, flowID).Int("jobs", len(jobs)).Msg("dispatch jobs")
		if fault.Transient(err) {
			// The nodes are ready (the completion that made them so is written): try
			// again once Redis answers rather than wait for the safety sweep. A
			// dispatch that got through already is not repeated (the script checks).
			go e.redispatch(db, flowID, callerID, jobs, startedAt)
		}
		return
	}
	for _, r := range res {
		if r.MsgKey == "" {
			e.log.Debug().Uint32(obs.KeyContextID, db.ContextID).Uint32(obs.KeyFlowID, flowID).Uint32(obs.KeyJobID, r.JobID).Str("why", r.Why).Msg("job not dispatched")
			continue
		}
		e.m.dispatched.Inc()
		e.log.Debug().Uint32(obs.KeyContextID, db.ContextID).Uint32(obs.KeyFlowID, flowID).Uint32(obs.KeyJobID, r.JobID).Str(obs.KeyMessage, r.MsgKey).Uint32("attempt", r.Attempt).Msg("job dispatched")
	}
}

// redispatch retries a dispatch that failed on a passing Redis fault, with backoff,
// until it goes through, fails otherwise, or the process ends.
func (e *engine) redispatch(db *store.DB, flowID, callerID uint32, jobs []*model.Job, startedAt time.Time) {
	var bo fault.Backoff
	for bo.Sleep(e.life) {
		ctx, cancel := context.WithTimeout(e.life, 10*time.Second)
		var err error
		if startedAt.IsZero() {
			_, err = db.DispatchMany(ctx, flowID, callerID, jobs, store.ActorScheduler, 0)
		} else {
			_, err = db.DispatchStarted(ctx, flowID, callerID, jobs, store.ActorScheduler, startedAt)
		}
		cancel()
		e.m.writeRetries.Inc()
		if err == nil {
			e.m.dispatched.Add(float64(len(jobs)))
			e.log.Info().Uint32(obs.KeyContextID, db.ContextID).Uint32(obs.KeyFlowID, flowID).Int("jobs", len(jobs)).Msg("dispatched after a Redis fault")
			return
		}
		if !fault.Transient(err) {
			e.log.Error().Err(err).Uint32(obs.KeyContextID, db.ContextID).Uint32(obs.KeyFlowID, flowID).Msg("dispatch jobs (the safety sweep tries again)")
			return
		}
	}
}

// backoff returns the delay before the attempt after `attempt` failed (lib/retry's
// Policy: exponential from retryBase, capped, with equal jitter); the completion
// scripts apply it by retry.Decide's rules.
func (e *engine) backoff(attempt uint32) time.Duration {
	return retry.Policy{Base: e.retryBase, Cap: e.retryCap}.Backoff(attempt, rand.Int64N)
}

// jobDone applies a job's end: the DAG moves on at once.
func (e *engine) jobDone(ctx context.Context, ctxID uint32, end store.JobEnd) error {
	return e.jobsDone(ctx, ctxID, []store.JobEnd{end})
}

// jobsDone applies the ends of several jobs of one context, the flow jobs' in one
// round trip, then dispatches the dependents they made ready, by flow. An end that
// fails leaves the others applied; reporting them all again changes nothing more.
func (e *engine) jobsDone(ctx context.Context, ctxID uint32, ends []store.JobEnd) error {
	db, err := e.store.Ctx(ctxID)
	if err != nil {
		return err
	}
	var nodes, standalone []store.JobEnd
	var first error
	for i := range ends {
		end := &ends[i]
		end.Retries = -1 // the script reads the job's retries (and stop request) itself
		end.Backoff = e.backoff(end.Attempt)
		end.Actor = store.ActorScheduler
		end.Retention = e.retention
		if end.FlowID != 0 {
			nodes = append(nodes, *end)
		} else {
			standalone = append(standalone, *end)
		}
	}
	if len(standalone) > 0 {
		results, errs := db.CompleteStandalones(ctx, standalone) // one round trip for them all
		for i, end := range standalone {
			if errs[i] != nil {
				first = cmp.Or(first, errs[i])
				continue
			}
			e.ended(ctxID, end, results[i])
		}
	}
	if len(nodes) == 0 {
		return first
	}
	type group struct{ flow, caller uint32 }
	ready := map[group][]uint32{}
	var order []group
	results, errs := db.CompleteNodes(ctx, nodes)
	for i, end := range nodes {
		if errs[i] != nil {
			first = cmp.Or(first, errs[i])
			continue
		}
		res := results[i]
		e.ended(ctxID, end, res)
		if len(res.Ready) > 0 {
			g := group{end.FlowID, end.CallerID}
			if _, seen := ready[g]; !seen {
				order = append(order, g)
			}
			ready[g] = append(ready[g], res.Ready...)
		}
	}
	for _, g := range order {
		e.dispatchNodes(ctx, db, g.flow, g.caller, ready[g], nil, time.Time{})
	}
	return first
}

// ended counts and logs what one applied end did.
func (e *engine) ended(ctxID uint32, end store.JobEnd, res store.EndResult) {
	log := func() zerolog.Logger {
		return e.log.With().Uint32(obs.KeyContextID, ctxID).Uint32(obs.KeyFlowID, end.FlowID).Uint32(obs.KeyJobID, end.JobID).Uint32("attempt", end.Attempt).Logger()
	}
	switch {
	case !res.Applied:
		e.m.jobsEnded.WithLabelValues("duplicate").Inc()
		if e.log.Debug().Enabled() {
			l := log()
			l.Debug().Msg("job end already applied")
		}
		return
	case !res.RetryAt.IsZero():
		e.m.retried.Inc()
		e.m.jobsEnded.WithLabelValues("retry").Inc()
		l := log()
		l.Info().Str("error", end.Error).Time("retry_at", res.RetryAt).Msg("job failed; retry scheduled")
		e.pokeDue()
		return
	case end.Status == model.JobFinished:
		e.m.jobsEnded.WithLabelValues("completed").Inc()
	default:
		e.m.jobsEnded.WithLabelValues("failed").Inc()
		l := log()
		l.Info().Str("error", end.Error).Msg("job failed")
		// the dependents its failure cancelled in the same call, as the script counted
		// them (those past store.CascadeChunk are counted by cascade)
		if res.Cancelled > 0 {
			e.m.jobsEnded.WithLabelValues("cancelled").Add(float64(res.Cancelled))
		}
	}
	if res.FlowFinished {
		e.m.flowsFinished.WithLabelValues(string(res.FlowStatus)).Inc()
		l := log()
		l.Info().Str("status", string(res.FlowStatus)).Msg("flow ended")
	}
	if res.FlowFinished || end.FlowID == 0 {
		e.pokeDue() // its retention deadline may be the earliest now
	}
}

// cancelledNodes counts a flow's cancelled nodes; started=false: its DAG was never
// made (a flow cancelled before it started has no nodes).
func cancelledNodes(ctx context.Context, db *store.DB, flowID uint32) (n int, started bool, err error) {
	c, err := db.LoadFlowCounts(ctx, flowID)
	if err != nil {
		return 0, false, err
	}
	return c.Cancelled, c.Started, nil
}

// pokeDue makes the due loop recompute its timer (new delayed work or a new expiry).
func (e *engine) pokeDue() {
	select {
	case e.wakeDue <- struct{}{}:
	default:
	}
}

// dispatchStandalone dispatches a job of no flow (job.run).
func (e *engine) dispatchStandalone(ctx context.Context, ctxID, callerID, jobID uint32, actor string) (*model.Job, error) {
	db, err := e.store.Ctx(ctxID)
	if err != nil {
		return nil, err
	}
	j, err := db.LoadJob(ctx, callerID, jobID)
	if err != nil {
		return nil, err
	}
	if j.FlowID != 0 {
		return nil, &model.ValidationError{Object: "job", Field: "flow_id", Msg: fmt.Sprintf("job %d belongs to flow %d; start the flow instead", jobID, j.FlowID)}
	}
	if _, _, ok, why, err := db.Dispatch(ctx, 0, j, actor, 0); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%w: job %d is %s", errAlreadyEnded, jobID, why)
	}
	e.m.dispatched.Inc()
	return db.LoadJob(ctx, callerID, jobID)
}

// run is the engine's loop: delayed retries when they fall due, and the safety sweep
// (which is also the recovery after a restart).
func (e *engine) run(ctx context.Context) error {
	e.recordSettings(ctx)
	e.sweep(ctx)
	sweep := time.NewTicker(e.sweepEvery)
	defer sweep.Stop()
	timer := time.NewTimer(0)
	defer timer.Stop()
	// The events' safety sweep: one page of contexts a tick (trimSweep), a minute
	// apart (more often when the retention is short).
	trimEvery := min(max(e.retention/24, time.Second), time.Minute)
	trim := time.NewTicker(trimEvery)
	defer trim.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C:
			e.recordSettings(ctx)
			e.sweep(ctx)
		case <-trim.C:
			e.trimSweep(ctx)
		case <-e.wakeDue:
		case <-timer.C:
			e.runDue(ctx)
			e.runDelayed(ctx)
			e.runSchedules(ctx)
			e.runExpired(ctx)
		}
		wait := e.sweepEvery
		for _, next := range []func(context.Context) (time.Time, error){e.store.NextDue, e.store.NextDelayed, e.store.NextSchedule, e.store.NextExpiry} {
			t, err := next(ctx)
			if err == nil && !t.IsZero() {
				if w := time.Until(t); w < wait {
					wait = w
				}
			}
		}
		if wait < 0 {
			wait = 0
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// recordSettings writes the default retention and the sweep's interval where the
// runners' finish scripts read them (store.SetSchedulerSettings); again at each sweep,
// so that a Redis that lost its data gets them back. A runner that finds none leaves
// every end to this scheduler.
func (e *engine) recordSettings(ctx context.Context) {
	if err := e.store.SetSchedulerSettings(ctx, e.retention, e.sweepEvery); err != nil && ctx.Err() == nil {
		e.log.Error().Err(err).Msg("record the scheduler's settings (the next sweep tries again)")
	}
}

func (e *engine) runDue(ctx context.Context) {
	for {
		items, err := e.store.PopDue(ctx, time.Now(), 100)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Error().Err(err).Msg("pop due work")
			}
			return
		}
		for _, it := range items {
			db, err := e.store.Ctx(it.ContextID)
			if err != nil {
				continue
			}
			if it.Release {
				e.releaseDependents(ctx, db, it)
				continue
			}
			if it.Cascade {
				e.cascade(ctx, db, it)
				continue
			}
			if it.FlowID == 0 {
				if _, err := e.dispatchStandalone(ctx, it.ContextID, it.CallerID, it.JobID, store.ActorScheduler); err != nil {
					e.log.Error().Err(err).Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyJobID, it.JobID).Msg("retry standalone job")
				}
				continue
			}
			e.dispatchNodes(ctx, db, it.FlowID, it.CallerID, []uint32{it.JobID}, nil, time.Time{})
		}
		if len(items) < 100 {
			return
		}
	}
}

// releaseDependents releases the dependents of a completed node that its completion
// left (more than store.ReleaseChunk): the store makes them ready and dispatches them
// in a few short script calls, the later ones pipelined (store.ReleaseDependents). A
// call that fails stops it: the node's rel: field stays, and the safety sweep takes it
// up again.
func (e *engine) releaseDependents(ctx context.Context, db *store.DB, it store.DueItem) {
	r, err := db.ReleaseDependents(ctx, it.FlowID, it.CallerID, it.JobID)
	e.m.dispatched.Add(float64(r.Dispatched))
	if err != nil {
		e.log.Error().Err(err).Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyFlowID, it.FlowID).Uint32(obs.KeyJobID, it.JobID).Msg("release dependents (the safety sweep tries again)")
		return
	}
	e.log.Debug().Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyFlowID, it.FlowID).Uint32(obs.KeyJobID, it.JobID).Int("ready", len(r.Ready)).
		Int("dispatched", r.Dispatched).Int("calls", r.Calls).Msg("dependents released")
}

// cascade goes on with the cancel of the nodes after a failed one that its completion
// left (more than store.CascadeChunk to examine), a chunk a call until none is left
// (store.CascadeFlow). A call that fails stops it: the flow's cascade list keeps what
// is left, and the safety sweep goes on with it.
func (e *engine) cascade(ctx context.Context, db *store.DB, it store.DueItem) {
	c, err := db.CascadeFlow(ctx, it.FlowID, store.ActorScheduler, e.retention)
	e.countCascaded(c.Cancelled)
	if err != nil {
		e.log.Error().Err(err).Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyFlowID, it.FlowID).Msg("cancel the jobs after a failed one (the safety sweep tries again)")
		return
	}
	e.log.Debug().Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyFlowID, it.FlowID).Int("calls", c.Calls).Int("cancelled", c.Cancelled).Str("flow_status", c.Status).Msg("jobs after a failed one cancelled")
}

// countCascaded counts, as cancelled ends, the nodes a failure's cascade cancelled
// (the scripts count them as they cancel them: the DAG is not read).
func (e *engine) countCascaded(n int) {
	if n > 0 {
		e.m.jobsEnded.WithLabelValues("cancelled").Add(float64(n))
	}
}

// resumeWork finishes a cancel, a retry or a failure's cancel of the nodes after it,
// in chunks, that its caller left under way on a flow (a restart): the sweep then
// dispatches the retried flow's ready nodes. false: it failed (the next sweep tries
// again).
func (e *engine) resumeWork(ctx context.Context, db *store.DB, flowID uint32) bool {
	w, err := db.ResumeFlowWork(ctx, flowID, store.ActorScheduler, e.retention)
	e.countCascaded(w.CascadeCancelled)
	if err != nil {
		e.log.Error().Err(err).Uint32(obs.KeyContextID, db.ContextID).Uint32(obs.KeyFlowID, flowID).Msg("finish a flow's cancel or retry (the next sweep tries again)")
		return false
	}
	if w.Cancelled || w.Retried || w.Cascaded {
		e.log.Warn().Uint32(obs.KeyContextID, db.ContextID).Uint32(obs.KeyFlowID, flowID).Bool("cancel", w.Cancelled).Bool("retry", w.Retried).Bool("cascade", w.Cascaded).
			Msg("a flow's cancel, retry or cascade had been left under way; finished")
	}
	return true
}

// sweep reconciles every active flow with its jobs: a cancel, a retry or a failure's
// cancel of the nodes after it, in chunks, left under way is finished, ready nodes that were never
// dispatched (a crash between the DAG update and the dispatch) are dispatched, the
// dependents a completion left to release (rel:<id>) are released, and nodes whose
// job ended without the end reaching the scheduler are completed. The DAG is read in
// bounded pages (store.SweepDAG), whatever the flow's size.
func (e *engine) sweep(ctx context.Context) {
	flows, err := e.store.ActiveFlows(ctx)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Error().Err(err).Msg("safety sweep")
		}
		return
	}
	now := time.Now().UnixMilli()
	for _, cf := range flows {
		if ctx.Err() != nil {
			return
		}
		db, err := e.store.Ctx(cf[0])
		if err != nil {
			continue
		}
		if !e.resumeWork(ctx, db, cf[1]) {
			continue
		}
		g, err := db.SweepDAG(ctx, cf[1])
		if err != nil {
			continue
		}
		for _, id := range g.Releases {
			// dependents left to release (a release the scheduler did not finish)
			e.releaseDependents(ctx, db, store.DueItem{ContextID: cf[0], FlowID: cf[1], CallerID: g.CallerID, JobID: id, Release: true})
		}
		// a retry is the due loop's: the sweep lets a second pass first
		atStart, ready := readyNodes(g, now-1000)
		for _, id := range sweptIDs(g) {
			n := g.Nodes[id]
			switch n.Status {
			case model.NodeDispatched, model.NodeRunning:
				j, err := db.LoadJob(ctx, g.CallerID, id)
				if err != nil || !j.Status.Terminal() || j.Attempt != n.Attempt {
					continue
				}
				e.m.recovered.Inc()
				e.log.Warn().Uint32(obs.KeyContextID, cf[0]).Uint32(obs.KeyFlowID, cf[1]).Uint32(obs.KeyJobID, id).Msg("job end had not reached the scheduler; applying it")
				_ = e.jobDone(ctx, cf[0], store.JobEnd{FlowID: cf[1], CallerID: g.CallerID, JobID: id, Attempt: n.Attempt, Status: j.Status, Error: j.Error, Fatal: j.Fatal})
			}
		}
		e.m.recovered.Add(float64(len(atStart) + len(ready)))
		e.dispatchReadyNodes(ctx, db, cf[1], g.CallerID, atStart, ready)
	}
}

// sweptIDs are the ids of a swept flow's nodes in flight, in order.
func sweptIDs(g *store.SweptDAG) []uint32 {
	ids := make([]uint32, 0, len(g.Nodes))
	for id := range g.Nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// readyNodes are a swept flow's ready nodes whose retry, if one waits, was due by
// dueBy (ms), in order: atStart those ready since the flow's start and never
// dispatched (no dependency, no attempt), ready the others.
func readyNodes(g *store.SweptDAG, dueBy int64) (atStart, ready []uint32) {
	for _, id := range sweptIDs(g) {
		n := g.Nodes[id]
		switch {
		case n.Status != model.NodeReady, n.DueMs != 0 && n.DueMs > dueBy:
		case n.Attempt == 0 && len(n.Depends) == 0:
			atStart = append(atStart, id)
		default:
			ready = append(ready, id)
		}
	}
	return atStart, ready
}

// dispatchReadyNodes dispatches a flow's ready nodes (readyNodes'): those ready since
// the start have their jobs marked ready as of the flow's start, as the start's own
// dispatch would have (the start left them to it).
func (e *engine) dispatchReadyNodes(ctx context.Context, db *store.DB, flowID, callerID uint32, atStart, ready []uint32) {
	if len(atStart) > 0 {
		startedAt := time.Now()
		if f, err := db.LoadFlow(ctx, flowID); err == nil && f.StartedAtMs > 0 {
			startedAt = time.UnixMilli(f.StartedAtMs)
		}
		e.dispatchNodes(ctx, db, flowID, callerID, atStart, nil, startedAt)
	}
	if len(ready) > 0 {
		e.dispatchNodes(ctx, db, flowID, callerID, ready, nil, time.Time{})
	}
}

// cancelFlow cancels a flow for an actor.
func (e *engine) cancelFlow(ctx context.Context, ctxID, flowID uint32, actor string) (*model.Flow, []uint32, error) {
	db, err := e.store.Ctx(ctxID)
	if err != nil {
		return nil, nil, err
	}
	// The jobs the cancel ends before they ran are counted as cancelled ends: the
	// nodes it turns cancelled (a running job it stops ends as failed, when its
	// runner reports it). A read that fails leaves them uncounted.
	before, _, beforeErr := cancelledNodes(ctx, db, flowID)
	stopping, ended, err := db.CancelFlow(ctx, flowID, actor, e.retention)
	if err != nil {
		return nil, nil, err
	}
	f, err := db.LoadFlow(ctx, flowID)
	if err != nil {
		return nil, nil, err
	}
	if ended {
		return nil, nil, fmt.Errorf("%w: flow %d is %s", errAlreadyEnded, flowID, f.Status)
	}
	e.m.cancelled.Inc()
	e.countCancelled(ctx, db, f, before, beforeErr)
	e.pokeDue()
	e.log.Info().Uint32(obs.KeyContextID, ctxID).Uint32(obs.KeyFlowID, flowID).Str("actor", actor).Interface("stopping", stopping).Msg("flow cancelled")
	return f, stopping, nil
}

// countCancelled counts the ends of the jobs a cancel ended before they ran: the
// flow's cancelled nodes less the ones cancelled before it (by a failed job), or
// every job of a flow whose DAG was never made.
func (e *engine) countCancelled(ctx context.Context, db *store.DB, f *model.Flow, before int, beforeErr error) {
	if beforeErr != nil {
		return
	}
	after, started, err := cancelledNodes(ctx, db, f.ID)
	if err != nil {
		return
	}
	n := after - before
	if !started {
		n = len(f.Jobs)
	}
	if n > 0 {
		e.m.jobsEnded.WithLabelValues("cancelled").Add(float64(n))
	}
}

// runExpired deletes the ended flows and standalone jobs whose retention ended.
func (e *engine) runExpired(ctx context.Context) {
	for ctx.Err() == nil {
		items, err := e.store.PopExpired(ctx, time.Now(), 100)
		if err != nil {
			e.log.Error().Err(err).Msg("pop expired objects")
			return
		}
		var touched []uint32 // the contexts whose events may be trimmed now
		for _, it := range items {
			if !slices.Contains(touched, it.ContextID) {
				touched = append(touched, it.ContextID)
			}
			db, err := e.store.Ctx(it.ContextID)
			if err != nil {
				continue
			}
			deleted, err := e.deleteExpired(ctx, db, it)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				e.log.Error().Err(err).Uint32(obs.KeyContextID, it.ContextID).Str("kind", it.Kind).Msg("delete expired object")
				continue
			}
			if !deleted {
				continue
			}
			e.m.expired.WithLabelValues(it.Kind).Inc()
		}
		e.trimContexts(ctx, touched)
		if len(items) < 100 {
			return
		}
	}
}

// deleteExpired deletes one object whose retention ended: a flow, a standalone job,
// or a flow's creation (a stage) whose client went away — its jobs, a chunk a call;
// a stage whose flow was stored, or that was renewed, is dropped or left (deleted
// false).
func (e *engine) deleteExpired(ctx context.Context, db *store.DB, it store.Expired) (bool, error) {
	switch it.Kind {
	case "flow": // (only while ended: a flow.retry since its expiry was taken made it run)
		return db.DeleteEndedFlow(ctx, it.FlowID, "retention")
	case "stage":
		n, err := db.SweepFlowStageAll(ctx, it.FlowID, false)
		if n > 0 {
			e.log.Info().Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyFlowID, it.FlowID).Int("jobs", n).Msg("a flow's creation expired unfinished; its jobs deleted")
		}
		return n > 0, err
	default: // (only while ended: a dlq.requeue since its expiry was taken made it run)
		return db.DeleteEndedJob(ctx, it.CallerID, it.JobID, "retention")
	}
}

// trimPage is the most contexts one tick of the events' safety sweep visits, and
// trimTicks how many ticks a pass over every context takes when that is enough.
const (
	trimPage  = 64
	trimTicks = 60
)

// trimSweep is the safety net of the events' retention: each tick it trims the
// events of the next page of contexts (the contexts over trimTicks, at least one and
// at most trimPage of them, in the order of keys.Contexts, from where the last tick
// stopped, around again after the last), so that a tick costs at most trimPage
// contexts' trims whatever their number: at a tick a minute, every context is visited
// within the hour up to 3,840 contexts, within about a day at 100,000. The trim that
// keeps up with the retention is trimContexts after each expiry (runExpired): a
// context's events become trimmable when its oldest kept flow or job goes. The
// position is this process's own: a restart begins with the first page.
func (e *engine) trimSweep(ctx context.Context) {
	if e.retention <= 0 {
		return
	}
	page := e.trimPage
	if e.trimCount > 0 {
		page = int(min(int64(e.trimPage), max(1, (e.trimCount+int64(e.trimTicks)-1)/int64(e.trimTicks))))
	}
	ids, count, err := e.store.ContextPage(ctx, e.trimNext, page)
	if err != nil {
		e.log.Warn().Err(err).Msg("events' safety sweep: list contexts")
		return
	}
	e.trimCount = count
	e.trimNext += int64(len(ids))
	if len(ids) < page || e.trimNext >= count {
		e.trimNext = 0
	}
	e.trimContexts(ctx, ids)
}

// trimContexts drops the events older than each context's retention (its
// retention_seconds, else --retention; none when both are 0) from the contexts'
// streams, except those of the flows and jobs they still keep (lua/trim_events.lua).
func (e *engine) trimContexts(ctx context.Context, ids []uint32) {
	for _, id := range ids {
		db, err := e.store.Ctx(id)
		if err != nil {
			continue
		}
		keep := e.retention
		if c, err := e.store.LoadContext(ctx, id); err == nil && c.RetentionSeconds > 0 {
			keep = time.Duration(c.RetentionSeconds) * time.Second
		}
		if keep <= 0 {
			continue // kept forever
		}
		if err := db.TrimEvents(ctx, time.Now().Add(-keep)); err != nil {
			e.log.Warn().Err(err).Uint32(obs.KeyContextID, id).Msg("trim events")
		}
	}
}

// retryFlow re-runs a failed flow's failed and cancelled jobs and dispatches the ones
// ready at once.
func (e *engine) retryFlow(ctx context.Context, ctxID, flowID uint32, actor string) (*model.Flow, []uint32, error) {
	db, err := e.store.Ctx(ctxID)
	if err != nil {
		return nil, nil, err
	}
	ready, err := db.RetryFlow(ctx, flowID, actor)
	if err != nil {
		return nil, nil, err
	}
	f, err := db.LoadFlow(ctx, flowID)
	if err != nil {
		return nil, nil, err
	}
	e.log.Info().Uint32(obs.KeyContextID, ctxID).Uint32(obs.KeyFlowID, flowID).Str("actor", actor).Interface("ready", ready).Msg("flow retried")
	e.dispatchNodes(ctx, db, flowID, f.CallerID, ready, nil, time.Time{})
	return f, ready, nil
}
