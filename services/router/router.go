package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/tick"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// router moves messages from every context's msg_out and msg_in: job requests onto
// the job queues, job results to the scheduler.
type router struct {
	store     *store.Store
	log       zerolog.Logger
	scheduler herov1.SchedulerClient
	gateway   herov1.GatewayClient
	id        string
	workers   int
	lease     time.Duration
	m         routerMetrics
	idleSweep sync.Mutex
	// claimTurn lets one worker at a time wait for a wake token and claim its group;
	// the groups are handled concurrently. Claims in turn take whole groups: workers
	// that all waited on the wake lists took a token each of one burst, and all but
	// one found nothing left to claim (a round trip each, for nothing).
	claimTurn sync.Mutex
	remote    remoteConfig
	retention time.Duration
	wakeDue   chan struct{}
	// noJobsDone: the scheduler answered JobsDone with Unimplemented (an older one).
	noJobsDone atomic.Bool
	// waitFailed: a wait for wake tokens failed (Redis away); a token whose answer was
	// lost is made up for by a drain of every context.
	waitFailed atomic.Bool
}

type routerParams struct {
	store     *store.Store
	log       zerolog.Logger
	reg       prometheus.Registerer
	scheduler herov1.SchedulerClient
	gateway   herov1.GatewayClient
	id        string
	workers   int
	lease     time.Duration
	remote    remoteConfig
	retention time.Duration
}

type routerMetrics struct {
	messages      *prometheus.CounterVec
	requeued      prometheus.Counter
	schedulerErrs prometheus.Counter
	handling      prometheus.Histogram
	writeRetries  prometheus.Counter
}

func newRouter(p routerParams) *router {
	f := promauto.With(p.reg)
	r := &router{
		store: p.store, log: p.log, scheduler: p.scheduler, gateway: p.gateway, id: p.id, workers: p.workers, lease: p.lease,
		remote: p.remote, retention: p.retention, wakeDue: make(chan struct{}, 1),
		m: routerMetrics{
			messages: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_router_messages_total",
				Help: "Messages the router handled, by kind (job_request, job_result, other) and outcome (delivered, failed, skipped)."}, []string{"kind", "outcome"}),
			requeued:      f.NewCounter(prometheus.CounterOpts{Name: "hero_router_lease_requeues_total", Help: "Claimed items put back on their queue after their lease expired."}),
			schedulerErrs: f.NewCounter(prometheus.CounterOpts{Name: "hero_router_scheduler_errors_total", Help: "Failed calls to the scheduler (retried)."}),
			writeRetries:  f.NewCounter(prometheus.CounterOpts{Name: "hero_router_write_retries_total", Help: "Redis writes of handled messages retried after a passing Redis fault."}),
			handling: f.NewHistogram(prometheus.HistogramOpts{Name: "hero_router_message_handling_seconds", Help: "Time to handle a message: the claim, handling and commit of the group it was claimed with.",
				Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}),
		},
	}
	p.reg.MustRegister(newDepthCollector(p.store))
	return r
}

// run starts the workers and the lease sweeper and returns when ctx ends.
func (r *router) run(ctx context.Context) error {
	r.recover(ctx)
	r.drainAll(ctx)
	var wg sync.WaitGroup
	for i := 0; i < r.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx)
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.sweepLeases(ctx)
	}()
	go func() {
		defer wg.Done()
		r.remoteDueLoop(ctx)
	}()
	wg.Wait()
	return nil
}

// recover hands back what this router held before a restart, and puts every context
// with work waiting or held into coord:busy (data older than the index; at start
// only: afterwards the producers keep the index).
func (r *router) recover(ctx context.Context) {
	ids, err := r.store.ContextIDs(ctx)
	if err != nil {
		r.log.Error().Err(err).Msg("list contexts for recovery")
		return
	}
	for _, id := range ids {
		db, err := r.store.Ctx(id)
		if err != nil {
			continue
		}
		if _, err := db.CheckBusy(ctx, true); err != nil {
			r.log.Error().Err(err).Uint32(obs.KeyContextID, id).Msg("check queues")
		}
		moved, err := db.RequeueConsumer(ctx, r.id)
		if err != nil {
			r.log.Error().Err(err).Uint32(obs.KeyContextID, id).Msg("requeue own messages")
			continue
		}
		if len(moved) > 0 {
			r.log.Info().Uint32(obs.KeyContextID, id).Int("messages", len(moved)).Msg("took back messages held before a restart")
		}
	}
}

