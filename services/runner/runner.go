package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/execcore"
	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/groupcommit"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/sandbox"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/tick"
)

// runner claims jobs from the queues of the contexts it serves and runs them.
type runner struct {
	store   *store.Store
	log     zerolog.Logger
	cfg     *Config
	sandbox *sandbox.Sandbox
	m       runnerMetrics
	em      executorMetrics
	kinds   map[string]executionKind // how each kind of job runs (kinds.go)
	pools   map[poolKey]*poolEntry   // executor pools by executor and context
	poolMu  sync.Mutex
	// poolsClosed: the pools were stopped (the runner ends); none starts any more.
	poolsClosed bool
	// poolCtx is the context pools start under (run's): not a job's, whose end would
	// abort a start that others wait for. warm bounds the pools started ahead at once.
	poolCtx context.Context
	warm    chan struct{}
	exh     execHealth // executors whose pools crash-loop or cannot start here

	mu     sync.Mutex
	served []uint32 // contexts where runner:<id> exists
	// servers hold the served contexts: a claim loop waits on its queues' wake
	// lists on each.
	servers []*store.Server
	// refreshMu makes the checks of one context (refreshContext) one at a time: the
	// control watcher and a claim loop that took a token of an unknown context both
	// make them.
	refreshMu sync.Mutex
	// servedChanged is closed (and replaced) when served changes: a claim loop
	// waiting on the wake lists of the old set stops waiting.
	servedChanged chan struct{}
	// core holds the jobs this process runs now. Its job context outlives the loops:
	// running jobs finish during a drain; its end context ends when the drain gives
	// up: ends still waiting for Redis then stay in the state directory for the
	// restart.
	core  *execcore.Tracker[model.JobRef]
	slots chan struct{}
	// waitFailed: a wait for wake tokens failed (Redis away); a token taken by a wait
	// whose answer was lost is made up for by a claim without one.
	waitFailed atomic.Bool
	// finisher writes the ends of runs that finish together in one round trip.
	finisher *groupcommit.Committer[store.Finish, bool]
	// tasks hands a claimed job to an idle worker goroutine; workers live on after a
	// job (up to one per slot), so that a job does not pay for a new goroutine and
	// its stack's growth. workersEnd tells the idle ones to end.
	tasks      chan task
	workersEnd chan struct{}
	// holding are the claims of the runs this process has under way, from their start
	// until their end is written (or dropped): a claim that takes back one of this
	// worker's swept claims (store.StartRetaken) checks its run goes on here.
	holding claimSet
	// passed are the claims of runs whose slot their end's take passed on to a job it
	// claimed (passSlots): their workers keep the slot for it.
	passed claimSet
	// claimGate is held (read) by each claim call from its script until the runs it
	// started are in holding; retakenByClaim waits for the calls under way.
	claimGate sync.RWMutex
	// ending: the runner is stopping (run's context ended): a finish takes no
	// dependent (writeEnds), as the claim loops claim no more.
	ending atomic.Bool
	// recovered: the previous process's claims were handed back (run); the take waits
	// for it (writeEnds).
	recovered atomic.Bool
	// claimTurn lets one claim loop at a time wait for a wake token; it claims after
	// handing the turn on, so claims overlap (each ~3–5 ms under load: one at a time
	// they capped the rate jobs start) while a burst's tokens still wake one waiting
	// loop at a time, not all of them at once.
	claimTurn sync.Mutex
	// onScratchRetry, when set (tests), is called after a try to make a job's scratch
	// directory failed, before the wait for the next (scratchDir).
	onScratchRetry func(try int)
}

// task is a claimed job for a worker.
type task struct {
	db *store.DB
	s  store.Started
}

type runnerParams struct {
	store   *store.Store
	log     zerolog.Logger
	reg     prometheus.Registerer
	cfg     *Config
	sandbox *sandbox.Sandbox
}

type runnerMetrics struct {
	started    *prometheus.CounterVec
	finished   *prometheus.CounterVec
	failed     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	depStart   prometheus.Histogram
	queueWait  prometheus.Histogram
	requeued   prometheus.Counter
	lostLeases prometheus.Counter
	retaken    *prometheus.CounterVec
	endRetries prometheus.Counter
	handedIn   *prometheus.CounterVec
	wakeKeys   prometheus.Gauge
	keyHeld    prometheus.Counter
	// jobs started per claim call, runs per finish call (the script calls' sizes)
	claimJobs  prometheus.Histogram
	finishRuns prometheus.Histogram
	// dependents claimed by the end of their dependency (the take, not a claim call)
	taken prometheus.Counter
	// what the finish script applied itself (--apply-ends), under the scheduler's names
	jobEnds    *prometheus.CounterVec
	dispatched prometheus.Counter
	flowsEnded *prometheus.CounterVec
	// byType: started's and finished's children by script type (jobCounters)
	byType *resolved[typeCounters]
}

