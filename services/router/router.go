package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/store"
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
	remote    remoteConfig
	retention time.Duration
	wakeDue   chan struct{}
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
			handling: f.NewHistogram(prometheus.HistogramOpts{Name: "hero_router_message_handling_seconds", Help: "Time to handle one message.",
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

// recover hands back what this router held before a restart.
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
		key, token, err := r.store.WaitWake(ctx, 5*time.Second, keys.WakeMsgOut, keys.WakeMsgIn)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Error().Err(err).Msg("wait for messages")
				sleep(ctx, time.Second)
			}
			continue
		}
		if key == "" {
			// Idle: a safety net for wake tokens lost when a router died between
			// taking a token and claiming its message.
			if r.idleSweep.TryLock() {
				r.drainAll(ctx)
				r.idleSweep.Unlock()
			}
			continue
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
		r.drainOne(ctx, uint32(ctxID), queue)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// drainAll handles every message waiting in any context's msg_out and msg_in, with
// or without a wake token.
func (r *router) drainAll(ctx context.Context) {
	ids, err := r.store.ContextIDs(ctx)
	if err != nil {
		return
	}
	for _, id := range ids {
		db, err := r.store.Ctx(id)
		if err != nil {
			continue
		}
		for _, q := range []string{keys.MsgOut, keys.MsgIn} {
			n, err := db.QueueLen(ctx, q)
			for i := int64(0); err == nil && i < n && ctx.Err() == nil; i++ {
				r.drainOne(ctx, id, q)
			}
		}
	}
}

// drainOne claims one message of a context's queue and handles it.
func (r *router) drainOne(ctx context.Context, ctxID uint32, queue string) {
	db, err := r.store.Ctx(ctxID)
	if err != nil {
		r.log.Warn().Err(err).Uint32(obs.KeyContextID, ctxID).Msg("wake-up for an unusable context")
		return
	}
	start := time.Now()
	cm, err := db.ClaimMessage(ctx, queue, r.id, r.lease)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error().Err(err).Uint32(obs.KeyContextID, ctxID).Msg("claim message")
		}
		return
	}
	if cm == nil {
		return // another worker took it (a sweep's extra token)
	}
	r.handle(ctx, db, cm)
	r.m.handling.Observe(time.Since(start).Seconds())
}

func (r *router) handle(ctx context.Context, db *store.DB, cm *store.ClaimedMessage) {
	cl := cm.Claim
	queue, item := cl.Queue, cl.Item
	log := r.log.With().Uint32(obs.KeyContextID, db.ContextID).Str(obs.KeyMessage, item).Logger()
	m, err := db.MessageFromHash(item, cm.Msg)
	if err != nil {
		log.Warn().Err(err).Msg("message unreadable; dropped from the queue")
		r.m.messages.WithLabelValues("other", "skipped").Inc()
		_ = db.Ack(ctx, cl)
		return
	}
	inbound := queue == keys.MsgIn
	switch {
	case m.Kind == model.KindJobRequest && inbound:
		r.materialize(ctx, db, cl, m, log)
	case m.Kind == model.KindJobRequest:
		r.deliverJob(ctx, db, cm, m, log)
	case m.Kind == model.KindJobResult && inbound:
		r.applyRemoteResult(ctx, db, cl, m, log)
	case m.Kind == model.KindJobResult && len(m.Job) > 0 && m.Job[0].Origin != nil:
		r.returnResult(ctx, db, cl, m, log)
	case m.Kind == model.KindJobResult:
		r.deliverResult(ctx, db, cl, m, log)
	default:
		// chat and mail messages have no local consumer yet: they are kept, marked processed.
		_, _ = db.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, item, "status", string(model.MessageProcessed), "updated_at", time.Now().Unix())
			store.AckOn(ctx, p, cl)
			return nil
		})
		r.m.messages.WithLabelValues("other", "skipped").Inc()
	}
}

// deliverJob puts a job request onto the queue of the runners that may take it.
func (r *router) deliverJob(ctx context.Context, db *store.DB, cm *store.ClaimedMessage, m *model.Message, log zerolog.Logger) {
	cl := cm.Claim
	if len(m.Job) == 0 {
		r.failMessage(ctx, db, cl, nil, "message carries no job", log)
		return
	}
	j, err := db.JobFromHash(m.Job[0].CallerID, m.Job[0].ID, cm.Job) // read with the claim
	if err != nil {
		r.failMessage(ctx, db, cl, nil, err.Error(), log)
		return
	}
	log = log.With().Uint32(obs.KeyFlowID, j.FlowID).Uint32(obs.KeyJobID, j.ID).Logger()
	target := keys.Queue(j.ScriptType.QueueSuffix())
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
			r.sendRemote(ctx, db, cl, m, j, rn, log)
			return
		}
		target = keys.PinnedQueue(j.RunnerID, j.ScriptType.QueueSuffix())
	} else {
		if n, _ := strconv.Atoi(cm.ScriptTypes[string(j.ScriptType)]); n <= 0 {
			r.failMessage(ctx, db, cl, j, fmt.Sprintf("no runner in context %d serves script_type %q", db.ContextID, j.ScriptType), log)
			return
		}
	}
	now := time.Now().Unix()
	_, err = db.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, cl.Item, "status", string(model.MessageAcknowledged), "updated_at", now)
		store.AckOn(ctx, p, cl)
		store.EnqueueOn(ctx, p, db.ContextID, target, keys.Job(j.CallerID, j.ID))
		return nil
	})
	if err != nil {
		log.Error().Err(err).Msg("enqueue job")
		return
	}
	r.m.messages.WithLabelValues(model.KindJobRequest, "delivered").Inc()
	log.Debug().Str("queue", target).Msg("job queued")
}