func (r *router) worker(ctx context.Context) {
	for ctx.Err() == nil {
		g, idle := r.nextGroup(ctx)
		switch {
		case g != nil:
			r.handleGroup(ctx, g)
			if r.waitFailed.Load() && r.idleSweep.TryLock() {
				r.waitFailed.Store(false)
				r.drainAll(ctx)
				r.idleSweep.Unlock()
			}
		case idle:
			// A safety net for wake tokens lost when a router died between taking a
			// token and claiming its message.
			if r.idleSweep.TryLock() {
				r.drainAll(ctx)
				r.idleSweep.Unlock()
			}
		}
	}
}

// nextGroup waits for a wake token (in turn with the other workers) and claims the
// group of messages it stands for. idle: no token came for a while.
func (r *router) nextGroup(ctx context.Context) (g *group, idle bool) {
	r.claimTurn.Lock()
	defer r.claimTurn.Unlock()
	for ctx.Err() == nil {
		// Each server's DB 0 has the wake lists of its own contexts: one BLPOP each.
		w, err := r.store.WaitWake(ctx, 5*time.Second, r.store.Everywhere(keys.WakeMsgOut, keys.WakeMsgIn)...)
		key, token := w.Key, w.Token
		if err != nil {
			if ctx.Err() == nil {
				r.waitFailed.Store(true)
				r.log.Error().Err(err).Msg("wait for messages")
				fault.Sleep(ctx, time.Second)
			}
			continue
		}
		if key == "" {
			return nil, true
		}
		ctxID, err := strconv.ParseUint(token, 10, 32)
		if err != nil || ctxID == 0 {
			r.log.Warn().Str("token", token).Msg("bad wake token")
			continue
		}
		queue := keys.MsgOut
		if key == keys.WakeMsgIn {
			queue = keys.MsgIn
		}
		if g := r.claimGroup(ctx, uint32(ctxID), queue, true); g != nil {
			return g, false
		}
	}
	return nil, false
}

// drainAll handles every message waiting in any context's msg_out and msg_in, with
// or without a wake token. It looks only at the contexts of coord:busy (a producer
// adds a context there with each item): one ZRANGE per server when nothing waits.
func (r *router) drainAll(ctx context.Context) {
	ids, err := r.store.BusyContexts(ctx, time.Time{})
	if err != nil {
		return
	}
	for _, id := range ids {
		db, err := r.store.Ctx(id)
		if err != nil {
			continue
		}
		st, err := db.CheckBusy(ctx, false)
		if err != nil {
			continue
		}
		for _, q := range []string{keys.MsgOut, keys.MsgIn} {
			n := st.Lists[q]
			for n > 0 && ctx.Err() == nil {
				got := r.drain(ctx, id, q, false)
				if got == 0 {
					break
				}
				n -= int64(got)
			}
		}
	}
}

// maxBatch bounds the messages one claim takes.
const maxBatch = 64

// batch is what the handling of a group of claimed messages leaves to do together: job
// requests to put on the job queues, in one transaction, and job results to report to
// the scheduler, in one call.
type batch struct {
	queued  []queuedJob
	results []resultMsg
}

// resultMsg is a claimed result message and the job ends it carries (one, or those of
// runs of one flow that ended together).
type resultMsg struct {
	claim *store.Claim
	ends  []*herov1.JobDoneRequest
}

type queuedJob struct {
	claim  *store.Claim
	target string // the job queue
	job    string // the job's key
}