func newRunner(p runnerParams) *runner {
	f := promauto.With(p.reg)
	r := &runner{
		store: p.store, log: p.log, cfg: p.cfg, sandbox: p.sandbox,
		core:          execcore.NewTracker[model.JobRef](),
		kinds:         executionKinds(),
		holding:       claimSet{ids: map[string]struct{}{}},
		passed:        claimSet{ids: map[string]struct{}{}},
		em:            newExecutorMetrics(p.reg),
		slots:         make(chan struct{}, p.cfg.Concurrency),
		warm:          make(chan struct{}, poolStarts),
		tasks:         make(chan task),
		workersEnd:    make(chan struct{}),
		servedChanged: make(chan struct{}),
		m: runnerMetrics{
			started:  f.NewCounterVec(prometheus.CounterOpts{Name: "hero_jobs_started_total", Help: "Job runs started, by script type."}, []string{"script_type"}),
			finished: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_jobs_finished_total", Help: "Job runs that finished successfully, by script type."}, []string{"script_type"}),
			failed:   f.NewCounterVec(prometheus.CounterOpts{Name: "hero_jobs_failed_total", Help: "Job runs that ended in error, by script type and reason (exit_code, timeout, stopped, no_interpreter, start_error, lost_lease)."}, []string{"script_type", "reason"}),
			duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "hero_job_run_duration_seconds", Help: "Run time of jobs, by script type.",
				Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, []string{"script_type"}),
			depStart: f.NewHistogram(prometheus.HistogramOpts{Name: "hero_job_dependent_start_latency_seconds",
				Help:    "Time from a job's last dependency finishing to the job starting.",
				Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}}),
			queueWait: f.NewHistogram(prometheus.HistogramOpts{Name: "hero_job_queue_wait_seconds", Help: "Time from a job's dispatch to its start.",
				Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60}}),
			requeued:   f.NewCounter(prometheus.CounterOpts{Name: "hero_runner_lease_requeues_total", Help: "Jobs of dead runner processes put back on their queue."}),
			lostLeases: f.NewCounter(prometheus.CounterOpts{Name: "hero_runner_lost_leases_total", Help: "Jobs this process stopped because another claim took them after their lease expired."}),
			retaken: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_runner_leases_retaken_total",
				Help: "Leases of this process's runs taken back after they expired and were swept while no other claim took the job (the process was stopped or cut off from Redis past the lease), by how (renewal, claim)."}, []string{"how"}),
			endRetries: f.NewCounter(prometheus.CounterOpts{Name: "hero_runner_end_write_retries_total", Help: "Writes of a job's end retried after a passing Redis fault."}),
			handedIn: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_runner_ends_handed_over_total",
				Help: "Job ends a previous process of this worker id left in the state directory, by outcome (written, taken_over: another run holds the job now)."}, []string{"outcome"}),
			wakeKeys: f.NewGauge(prometheus.GaugeOpts{Name: "hero_runner_wake_keys",
				Help: "Wake lists named by this process's last wait for jobs, summed over the servers (the stop lists of the waits aside)."}),
			keyHeld: f.NewCounter(prometheus.CounterOpts{Name: "hero_runner_jobs_rate_held_total",
				Help: "Jobs this process's claims held back at their concurrency key's rate (limit.set key:<k> with a rate; released when their token comes)."}),
			claimJobs: f.NewHistogram(prometheus.HistogramOpts{Name: "hero_runner_claim_jobs",
				Help: "Jobs started per claim call (one script call claims up to the free slots, at most 64).", Buckets: prometheus.ExponentialBuckets(1, 2, 7)}),
			taken: f.NewCounter(prometheus.CounterOpts{Name: "hero_runner_jobs_taken_total",
				Help: "Jobs this process started straight from the end of other runs (the finish script claimed them for it on those runs' slots: a dependent they made ready, or the next job of their queue; no wake-up, no claim call)."}),
			finishRuns: f.NewHistogram(prometheus.HistogramOpts{Name: "hero_runner_finish_runs",
				Help: "Runs whose ends one finish round trip wrote (the ends that came while the calls in flight were, at most 128; a second call starts beside one of at most 8 runs).", Buckets: prometheus.ExponentialBuckets(1, 2, 8)}),
			jobEnds:    f.NewCounterVec(prometheus.CounterOpts{Name: obs.MetricJobEnds, Help: obs.MetricJobEndsHelp}, []string{"outcome"}),
			dispatched: f.NewCounter(prometheus.CounterOpts{Name: obs.MetricJobsDispatched, Help: obs.MetricJobsDispatchedHelp}),
			flowsEnded: f.NewCounterVec(prometheus.CounterOpts{Name: obs.MetricFlowsEnded, Help: obs.MetricFlowsEndedHelp}, []string{"status"}),
			byType:     &resolved[typeCounters]{},
		},
	}
	r.finisher = newFinisher(r.writeEnds)
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "hero_runner_jobs_running", Help: "Jobs this process runs now."}, func() float64 {
		return float64(r.core.Len())
	})
	return r
}

// finishBeside is how many runs the finish call in flight may hold for a second one to
// start beside it (groupcommit's Beside, with two calls in flight). Under light load
// (job.run from 16 clients: the jobs of one claim, ~8, end together) an end then goes
// at once instead of waiting for the call in flight to return (docs/benchmarks.md,
// "What bounds each figure" (c)); with 4 the calls of such a burst still went one at a
// time. Under load the calls hold more and go one at a time, each with every end that
// came meanwhile (~10 runs a call in BenchmarkPeers (a), ~11 with one call in flight).
const finishBeside = 8

// newFinisher is the runner's group commit of run ends (fn writes a group's: writeEnds).
func newFinisher(fn groupcommit.Func[store.Finish, bool]) *groupcommit.Committer[store.Finish, bool] {
	return groupcommit.New(groupcommit.Params[store.Finish, bool]{Max: 128, Fn: fn, Inflight: 2, Beside: finishBeside})
}