// failMessage ends a job request that cannot be delivered: message and job in error,
// and the scheduler told (a fatal end: no retry helps).
func (r *router) failMessage(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job, reason string, log zerolog.Logger) {
	now := time.Now()
	if j != nil {
		if err := db.SetJobStatus(ctx, j.CallerID, j.ID, model.JobError, "error", reason, "fatal", "1",
			"finished_at", now.Unix(), "finished_at_ms", now.UnixMilli(), "updated_at", now.Unix()); err != nil {
			log.Error().Err(err).Msg("record undeliverable job")
			return
		}
	}
	_, err := db.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, cl.Item, "status", string(model.MessageError), "error", reason, "updated_at", now.Unix())
		if j != nil {
			store.AddEvent(ctx, p, &store.Event{Type: "job.failed", Actor: store.ActorRouter, FlowID: j.FlowID, JobID: j.ID, CallerID: j.CallerID, Status: string(model.JobError), Detail: reason})
		}
		return nil
	})
	if err != nil {
		log.Error().Err(err).Msg("record undeliverable job")
		return
	}
	log.Warn().Str("reason", reason).Msg("job cannot be delivered")
	if j != nil {
		if !r.reportEnd(ctx, db, cl, &herov1.JobDoneRequest{ContextId: db.ContextID, FlowId: j.FlowID, CallerId: j.CallerID, JobId: j.ID,
			Attempt: j.Attempt, Status: string(model.JobError), Error: reason, Fatal: true}, log) {
			return
		}
	}
	_ = db.Ack(ctx, cl)
	r.m.messages.WithLabelValues(model.KindJobRequest, "failed").Inc()
}

// deliverResult hands a finished job to the scheduler.
func (r *router) deliverResult(ctx context.Context, db *store.DB, cl *store.Claim, m *model.Message, log zerolog.Logger) {
	if len(m.Job) == 0 {
		log.Warn().Msg("result message carries no job; dropped")
		_ = db.Ack(ctx, cl)
		return
	}
	j := m.Job[0]
	req := &herov1.JobDoneRequest{ContextId: db.ContextID, FlowId: j.FlowID, CallerId: j.CallerID, JobId: j.ID,
		Attempt: j.Attempt, Status: string(j.Status), Error: j.Error, Fatal: j.Fatal}
	if !r.reportEnd(ctx, db, cl, req, log) {
		return
	}
	_, err := db.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, cl.Item, "status", string(model.MessageProcessed), "updated_at", time.Now().Unix())
		store.AckOn(ctx, p, cl)
		return nil
	})
	if err != nil {
		log.Error().Err(err).Msg("ack result message")
		return
	}
	r.m.messages.WithLabelValues(model.KindJobResult, "delivered").Inc()
}

// reportEnd calls the scheduler until it answers (backing off, keeping the message's
// lease), or ctx ends. false: not reported; the message stays claimed.
func (r *router) reportEnd(ctx context.Context, db *store.DB, cl *store.Claim, req *herov1.JobDoneRequest, log zerolog.Logger) bool {
	backoff := 50 * time.Millisecond
	lastExtend := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := r.scheduler.JobDone(cctx, req)
		cancel()
		if err == nil {
			return true
		}
		r.m.schedulerErrs.Inc()
		log.Warn().Err(err).Dur("retry_in", backoff).Msg("report job end to the scheduler")
		if ctx.Err() != nil {
			return false
		}
		sleep(ctx, backoff)
		if backoff < 2*time.Second {
			backoff *= 2
		}
		if time.Since(lastExtend) > r.lease/3 {
			if ok, _ := db.ExtendLease(ctx, cl, r.lease); !ok {
				log.Warn().Msg("lost the message's lease; another router takes it")
				return false
			}
			lastExtend = time.Now()
		}
	}
}

// sweepLeases returns items of dead consumers (routers and runners alike) to their
// queues once their leases expire. A safety net: live consumers extend their leases.
func (r *router) sweepLeases(ctx context.Context) {
	t := time.NewTicker(r.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ids, err := r.store.ContextIDs(ctx)
		if err != nil {
			continue
		}
		r.store.SweepLeases(ctx, ids, time.Now(), func(id uint32, mv store.Requeued) {
			r.m.requeued.Inc()
			r.log.Warn().Uint32(obs.KeyContextID, id).Str("queue", mv.Queue).Str("item", mv.Item).Msg("lease expired; item back on its queue")
		})
	}
}

// acceptInbound stores a message that came from another node and queues it on
// msg_in. A job request delivered twice (Mycelium may do that) is accepted once; for
// the duplicate the router acknowledges again, in case the first ack was lost.
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
		dedup = store.InboundKey(source, m.Job[0].Origin.MsgKey)
	case model.KindJobResult:
		dedup = store.InboundKey(source, m.OriginMsg+":result:"+strconv.FormatUint(uint64(m.Job[0].Attempt), 10))
	default:
		return false, fmt.Errorf("inbound message kind %q: want job_request or job_result", m.Kind)
	}
	m.Status = model.MessageDispatched
	_, dup, err := db.AcceptInbound(ctx, m, dedup, r.retention)
	if err != nil {
		return false, err
	}
	if dup && m.Kind == model.KindJobRequest {
		r.sendAck(ctx, m.Job[0].Origin, r.log)
	}
	return dup, nil
}