// group is what one claim took: messages to handle, job requests the claim routed.
type group struct {
	db     *store.DB
	start  time.Time
	cms    []*store.ClaimedMessage
	routed []store.Routed
}

// drain claims up to maxBatch messages of a context's queue and handles them. held:
// the caller took one of their wake tokens. It returns how many it claimed.
func (r *router) drain(ctx context.Context, ctxID uint32, queue string, held bool) int {
	g := r.claimGroup(ctx, ctxID, queue, held)
	if g == nil {
		return 0
	}
	r.handleGroup(ctx, g)
	return len(g.cms) + len(g.routed)
}

// claimGroup claims up to maxBatch messages of a context's queue; nil when it took
// none.
func (r *router) claimGroup(ctx context.Context, ctxID uint32, queue string, held bool) *group {
	db, err := r.store.Ctx(ctxID)
	if err != nil {
		r.log.Warn().Err(err).Uint32(obs.KeyContextID, ctxID).Msg("wake-up for an unusable context")
		return nil
	}
	start := time.Now()
	wake := keys.WakeMsgOut
	if queue == keys.MsgIn {
		wake = keys.WakeMsgIn
	}
	// Plain job requests of msg_out are routed by the claim script itself; the rest is
	// claimed and handled here.
	cms, routed, err := db.ClaimMessages(ctx, queue, r.id, r.lease, maxBatch, store.Wake{Key: wake, Token: strconv.FormatUint(uint64(ctxID), 10), Held: held}, queue == keys.MsgOut)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error().Err(err).Uint32(obs.KeyContextID, ctxID).Msg("claim message")
			var un *store.UnansweredClaimError
			if errors.As(err, &un) {
				r.releaseClaims(ctx, db, un.ClaimIDs)
			}
		}
		return nil
	}
	if len(cms)+len(routed) == 0 {
		return nil
	}
	return &group{db: db, start: start, cms: cms, routed: routed}
}

// handleGroup handles what a claim took.
func (r *router) handleGroup(ctx context.Context, g *group) {
	db, cms, routed := g.db, g.cms, g.routed
	ctxID := db.ContextID
	if len(routed) > 0 {
		r.m.messages.WithLabelValues(model.KindJobRequest, "delivered").Add(float64(len(routed)))
		if r.log.Debug().Enabled() {
			for _, j := range routed {
				r.log.Debug().Uint32(obs.KeyContextID, ctxID).Str("job_key", j.Job).Str("queue", j.Queue).Msg("job queued")
			}
		}
	}
	var b batch
	for _, cm := range cms {
		if !r.quickResult(db, cm, &b) {
			r.handle(ctx, db, cm, &b)
		}
	}
	r.queueJobs(ctx, db, b.queued)
	r.deliverResults(ctx, db, b.results)
	d := time.Since(g.start).Seconds()
	for range len(cms) + len(routed) {
		r.m.handling.Observe(d)
	}
}

// queueJobs puts job requests onto their job queues and acknowledges their messages,
// in one transaction.
func (r *router) queueJobs(ctx context.Context, db *store.DB, q []queuedJob) {
	if len(q) == 0 {
		return
	}
	jobs := make([]store.RoutedJob, len(q))
	for i, j := range q {
		jobs[i] = store.RoutedJob{Claim: j.claim, Target: j.target, Job: j.job}
	}
	// Retried through passing faults; a message the first try routed is not routed again.
	err := r.retryWrite(ctx, db, "enqueue jobs", func() error {
		_, err := db.RouteClaimed(ctx, jobs)
		return err
	})
	if err != nil {
		r.log.Error().Err(err).Uint32(obs.KeyContextID, db.ContextID).Int("jobs", len(q)).Msg("enqueue jobs")
		return // the messages stay claimed; their leases bring them back
	}
	r.m.messages.WithLabelValues(model.KindJobRequest, "delivered").Add(float64(len(q)))
	if r.log.Debug().Enabled() {
		for _, j := range q {
			r.log.Debug().Uint32(obs.KeyContextID, db.ContextID).Str(obs.KeyMessage, j.claim.Item).Str("job_key", j.job).Str("queue", j.target).Msg("job queued")
		}
	}
}