// writeEnds writes the ends of runs that the finisher grouped, each run's worker
// holding its slot until the write returns (endsWritten).
func (r *runner) writeEnds(ctx context.Context, fs []store.Finish) ([]bool, []error) {
	return r.endsWritten(ctx, fs, true)
}

// endsWritten writes the ends of runs (the finisher's group, or an end a previous
// process handed over), applying the successful ones itself with --apply-ends, and
// counts what it applied. slotted: each run's worker holds a slot until this returns,
// which the take may pass on.
func (r *runner) endsWritten(ctx context.Context, fs []store.Finish, slotted bool) ([]bool, []error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i := range fs {
		fs[i].Apply = r.cfg.ApplyEnds
	}
	r.m.finishRuns.Observe(float64(len(fs)))
	// The take: the script claims jobs for this process on the slots of the runs that
	// end (a dependent these ends make ready, else the next jobs of the runs' queue), so
	// that they start without a wake-up and a claim's round trip (lua/finish_jobs.lua):
	// a run's worker whose slot a taken job got keeps it for that job (passSlots). A
	// runner that is stopping takes none (its drain waits for the jobs it runs, not for
	// new ones).
	offer := r.takeOffer(fs, slotted)
	if offer == 0 {
		oks, errs, applied := store.FinishJobsApplied(ctx, fs)
		r.countApplied(applied)
		return oks, errs
	}
	t := &store.Take{Worker: r.cfg.WorkerID, RunnerID: r.cfg.RunnerID, Queues: r.queues(), Max: offer, Lease: r.cfg.Lease}
	for i := range fs {
		fs[i].Take = t // the first call that applies takes (store.FinishJobsApplied)
	}
	// Under claimGate, as a claim call: the runs it started are in holding before a
	// retakenByClaim looks.
	r.claimGate.RLock()
	oks, errs, applied := store.FinishJobsApplied(ctx, fs)
	for i := range fs {
		fs[i].Take = nil // a retry of the write offers its own
	}
	r.countApplied(applied)
	started, retaken := r.holdTaken(applied.Taken)
	r.claimGate.RUnlock()
	r.startTaken(ctx, applied.Taken, started, retaken, r.passSlots(fs, errs, len(started)))
	return oks, errs
}

// takeOffer is how many jobs the take may claim for the runs fs that end (0: none):
// one for each run's slot, at most store.MaxTake; only for runs whose workers hold
// their slots (slotted), when the runner applies ends, is not stopping and has handed
// back its previous process's claims.
func (r *runner) takeOffer(fs []store.Finish, slotted bool) int {
	if !slotted || !r.cfg.ApplyEnds || r.ending.Load() || !r.recovered.Load() {
		return 0
	}
	return min(len(fs), store.MaxTake)
}

// passSlots marks the slots of up to n runs of fs whose ends were written (errs) as
// passed on to the jobs the take started: their workers keep them (worker). It
// returns how many it passed.
func (r *runner) passSlots(fs []store.Finish, errs []error, n int) int {
	passed := 0
	for i := 0; i < len(fs) && passed < n; i++ {
		if errs[i] == nil {
			r.passed.add(fs[i].Claim.ID)
			passed++
		}
	}
	return passed
}

// holdTaken puts the runs the take started in holding (the caller holds claimGate)
// and returns them, and the claims a sweep had taken back meanwhile.
func (r *runner) holdTaken(tk *store.Taken) (started []store.Started, retaken []*store.Claim) {
	if tk == nil {
		return nil, nil
	}
	for _, s := range tk.Started {
		switch {
		case s.Err != nil:
			r.log.Error().Err(s.Err).Uint32(obs.KeyContextID, tk.DB.ContextID).Str("queue", s.Claim.Queue).Msg("take job")
		case s.Outcome == store.StartRun || s.Outcome == store.StartStopped:
			r.holding.add(s.Claim.ID)
			started = append(started, s)
		case s.Outcome == store.StartRetaken:
			retaken = append(retaken, s.Claim)
		}
	}
	return started, retaken
}

// startTaken starts what the take claimed on the slots passed to it (passed: see
// passSlots; a taken job beyond them waits for a free slot), and releases the claims
// of a take whose answer was lost.
func (r *runner) startTaken(ctx context.Context, tk *store.Taken, started []store.Started, retaken []*store.Claim, passed int) {
	if len(started) > 0 && r.cfg.pause != nil {
		r.cfg.pause("taken", 0) // the ends written, the jobs claimed for this process
	}
	for i, s := range started {
		r.m.taken.Inc()
		t := task{db: tk.DB, s: s}
		if i < passed {
			r.start(t)
			continue
		}
		// Only when another context's ends of this group were not written (a fault):
		// the job waits for a slot as a claim would have.
		go func() {
			r.slots <- struct{}{}
			r.start(t)
		}()
	}
	if tk != nil && tk.Err != nil && ctx.Err() == nil {
		r.log.Error().Err(tk.Err).Uint32(obs.KeyContextID, tk.DB.ContextID).Msg("take job")
		var un *store.UnansweredClaimError
		if errors.As(tk.Err, &un) {
			r.releaseClaims(ctx, tk.DB, un.ClaimIDs)
		}
	}
	if len(retaken) > 0 {
		r.retakenByClaim(ctx, tk.DB, retaken)
	}
}

// countApplied counts what finish scripts applied.
func (r *runner) countApplied(a store.Applied) {
	if a.Ends > 0 {
		r.m.jobEnds.WithLabelValues("completed").Add(float64(a.Ends))
	}
	if a.Dispatched > 0 {
		r.m.dispatched.Add(float64(a.Dispatched))
	}
	for _, st := range a.FlowsEnded {
		r.m.flowsEnded.WithLabelValues(string(st)).Inc()
	}
}

func (r *runner) run(ctx context.Context) error {
	defer r.stopExecutors()
	r.poolMu.Lock()
	r.poolCtx = ctx
	r.poolMu.Unlock()
	go func() {
		<-ctx.Done()
		r.ending.Store(true)
	}()
	r.refreshServed(ctx)
	r.writeHandedOver(ctx)
	r.recover(ctx)
	// From here a finish may take a dependent: one taken while the ends a previous
	// process handed over were written would be on this worker's processing list
	// when recover hands that list back, and run twice.
	r.recovered.Store(true)
	// Jobs that wait without a token (lost in a crash, or left by a layout before the
	// runners' wake lists) are claimed now, not after a first idle wait.
	r.claimWithoutToken(ctx)
	var wg sync.WaitGroup
	loops := []func(context.Context){r.controlLoop, r.heartbeatLoop, r.sweepLoop, r.watchControl}
	// One claim loop (--claim-loops, 1) waits on the wake lists, then claims every
	// slot free by then; with more, one waits while another claims, so that a wake-up
	// is not held up by a claim under way, but they split the slots that free up
	// between more claims: BenchmarkPeers (a) claimed ~6 jobs a call with 4 loops, ~12
	// with 2 and ~17 with 1, with less of the runner's and Redis's CPU a job the fewer
	// the loops (docs/benchmarks.md).
	for i := 0; i < min(r.cfg.Concurrency, r.cfg.ClaimLoops); i++ {
		loops = append(loops, r.claimLoop)
	}
	for _, loop := range loops {
		wg.Add(1)
		go func(loop func(context.Context)) {
			defer wg.Done()
			loop(ctx)
		}(loop)
	}
	wg.Wait()
	r.drain()
	close(r.workersEnd)
	r.finisher.Close()
	return nil
}

// start runs a claimed job on an idle worker, or on a new one when none is idle. The
// caller holds the job's slot; the worker frees it.
func (r *runner) start(t task) {
	r.core.Begin()
	select {
	case r.tasks <- t:
	default:
		go r.worker(t)
	}
}

// worker runs jobs until the runner ends.
func (r *runner) worker(t task) {
	for {
		r.execute(r.core.JobCtx(), t.db, t.s.Claim, t.s.Outcome, t.s.Job)
		if !r.passed.pop(t.s.Claim.ID) { // else a job its end's take claimed has it
			<-r.slots
		}
		r.core.Done()
		select {
		case t = <-r.tasks:
		case <-r.workersEnd:
			return
		}
	}
}

// refreshServed finds the contexts to serve (those with the runner record) by looking
// in every candidate context, and announces the script types there. It runs once, at
// start: it also fills each server's index of the runner's contexts
// (keys.RunnerContexts) for contexts whose runner record is older than the index.
// Afterwards a control message refreshes the one context it names (refreshContext),
// and the safety net reads the index (refreshFromIndex).
func (r *runner) refreshServed(ctx context.Context) {
	candidates := r.cfg.contextIDs
	if candidates == nil {
		ids, err := r.store.ContextIDs(ctx)
		if err != nil {
			r.log.Error().Err(err).Msg("list contexts")
			return
		}
		candidates = ids
	}
	served := make([]uint32, 0, len(candidates))
	for _, id := range candidates {
		if r.serves(ctx, id) {
			served = append(served, id)
		}
	}
	r.setServed(ctx, served)
	if err := r.store.Heartbeat(ctx, r.cfg.RunnerID, r.cfg.WorkerID, served); err != nil {
		r.log.Error().Err(err).Msg("heartbeat")
	}
}

// serves says whether this process serves a context (it holds the runner record, and
// --contexts names it or is *), announcing the script types there when it does.
func (r *runner) serves(ctx context.Context, id uint32) bool {
	if r.cfg.contextIDs != nil && !slices.Contains(r.cfg.contextIDs, id) {
		return false
	}
	db, err := r.store.Ctx(id)
	if err != nil {
		return false
	}
	if here, err := db.RunnerHere(ctx, r.cfg.RunnerID); err != nil || !here {
		if err != nil {
			r.log.Error().Err(err).Uint32(obs.KeyContextID, id).Msg("look for the runner record")
		}
		return false
	}
	// Executors first: whoever sees the script types announced (a client waiting for
	// the runner) finds its executors there too.
	if err := db.AnnounceExecutors(ctx, r.cfg.RunnerID, r.executorNames()); err != nil {
		r.log.Error().Err(err).Uint32(obs.KeyContextID, id).Msg("announce executors")
		return false
	}
	if err := db.AnnounceScriptTypes(ctx, r.cfg.RunnerID, r.cfg.types); err != nil {
		r.log.Error().Err(err).Uint32(obs.KeyContextID, id).Msg("announce script types")
		return false
	}
	return true
}

// refreshContext checks one context (named by a control message) and serves it or
// stops serving it: a message costs the same whatever the number of contexts.
func (r *runner) refreshContext(ctx context.Context, id uint32) {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	ok := r.serves(ctx, id)
	served, _ := r.servedNow()
	i, found := slices.BinarySearch(served, id)
	switch {
	case ok && !found:
		served = slices.Insert(served, i, id)
	case !ok && found:
		served = slices.Delete(served, i, i+1)
	default:
		return
	}
	r.setServed(ctx, served)
	if ok {
		if err := r.store.Heartbeat(ctx, r.cfg.RunnerID, r.cfg.WorkerID, []uint32{id}); err != nil {
			r.log.Error().Err(err).Msg("heartbeat")
		}
	}
}