// deliverResults reports the job ends of result messages to the scheduler in one call
// and acknowledges the messages. If that call fails, each message's ends are reported
// on their own, so that one end the scheduler refuses cannot hold back the others (the
// refused ones are retried).
func (r *router) deliverResults(ctx context.Context, db *store.DB, msgs []resultMsg) {
	if len(msgs) == 0 {
		return
	}
	if len(msgs) > 1 {
		var ends []*herov1.JobDoneRequest
		for _, m := range msgs {
			ends = append(ends, m.ends...)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.callJobsDone(cctx, ends)
		cancel()
		if err == nil {
			r.ackResults(ctx, db, msgs)
			return
		}
		r.m.schedulerErrs.Inc()
		r.log.Warn().Err(err).Uint32(obs.KeyContextID, db.ContextID).Int("results", len(msgs)).Msg("report job ends to the scheduler; reporting each message's on their own")
	}
	// One try each first, so that the ends the scheduler takes are not held back by
	// one it refuses; then the refused ones, each retried until taken (or ctx ends).
	var taken []resultMsg
	var refused []resultMsg
	for _, m := range msgs {
		if left := r.tryEnds(ctx, m.ends); len(left) > 0 {
			refused = append(refused, resultMsg{claim: m.claim, ends: left})
			continue
		}
		taken = append(taken, m)
	}
	if len(taken) > 0 {
		r.ackResults(ctx, db, taken)
	}
	for _, m := range refused {
		log := r.log.With().Uint32(obs.KeyContextID, db.ContextID).Str(obs.KeyMessage, m.claim.Item).Uint32(obs.KeyFlowID, m.ends[0].FlowId).Logger()
		if len(m.ends) == 1 {
			log = log.With().Uint32(obs.KeyJobID, m.ends[0].JobId).Logger()
		}
		if r.reportEnd(ctx, db, m.claim, m.ends, log) {
			r.ackResults(ctx, db, []resultMsg{m})
		}
	}
}

// tryEnds reports ends in one call; if the scheduler refuses them and there are
// several (a result message of several jobs), each on its own. It returns the ends
// not taken.
func (r *router) tryEnds(ctx context.Context, ends []*herov1.JobDoneRequest) []*herov1.JobDoneRequest {
	try := func(e []*herov1.JobDoneRequest) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return r.callJobsDone(cctx, e)
	}
	if try(ends) == nil {
		return nil
	}
	if len(ends) == 1 {
		return ends
	}
	var left []*herov1.JobDoneRequest
	for i := range ends {
		if try(ends[i:i+1]) != nil {
			left = append(left, ends[i])
		}
	}
	return left
}

// ackResults marks result messages processed and releases their claims.
func (r *router) ackResults(ctx context.Context, db *store.DB, msgs []resultMsg) {
	err := r.retryWrite(ctx, db, "ack result messages", func() error {
		_, err := db.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range msgs {
				store.AckMessageOn(ctx, p, m.claim, model.MessageProcessed)
			}
			return nil
		})
		return err
	})
	if err != nil {
		r.log.Error().Err(err).Uint32(obs.KeyContextID, db.ContextID).Int("results", len(msgs)).Msg("ack result messages")
		return // reported; a second report after the lease expires changes nothing
	}
	r.m.messages.WithLabelValues(model.KindJobResult, "delivered").Add(float64(len(msgs)))
}

// retryWrite runs a write of handled messages again, with backoff, while it fails
// with a passing Redis fault (the work it records is done: waiting out the claims'
// leases would delay the flows for nothing), until it succeeds or ctx ends. The write
// must be one that a second run after a lost answer changes nothing more by (an ack,
// RouteClaimed).
func (r *router) retryWrite(ctx context.Context, db *store.DB, what string, write func() error) error {
	var bo fault.Backoff
	for {
		err := write()
		if err == nil || !fault.Transient(err) || ctx.Err() != nil {
			return err
		}
		r.m.writeRetries.Inc()
		r.log.Warn().Err(err).Uint32(obs.KeyContextID, db.ContextID).Msg(what + ": Redis unavailable; retrying")
		if !bo.Sleep(ctx) {
			return err
		}
	}
}