// refreshFromIndex is the safety net for a lost control message: it compares the
// served contexts with the servers' index of the runner's contexts (one SMEMBERS per
// server) and checks only the contexts where they differ.
func (r *runner) refreshFromIndex(ctx context.Context) {
	indexed, err := r.store.RunnerContexts(ctx, r.cfg.RunnerID)
	if err != nil {
		r.log.Error().Err(err).Msg("list the runner's contexts")
		return
	}
	if r.cfg.contextIDs != nil {
		indexed = slices.DeleteFunc(indexed, func(id uint32) bool { return !slices.Contains(r.cfg.contextIDs, id) })
	}
	served, _ := r.servedNow()
	for _, id := range indexed {
		if _, found := slices.BinarySearch(served, id); !found {
			r.refreshContext(ctx, id)
		}
	}
	for _, id := range served {
		if _, found := slices.BinarySearch(indexed, id); !found {
			r.refreshContext(ctx, id)
		}
	}
}

// setServed replaces the served contexts (sorted) and, when they changed, wakes the
// claim loops and starts the executor pools of the contexts added (servePools).
func (r *runner) setServed(ctx context.Context, served []uint32) {
	slices.Sort(served)
	servers := r.store.ServersOf(served)
	r.mu.Lock()
	changed := !slices.Equal(served, r.served)
	added, removed := sortedDiff(served, r.served), sortedDiff(r.served, served)
	r.served = served
	r.servers = servers
	if changed {
		close(r.servedChanged)
		r.servedChanged = make(chan struct{})
	}
	r.mu.Unlock()
	if changed {
		r.servePools(ctx, added, removed)
		ev := r.log.Info().Uint32(obs.KeyRunnerID, r.cfg.RunnerID).Int("contexts", len(served)).Interface("script_types", r.cfg.types)
		if len(served) <= 32 {
			ev = ev.Interface("context_ids", served)
		}
		ev.Msg("serving")
	}
}

// sortedDiff is the ids of a that are not in b (both sorted).
func sortedDiff(a, b []uint32) []uint32 {
	var out []uint32
	for _, id := range a {
		if _, ok := slices.BinarySearch(b, id); !ok {
			out = append(out, id)
		}
	}
	return out
}

func (r *runner) servedContexts() []uint32 {
	served, _ := r.servedNow()
	return served
}

// servedNow is the served contexts and a channel closed when they change.
func (r *runner) servedNow() ([]uint32, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint32(nil), r.served...), r.servedChanged
}

// waitOn is what a claim loop waits on: the servers of the served contexts (none
// when none is served), whether a context is served, and a channel closed when the
// served contexts change. It copies nothing that grows with the contexts.
func (r *runner) waitOn() ([]*store.Server, func(uint32) bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	served := r.served // replaced, never changed in place
	return r.servers, func(id uint32) bool {
		_, ok := slices.BinarySearch(served, id)
		return ok
	}, r.servedChanged
}

// queues returns the job queues of one served context.
func (r *runner) queues() []string {
	var qs []string
	for _, t := range r.cfg.types {
		qs = append(qs, keys.Queue(t.QueueSuffix()), keys.PinnedQueue(r.cfg.RunnerID, t.QueueSuffix()))
	}
	// The handler jobs of each executor whose pools are healthy here: while one
	// crash-loops, a runner with a healthy pool takes them (when none has, this one
	// takes them to fail them: claimsExecutor).
	for _, name := range r.executorNames() {
		if r.claimsExecutor(name) {
			s := model.ExecQueueSuffix(name)
			qs = append(qs, keys.Queue(s), keys.PinnedQueue(r.cfg.RunnerID, s))
		}
	}
	return qs
}

// writeHandedOver writes the job ends a previous process of this worker id could not
// (they wait in the state directory), before its claims are handed back: those jobs
// are not run again. Passing faults are retried until ctx ends.
func (r *runner) writeHandedOver(ctx context.Context) {
	for _, p := range r.loadPending() {
		db, err := r.store.Ctx(p.ContextID)
		if err != nil {
			r.log.Error().Err(err).Uint32(obs.KeyContextID, p.ContextID).Msg("job end of an unusable context: dropped")
			_ = os.Remove(r.pendingFile(store.Finish{DB: &store.DB{ContextID: p.ContextID}, Claim: &p.Claim, Job: p.Job}))
			continue
		}
		f := store.Finish{DB: db, Claim: &p.Claim, Job: p.Job, Outcome: p.Outcome}
		log := r.log.With().Uint32(obs.KeyContextID, p.ContextID).Uint32(obs.KeyFlowID, p.Job.FlowID).Uint32(obs.KeyJobID, p.Job.ID).Uint32(obs.KeyCallerID, p.Job.CallerID).Logger()
		var ok bool
		var bo fault.Backoff
		for {
			oks, errs := r.endsWritten(ctx, []store.Finish{f}, false)
			ok, err = oks[0], errs[0]
			if err == nil || !fault.Transient(err) || !bo.Sleep(ctx) {
				break
			}
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return // still kept: the next start writes it
		case err != nil:
			log.Error().Err(err).Msg("write a job end handed over by the previous process: dropped")
		case ok:
			r.m.handedIn.WithLabelValues("written").Inc()
			log.Info().Str("status", string(p.Outcome.Status)).Msg("wrote a job end handed over by the previous process of this worker id")
		default:
			r.m.handedIn.WithLabelValues("taken_over").Inc()
			log.Warn().Msg("job end handed over by the previous process: the job was taken over meanwhile; dropped")
		}
		_ = os.Remove(r.pendingFile(f))
	}
}