// releaseClaims gives back claims that a failed call may have made (its answer was
// lost, or the handling of the claimed message failed on a passing fault): their
// messages go back on their queue now rather than when their leases end.
func (r *router) releaseClaims(ctx context.Context, db *store.DB, ids []string) {
	err := r.retryWrite(ctx, db, "give back claimed messages", func() error {
		moved, err := db.ReleaseClaims(ctx, r.id, ids)
		if err == nil && len(moved) > 0 {
			r.log.Warn().Uint32(obs.KeyContextID, db.ContextID).Int("messages", len(moved)).Msg("messages claimed by a call that failed: back on their queue")
		}
		return err
	})
	if err != nil && ctx.Err() == nil {
		r.log.Error().Err(err).Uint32(obs.KeyContextID, db.ContextID).Msg("give back claimed messages (their leases bring them back)")
	}
}

// giveBack returns a claimed message whose handling failed on a passing fault to its
// queue at once (any other error leaves it to its lease).
func (r *router) giveBack(ctx context.Context, db *store.DB, cl *store.Claim, err error) {
	if fault.Transient(err) && ctx.Err() == nil {
		r.releaseClaims(ctx, db, []string{cl.ID})
	}
}

// resultEnd is what a job result tells the scheduler, read from the message's job JSON.
type resultEnd struct {
	ID       uint32          `json:"id"`
	CallerID uint32          `json:"caller_id"`
	FlowID   uint32          `json:"flow_id"`
	Attempt  uint32          `json:"attempt"`
	Status   model.JobStatus `json:"status"`
	Error    string          `json:"error"`
	Fatal    bool            `json:"fatal"`
	Origin   json.RawMessage `json:"origin"`
}

// quickResult leaves a job result of msg_out for this node's scheduler to the batch,
// read from the job JSON alone (the most common message: decoding the whole message
// was a quarter of the router's CPU). false: any other message, for handle.
func (r *router) quickResult(db *store.DB, cm *store.ClaimedMessage, b *batch) bool {
	if cm.Claim.Queue != keys.MsgOut || cm.Msg["kind"] != model.KindJobResult {
		return false
	}
	var jobs []resultEnd
	if err := json.Unmarshal([]byte(cm.Msg["job"]), &jobs); err != nil || len(jobs) == 0 {
		return false
	}
	m := resultMsg{claim: cm.Claim, ends: make([]*herov1.JobDoneRequest, 0, len(jobs))}
	// a local result's list leaves its jobs' caller and flow to the message's
	caller, _ := strconv.ParseUint(cm.Msg["caller_id"], 10, 32)
	flow, _ := strconv.ParseUint(cm.Msg["flow_id"], 10, 32)
	for _, j := range jobs {
		if len(j.Origin) > 0 && string(j.Origin) != "null" {
			return false // it ran here for another node: its result goes back there
		}
		if j.CallerID == 0 {
			j.CallerID = uint32(caller)
		}
		if j.FlowID == 0 {
			j.FlowID = uint32(flow)
		}
		m.ends = append(m.ends, &herov1.JobDoneRequest{ContextId: db.ContextID, FlowId: j.FlowID, CallerId: j.CallerID, JobId: j.ID,
			Attempt: j.Attempt, Status: string(j.Status), Error: j.Error, Fatal: j.Fatal})
	}
	b.results = append(b.results, m)
	return true
}