// recover hands back the jobs this worker id held before a restart.
func (r *runner) recover(ctx context.Context) {
	for _, id := range r.servedContexts() {
		db, err := r.store.Ctx(id)
		if err != nil {
			continue
		}
		if moved, err := db.RequeueRestarted(ctx, r.cfg.WorkerID); err == nil && len(moved) > 0 {
			r.log.Info().Uint32(obs.KeyContextID, id).Int("jobs", len(moved)).Msg("took back jobs held before a restart")
		}
	}
}

// maxClaimLoops bounds --claim-loops.
const maxClaimLoops = 16

// claimLoop waits for a free slot, then for a wake-up on any served queue, then claims.
func (r *runner) claimLoop(ctx context.Context) {
	idle := 0
	for ctx.Err() == nil {
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		// The served contexts are read in this loop's turn: a list read before
		// another loop's wait could be a whole wait old.
		r.claimTurn.Lock()
		servers, serves, changed := r.waitOn()
		if len(servers) == 0 {
			r.claimTurn.Unlock()
			<-r.slots
			select { // nothing to serve yet; the control watcher refreshes
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		// One wake list per queue of this runner id, in DB 0 of each server that holds
		// a served context (one BLPOP per server), whatever the number of contexts: a
		// token names its context. Rotate the key order so that no queue starves
		// another.
		qs := r.queues()
		wakeKeys := make([]string, len(qs))
		for i, q := range qs {
			wakeKeys[(i+idle)%len(qs)] = keys.WakeRunner(r.cfg.RunnerID, q)
		}
		wake := store.WakeSetsOn(servers, wakeKeys...)
		r.m.wakeKeys.Set(float64(len(wakeKeys) * len(servers)))
		// A change of the served contexts ends the wait: a new server's lists are
		// waited on at once.
		waitCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-changed:
				cancel()
			case <-waitCtx.Done():
			}
		}()
		w, err := r.store.WaitWake(waitCtx, 5*time.Second, wake...)
		kicked := waitCtx.Err() != nil && ctx.Err() == nil
		cancel()
		r.claimTurn.Unlock() // the next loop waits while this one claims
		if err != nil && kicked {
			<-r.slots
			continue
		}
		if err != nil {
			<-r.slots
			if ctx.Err() == nil {
				r.waitFailed.Store(true)
				r.log.Error().Err(err).Msg("wait for jobs")
				fault.Sleep(ctx, time.Second)
			}
			continue
		}
		idle++
		if w.Key == "" {
			// Idle for a while: a safety net for wake tokens lost in a crash.
			<-r.slots
			r.claimWithoutToken(ctx)
			continue
		}
		if claimed := r.claimWoken(ctx, w, serves); !claimed {
			<-r.slots
		}
		if r.waitFailed.Swap(false) {
			r.claimWithoutToken(ctx)
		}
	}
}

// claimWoken claims from the queue and context a wake token names (see claim). A token
// of a context this process does not serve (yet) makes it check that context: a
// runner record made since the last control message is served at once; the tokens of
// a context where the record is gone (deleted) are removed from the list. A process
// whose --contexts leaves the context out drops the token: the processes of one
// runner id are meant to serve the same contexts (a job of a context that only some
// of them serve may wait for their idle claim).
func (r *runner) claimWoken(ctx context.Context, w store.Woken, serves func(uint32) bool) bool {
	rid, queue, ok := store.ParseWakeRunner(w.Key)
	id, err := strconv.ParseUint(w.Token, 10, 32)
	if !ok || rid != r.cfg.RunnerID || err != nil || id == 0 {
		return false
	}
	ctxID := uint32(id)
	if !serves(ctxID) {
		if r.cfg.contextIDs != nil && !slices.Contains(r.cfg.contextIDs, ctxID) {
			return false
		}
		if r.refreshContext(ctx, ctxID); !slices.Contains(r.servedContexts(), ctxID) {
			if err := w.Discard(ctx); err != nil {
				r.log.Warn().Err(err).Uint32(obs.KeyContextID, ctxID).Msg("remove the wake tokens of a context not served")
			}
			return false
		}
	}
	if r.store.ServerFor(ctxID) != w.Server {
		return false // a token left on a server the context moved away from
	}
	return r.claim(ctx, ctxID, queue, true)
}

// maxClaim bounds the jobs one claim takes: 64 rather than 32 gave ~25% more no-op
// handler jobs a second at --concurrency 256 (docs/benchmarks.md); a claim of 64
// holds Redis for ~3 ms.
const maxClaim = 64