// handle handles one claimed message; the common cases (a job request for a local
// runner, a job result for this node's scheduler) are left to the batch.
func (r *router) handle(ctx context.Context, db *store.DB, cm *store.ClaimedMessage, b *batch) {
	cl := cm.Claim
	queue, item := cl.Queue, cl.Item
	log := r.log.With().Uint32(obs.KeyContextID, db.ContextID).Str(obs.KeyMessage, item).Logger()
	h, err := db.Message(ctx, cm)
	if err != nil {
		log.Error().Err(err).Msg("read message")
		r.giveBack(ctx, db, cl, err)
		return
	}
	m, err := db.MessageFromHash(item, h)
	if err != nil {
		log.Warn().Err(err).Msg("message unreadable; dropped from the queue")
		r.m.messages.WithLabelValues("other", "skipped").Inc()
		_ = db.Ack(ctx, cl)
		return
	}
	inbound := queue == keys.MsgIn
	switch {
	case m.Kind == model.KindJobRequest && !inbound && h["job_ids"] != "":
		// A request for jobs of a flow (one or more) that the claim could not route:
		// one request each.
		n, err := db.SplitRequest(ctx, cl, m)
		if err != nil {
			log.Error().Err(err).Msg("split job request")
			r.giveBack(ctx, db, cl, err)
			return
		}
		log.Debug().Int("jobs", n).Msg("job request split")
	case m.Kind == model.KindJobRequest && inbound:
		r.materialize(ctx, db, cl, m, log)
	case m.Kind == model.KindJobRequest:
		r.deliverJob(ctx, db, cm, m, b, log)
	case m.Kind == model.KindJobResult && inbound:
		r.applyRemoteResult(ctx, db, cl, m, log)
	case m.Kind == model.KindJobResult && len(m.Job) > 0 && m.Job[0].Origin != nil:
		r.returnResult(ctx, db, cl, m, log)
	case m.Kind == model.KindJobResult:
		// A result for this node's scheduler with a readable job went by quickResult.
		log.Warn().Msg("result message carries no readable job; dropped")
		r.m.messages.WithLabelValues(model.KindJobResult, "skipped").Inc()
		_ = db.Ack(ctx, cl)
	default:
		// chat and mail messages have no local consumer yet: they are kept, marked processed.
		_, _ = db.TxPipelined(ctx, func(p redis.Pipeliner) error {
			store.AckMessageOn(ctx, p, cl, model.MessageProcessed)
			return nil
		})
		r.m.messages.WithLabelValues("other", "skipped").Inc()
	}
}

// deliverJob puts a job request onto the queue of the runners that may take it.
func (r *router) deliverJob(ctx context.Context, db *store.DB, cm *store.ClaimedMessage, m *model.Message, b *batch, log zerolog.Logger) {
	cl := cm.Claim
	if len(m.Job) == 0 {
		r.failMessage(ctx, db, cl, nil, "message carries no job", log)
		return
	}
	j, err := db.JobFromHash(m.Job[0].CallerID, m.Job[0].ID, cm.Job) // its routing fields, read with the claim
	if err != nil {
		r.failMessage(ctx, db, cl, nil, err.Error(), log)
		return
	}
	log = log.With().Uint32(obs.KeyFlowID, j.FlowID).Uint32(obs.KeyJobID, j.ID).Logger()
	target := keys.Queue(j.QueueSuffix())
	if j.RunnerID != 0 {
		rn, err := db.LoadRunner(ctx, j.RunnerID)
		if err != nil {
			r.failMessage(ctx, db, cl, j, fmt.Sprintf("runner %d does not exist in context %d", j.RunnerID, db.ContextID), log)
			return
		}
		if !rn.Local {
			if r.gateway == nil {
				r.failMessage(ctx, db, cl, j, fmt.Sprintf("runner %d is not local and this router has no mycelium-gateway (--gateway-addr)", j.RunnerID), log)
				return
			}
			full, err := db.LoadJob(ctx, j.CallerID, j.ID) // the claim read only what routing needs
			if errors.Is(err, store.ErrNotFound) {
				r.failMessage(ctx, db, cl, j, err.Error(), log)
				return
			}
			if err != nil {
				log.Error().Err(err).Msg("load job for a remote runner")
				r.giveBack(ctx, db, cl, err)
				return
			}
			r.sendRemote(ctx, db, cl, m, full, rn, log)
			return
		}
		target = keys.PinnedQueue(j.RunnerID, j.QueueSuffix())
	} else if exec, _ := j.Handler(); exec != "" {
		served, err := db.ExecutorServed(ctx, exec)
		if err != nil {
			log.Error().Err(err).Msg("read the runners' executors")
			r.giveBack(ctx, db, cl, err)
			return
		}
		if !served {
			r.failMessage(ctx, db, cl, j, fmt.Sprintf("no runner in context %d has executor %q", db.ContextID, exec), log)
			return
		}
	} else {
		if n, _ := strconv.Atoi(cm.ScriptTypes[string(j.ScriptType)]); n <= 0 {
			r.failMessage(ctx, db, cl, j, fmt.Sprintf("no runner in context %d serves script_type %q", db.ContextID, j.ScriptType), log)
			return
		}
	}
	b.queued = append(b.queued, queuedJob{claim: cl, target: target, job: keys.Job(j.CallerID, j.ID)})
}

// failMessage ends a job request that cannot be delivered: message and job in error,
// and the scheduler told (a fatal end: no retry helps).
func (r *router) failMessage(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job, reason string, log zerolog.Logger) {
	now := time.Now()
	if j != nil {
		if err := db.SetJobStatus(ctx, j.CallerID, j.ID, model.JobError, "error", reason, "fatal", "1",
			"finished_at_us", now.UnixMicro(), "updated_at", now.Unix()); err != nil {
			log.Error().Err(err).Msg("record undeliverable job")
			r.giveBack(ctx, db, cl, err)
			return
		}
	}
	f := store.MessageFailure{Reason: reason, At: now}
	if j != nil {
		f.Event = jobFailed(j, reason)
	}
	if err := db.FailMessage(ctx, cl.Item, f); err != nil {
		log.Error().Err(err).Msg("record undeliverable job")
		r.giveBack(ctx, db, cl, err)
		return
	}
	log.Warn().Str("reason", reason).Msg("job cannot be delivered")
	if j != nil {
		if !r.reportEnd(ctx, db, cl, []*herov1.JobDoneRequest{{ContextId: db.ContextID, FlowId: j.FlowID, CallerId: j.CallerID, JobId: j.ID,
			Attempt: j.Attempt, Status: string(model.JobError), Error: reason, Fatal: true}}, log) {
			return
		}
	}
	_ = db.Ack(ctx, cl)
	r.m.messages.WithLabelValues(model.KindJobRequest, "failed").Inc()
}

// jobFailed is the event of a job the router failed.
func jobFailed(j *model.Job, reason string) *store.Event {
	return &store.Event{Type: string(model.EventJobFailed), Actor: store.ActorRouter, FlowID: j.FlowID, JobID: j.ID, CallerID: j.CallerID, Status: string(model.JobError), Detail: reason}
}

// reportEnd calls the scheduler until it answers (backing off, keeping the message's
// lease), or ctx ends. false: not reported; the message stays claimed.
func (r *router) reportEnd(ctx context.Context, db *store.DB, cl *store.Claim, ends []*herov1.JobDoneRequest, log zerolog.Logger) bool {
	backoff := 50 * time.Millisecond
	lastExtend := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.callJobsDone(cctx, ends)
		cancel()
		if err == nil {
			return true
		}
		r.m.schedulerErrs.Inc()
		log.Warn().Err(err).Dur("retry_in", backoff).Msg("report job end to the scheduler")
		if ctx.Err() != nil {
			return false
		}
		fault.Sleep(ctx, backoff)
		if backoff < 2*time.Second {
			backoff *= 2
		}
		if time.Since(lastExtend) > r.lease/3 {
			ok, err := db.ExtendLease(ctx, cl, r.lease)
			if err == nil && !ok {
				log.Warn().Msg("lost the message's lease; another router takes it")
				return false
			}
			if err == nil { // Redis away too: tried again on the next round
				lastExtend = time.Now()
			}
		}
	}
}