// claim takes jobs from a queue and marks them started (one script), then runs each in
// its own goroutine, which frees its slot. The caller holds one slot (and, if held, the
// wake token of one item); the claim takes as many more of the free slots as the
// queue has jobs, up to maxClaim. It returns false when it took no job to run (the
// caller's slot is then still the caller's to free).
func (r *runner) claim(ctx context.Context, ctxID uint32, queue string, held bool) bool {
	db, err := r.store.Ctx(ctxID)
	if err != nil {
		return false
	}
	slots := 1
	for slots < maxClaim {
		select {
		case r.slots <- struct{}{}:
			slots++
			continue
		default:
		}
		break
	}
	wake := store.Wake{Key: keys.WakeRunner(r.cfg.RunnerID, queue), Token: strconv.FormatUint(uint64(ctxID), 10), Held: held}
	got, err := r.claimStarts(ctx, db, queue, slots, wake)
	if err != nil && ctx.Err() == nil {
		r.log.Error().Err(err).Uint32(obs.KeyContextID, ctxID).Str("queue", queue).Msg("claim job")
		var un *store.UnansweredClaimError
		if errors.As(err, &un) {
			r.releaseClaims(ctx, db, un.ClaimIDs)
		}
	}
	started := 0
	var retaken []*store.Claim
	for _, s := range got {
		if s.Err != nil {
			r.log.Error().Err(s.Err).Uint32(obs.KeyContextID, ctxID).Str("queue", queue).Msg("claim job")
		}
		if s.Err == nil && s.Outcome == store.StartRetaken {
			retaken = append(retaken, s.Claim)
			continue
		}
		if s.Err == nil && s.Outcome == store.StartHeld {
			r.m.keyHeld.Inc()
		}
		if s.Err != nil || s.Outcome == store.StartGone || s.Outcome == store.StartDone || s.Outcome == store.StartHeld {
			r.log.Debug().Uint32(obs.KeyContextID, ctxID).Str("job_key", s.Claim.Item).Int("outcome", int(s.Outcome)).Msg("nothing to run")
			continue
		}
		started++
		r.start(task{db: db, s: s})
	}
	if started > 0 {
		r.m.claimJobs.Observe(float64(started))
	}
	// Free the slots no job took, except the caller's when no job started.
	keep := 0
	if started == 0 {
		keep = 1
	}
	for i := started + keep; i < slots; i++ {
		<-r.slots
	}
	if len(retaken) > 0 {
		r.retakenByClaim(ctx, db, retaken)
	}
	return started > 0
}

// claimStarts is db.ClaimStarts under claimGate (read): the runs it started are in
// holding (execute removes each) before it returns.
func (r *runner) claimStarts(ctx context.Context, db *store.DB, queue string, slots int, wake store.Wake) ([]store.Started, error) {
	r.claimGate.RLock()
	defer r.claimGate.RUnlock()
	got, err := db.ClaimStartsFresh(ctx, queue, r.cfg.WorkerID, r.cfg.Lease, slots, wake)
	for _, s := range got {
		if s.Err == nil && (s.Outcome == store.StartRun || s.Outcome == store.StartStopped) {
			r.holding.add(s.Claim.ID)
		}
	}
	return got, err
}

// retakenByClaim handles claims that took back claims of this worker whose leases had
// been swept (store.StartRetaken): a run of this process goes on under each (this
// process was stopped or cut off past the lease, and the sweep queued the job
// meanwhile); one that no run holds (its run ended and its end could not be written)
// is released, so that the job runs again. The claim calls under way first register
// the runs they started (claimGate): a call whose answer came in before the freeze
// may be read after this one's.
func (r *runner) retakenByClaim(ctx context.Context, db *store.DB, cls []*store.Claim) {
	r.claimGate.Lock() // nothing to do under it: taking it waits for the claim calls under way
	r.claimGate.Unlock()
	var release []string
	for _, cl := range cls {
		log := r.log.With().Uint32(obs.KeyContextID, db.ContextID).Str("job_key", cl.Item).Logger()
		if r.holding.has(cl.ID) {
			r.m.retaken.WithLabelValues("claim").Inc()
			log.Warn().Msg("job's lease had expired and been swept while it ran here: taken back, the run goes on")
			continue
		}
		log.Warn().Msg("job queued again under a claim of this worker that no run here holds: released")
		release = append(release, cl.ID)
	}
	r.releaseClaims(ctx, db, release)
}

// claimSet is a set of claim ids, safe for concurrent use.
type claimSet struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (s *claimSet) add(id string) {
	s.mu.Lock()
	s.ids[id] = struct{}{}
	s.mu.Unlock()
}

func (s *claimSet) remove(id string) {
	s.mu.Lock()
	delete(s.ids, id)
	s.mu.Unlock()
}

// pop removes id and says whether it was there.
func (s *claimSet) pop(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	delete(s.ids, id)
	return ok
}