// callJobsDone reports ends in one JobsDone call (one JobDone each to a scheduler that
// does not know JobsDone yet).
func (r *router) callJobsDone(ctx context.Context, ends []*herov1.JobDoneRequest) error {
	if !r.noJobsDone.Load() {
		_, err := r.scheduler.JobsDone(ctx, &herov1.JobsDoneRequest{Ends: ends})
		if status.Code(err) != codes.Unimplemented {
			return err
		}
		r.noJobsDone.Store(true) // an older scheduler: one call per end
	}
	for _, e := range ends {
		if _, err := r.scheduler.JobDone(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// sweepLeases returns items of dead consumers (routers and runners alike) to their
// queues once their leases expire. A safety net: live consumers extend their leases.
// It is shared (store.SweepBusy): only the contexts of coord:busy, and one replica of
// the routers and runners sweeps a server per period.
func (r *router) sweepLeases(ctx context.Context) {
	every := r.lease / 3
	tick.Every(ctx, every, func() {
		r.store.SweepBusy(ctx, r.id, every, time.Now(), r.lease, func(id uint32, mv store.Requeued) {
			r.m.requeued.Inc()
			r.log.Warn().Uint32(obs.KeyContextID, id).Str("queue", mv.Queue).Str("item", mv.Item).Msg("lease expired; item back on its queue")
		})
	})
}

// notAllowedError refuses an inbound job from a source its context does not allow.
type notAllowedError struct{ msg string }

func (e *notAllowedError) Error() string { return e.msg }

// acceptInbound stores a message that came from another node and queues it on
// msg_in. A job request delivered twice (Mycelium may do that) is accepted once; for
// the duplicate the router acknowledges again (ackLater), in case the first ack was
// lost.
func (r *router) acceptInbound(ctx context.Context, ctxID uint32, m *model.Message, source string) (bool, error) {
	db, err := r.store.Ctx(ctxID)
	if err != nil {
		return false, err
	}
	if len(m.Job) != 1 {
		return false, fmt.Errorf("an inbound message must carry one job")
	}
	dedup := ""
	switch m.Kind {
	case model.KindJobRequest:
		if m.Job[0].Origin == nil {
			return false, fmt.Errorf("an inbound job request must name its origin")
		}
		// Whoever handed it over (the gateway, or any other caller), a job from
		// another node runs only if the context allows its source.
		c, err := r.store.LoadContext(ctx, ctxID)
		if err != nil {
			return false, err
		}
		if source == "" || !slices.Contains(c.AllowedSources, source) || m.Job[0].Origin.PK != source {
			r.log.Warn().Uint32(obs.KeyContextID, ctxID).Str("source", source).Msg("inbound job refused: its source is not in the context's allowed_sources")
			return false, &notAllowedError{fmt.Sprintf("context %d does not allow jobs from source %q", ctxID, source)}
		}
		dedup = store.InboundKey(source, m.Job[0].Origin.MsgKey)
	case model.KindJobResult:
		// A context this node has (a read: with an id beyond the Redis server's
		// databases, nothing is written before the refusal).
		if _, err := r.store.LoadContext(ctx, ctxID); err != nil {
			return false, err
		}
		dedup = store.InboundKey(source, m.OriginMsg+":result:"+strconv.FormatUint(uint64(m.Job[0].Attempt), 10))
	default:
		return false, fmt.Errorf("inbound message kind %q: want job_request or job_result", m.Kind)
	}
	m.Status = model.MessageDispatched
	_, dup, err := db.AcceptInbound(ctx, m, dedup, r.retention)
	if err != nil {
		return false, err
	}
	if o := m.Job[0].Origin; dup && m.Kind == model.KindJobRequest && (o.TakeByMs == 0 || time.Now().UnixMilli() < o.TakeByMs) {
		// In case the first acknowledgement was lost; not for a request too late to
		// be taken (dropped, as its first copy was).
		r.ackLater(ctx, ctxID, &m.Job[0], r.log)
	}
	return dup, nil
}