// size is how many ids the set holds.
func (s *claimSet) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func (s *claimSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

// releaseClaims gives back claims that a failed claim call may have made (its
// answer was lost): their jobs go back on their queue now rather than when their
// lease ends. Passing faults are retried until Redis answers or ctx ends (the leases
// then bring the jobs back).
func (r *runner) releaseClaims(ctx context.Context, db *store.DB, ids []string) {
	var bo fault.Backoff
	for {
		moved, err := db.ReleaseClaims(ctx, r.cfg.WorkerID, ids)
		if err == nil {
			if len(moved) > 0 {
				r.log.Warn().Uint32(obs.KeyContextID, db.ContextID).Int("jobs", len(moved)).Msg("claims released (none runs here): their jobs back on their queue")
			}
			return
		}
		if !fault.Transient(err) || !bo.Sleep(ctx) {
			return
		}
	}
}

// claimWithoutToken claims jobs waiting in the served contexts without a wake token
// (one lost in a crash, or taken by a wait whose answer was lost). It looks only at
// the contexts of coord:busy (one ZRANGE per server when nothing waits), not at every
// served one.
func (r *runner) claimWithoutToken(ctx context.Context) {
	busy, err := r.store.BusyContexts(ctx, time.Time{})
	if err != nil {
		return
	}
	_, serves, _ := r.waitOn()
	for _, c := range busy {
		if !serves(c) {
			continue
		}
		db, err := r.store.Ctx(c)
		if err != nil {
			continue
		}
		st, err := db.CheckBusy(ctx, false)
		if err != nil {
			continue
		}
		for _, q := range r.queues() {
			if st.Lists[q] == 0 {
				continue
			}
			select {
			case r.slots <- struct{}{}:
			default:
				return
			}
			if !r.claim(ctx, c, q, false) {
				<-r.slots
			}
		}
	}
}

// controlLoop takes stop requests from this process's control list.
func (r *runner) controlLoop(ctx context.Context) {
	list := keys.StopList(r.cfg.WorkerID)
	for ctx.Err() == nil {
		// A stop request is pushed in DB 0 of the job's server: the list on every server.
		w, err := r.store.WaitWake(ctx, 5*time.Second, r.store.Everywhere(list)...)
		token := w.Token
		if err != nil {
			if ctx.Err() == nil {
				fault.Sleep(ctx, time.Second)
			}
			continue
		}
		if token == "" {
			continue
		}
		ref, err := model.ParseJobRef(token)
		if err != nil {
			r.log.Warn().Str("request", token).Msg("bad stop request")
			continue
		}
		if !r.stop(ref, "stopped") {
			r.log.Info().Str("job", ref.String()).Msg("stop request for a job not running here")
		}
	}
}

// stop ends a running job (its process group) with a reason.
func (r *runner) stop(ref model.JobRef, reason string) bool {
	return r.core.Stop(ref, reason)
}

// heartbeatLoop announces this process on every server that holds a served context
// (one round trip per server).
func (r *runner) heartbeatLoop(ctx context.Context) {
	tick.Every(ctx, r.cfg.Heartbeat, func() {
		_ = r.store.Heartbeat(ctx, r.cfg.RunnerID, r.cfg.WorkerID, r.servedContexts())
	})
}

// sweepLoop returns the jobs of dead runner processes to their queues. The sweep is
// shared with the routers and the other runner processes (store.SweepBusy): it looks
// only at the contexts of coord:busy, and one process sweeps a server per period.
func (r *runner) sweepLoop(ctx context.Context) {
	every := r.cfg.Lease / 3
	tick.Every(ctx, every, func() {
		r.store.SweepBusy(ctx, r.cfg.WorkerID, every, time.Now(), r.cfg.Lease, func(id uint32, mv store.Requeued) {
			r.m.requeued.Inc()
			r.log.Warn().Uint32(obs.KeyContextID, id).Str("queue", mv.Queue).Str("item", mv.Item).Msg("lease expired; job back on its queue")
		})
	})
}

// watchControl refreshes the context a control message names when contexts or runners
// are created or deleted (pub/sub on coord:control), and every 30 s compares the served
// contexts with the servers' index as a safety net (refreshFromIndex).
func (r *runner) watchControl(ctx context.Context) {
	sub := r.store.G().Subscribe(ctx, keys.Control)
	defer func() { _ = sub.Close() }()
	// Messages published before the subscription holds are not delivered: once it
	// holds, what changed since the start's refresh is read from the index (a
	// runner record made meanwhile would otherwise wait for the 30 s safety net).
	var bo fault.Backoff
	for {
		if _, err := sub.Receive(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			return
		} else if !bo.Sleep(ctx) {
			return
		}
	}
	r.refreshFromIndex(ctx)
	ch := sub.Channel()
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			if id, ok := controlContext(msg.Payload, r.cfg.RunnerID); ok {
				r.refreshContext(ctx, id)
			}
		case <-t.C:
			r.refreshFromIndex(ctx)
		}
	}
}

// drain waits for the running jobs to end within the shutdown timeout, then stops
// the rest and hands them back to their queues for another runner.
func (r *runner) drain() {
	defer r.core.Close()
	if r.core.Drain(r.cfg.ShutdownTimeout) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range r.servedContexts() {
		if db, err := r.store.Ctx(c); err == nil {
			if moved, err := db.RequeueConsumer(ctx, r.cfg.WorkerID); err == nil && len(moved) > 0 {
				r.log.Info().Uint32(obs.KeyContextID, c).Int("jobs", len(moved)).Msg("handed unfinished jobs back to their queues")
			}
		}
	}
}

// controlContext is the context a control message names, when it may change what
// this runner serves: "context:<ctx>", "context-deleted:<ctx>", and
// "runner:<ctx>:<runner>" or "runner-deleted:<ctx>:<runner>" of this runner id.
func controlContext(payload string, runnerID uint32) (uint32, bool) {
	kind, rest, ok := strings.Cut(payload, ":")
	if !ok {
		return 0, false
	}
	switch kind {
	case "context", "context-deleted":
	case "runner", "runner-deleted":
		c, rid, ok := strings.Cut(rest, ":")
		if !ok || rid != strconv.FormatUint(uint64(runnerID), 10) {
			return 0, false
		}
		rest = c
	default:
		return 0, false
	}
	id, err := strconv.ParseUint(rest, 10, 32)
	if err != nil || id == 0 {
		return 0, false
	}
	return uint32(id), true
}
