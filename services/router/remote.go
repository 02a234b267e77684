package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/remote"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Remote runners (issue: mycelium-gateway). A job pinned to a runner whose record says
// local=false goes to the gateway, which pushes it to the runner's node (its pubkey, or
// else its address) on its topic, with the time by which that node must take it (its
// take-by time: a guard before this node gives up waiting for the acknowledgement).
// That node's router drops a request that comes later, else queues it for its local
// runner and acknowledges it — unless the job's result goes back first, within
// --remote-ack-delay: a quick job costs two Mycelium messages. When the job ends, its
// router sends the result back to the origin node's key. Here: message status
// dispatched → acknowledged → processed | error, and the message's timeout,
// timeout_ack and timeout_result: a job whose acknowledgement (or result) does not
// come in time follows its retry policy.

type remoteConfig struct {
	Timeout       time.Duration
	AckTimeout    time.Duration
	ResultTimeout time.Duration
	// ResultMargin is added to a job's timeout to make its result deadline.
	ResultMargin time.Duration
	// JobTimeout stands for the timeout of a job that has none, for its result deadline.
	JobTimeout time.Duration
	// AckDelay: a job from another node is acknowledged only if its result has not
	// gone back within this (0: at once).
	AckDelay time.Duration
}

// resultLimit is how long after the acknowledgement a remote job's result may take:
// the message's timeout_result, else --remote-result-timeout, else (by default) the
// job's timeout — or --remote-job-timeout for a job without one — plus
// --remote-result-margin. A result that never arrives so ends its job with a timeout.
func (c remoteConfig) resultLimit(m *model.Message) time.Duration {
	if m.TimeoutResult > 0 {
		return time.Duration(m.TimeoutResult) * time.Second
	}
	if c.ResultTimeout > 0 {
		return c.ResultTimeout
	}
	run := c.JobTimeout
	if len(m.Job) > 0 && m.Job[0].Timeout > 0 {
		run = time.Duration(m.Job[0].Timeout) * time.Second
	}
	return run + c.ResultMargin
}

// permanent reports whether the gateway refused a message for good (too large for a
// Mycelium node, or refused by it with 400/413/415/422): sending it again cannot help.
func permanent(err error) bool { return status.Code(err) == codes.InvalidArgument }

func seconds(s uint32, def time.Duration) time.Duration {
	if s > 0 {
		return time.Duration(s) * time.Second
	}
	return def
}

// sendRemote hands a job request for a remote runner to the gateway.
func (r *router) sendRemote(ctx context.Context, db *store.DB, cl *store.Claim, m *model.Message, j *model.Job, rn *model.Runner, log zerolog.Logger) {
	// What the far side needs: the job with the flow's environment merged in (the job
	// wins) and its dependencies' results.
	job := *j
	if j.FlowID != 0 {
		if f, err := db.LoadFlow(ctx, j.FlowID); err == nil && len(f.EnvVars) > 0 {
			env := map[string]string{}
			for k, v := range f.EnvVars {
				env[k] = v
			}
			for k, v := range j.EnvVars {
				env[k] = v
			}
			job.EnvVars = env
		}
	}
	if len(j.Dependends) > 0 {
		deps, err := db.LoadJobs(ctx, j.CallerID, j.Dependends)
		if err != nil {
			log.Error().Err(err).Msg("load dependencies for a remote job")
			r.giveBack(ctx, db, cl, err) // or, for a lasting error, its lease brings it back
			return
		}
		job.DepResults = map[string]map[string]string{}
		for _, d := range deps {
			job.DepResults[strconv.FormatUint(uint64(d.ID), 10)] = d.Result
		}
	}
	out := *m
	out.Job = []model.Job{job} // the full job: the message names it only here
	if len(out.Nodes) == 0 {
		out.Nodes = []model.FlowNode{store.RequestNode(&job)}
	}
	env := &remote.Envelope{Kind: remote.KindJobRequest, ContextID: db.ContextID, MsgKey: cl.Item, Message: &out}
	dst := rn.Pubkey
	req := &herov1.GatewaySendRequest{DestinationPk: rn.Pubkey, Topic: rn.Topic}
	if dst == "" {
		dst = rn.Address
		req.DestinationIp = rn.Address
	}
	if req.Topic == "" {
		req.Topic = "runner" + strconv.FormatUint(uint64(rn.ID), 10)
	}
	limit := seconds(m.Timeout, r.remote.Timeout)
	ackLimit := seconds(m.TimeoutAck, r.remote.AckTimeout)
	deadline := time.UnixMilli(m.CreatedAtMs).Add(limit)
	backoff := 100 * time.Millisecond
	dispatched := time.Now()
	lastExtend := dispatched
	var transportID string
	for {
		// Each attempt's request carries its own take-by time: the acknowledgement's
		// deadline counts from the push that succeeds.
		var err error
		env.TakeByMs = remote.TakeBy(time.Now(), ackLimit).UnixMilli()
		if req.Envelope, err = env.Encode(); err != nil {
			r.failMessage(ctx, db, cl, j, "cannot send to remote runner: "+err.Error(), log)
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := r.gateway.Send(cctx, req)
		cancel()
		if err == nil {
			transportID = res.TransportId
			break
		}
		if ctx.Err() != nil {
			return
		}
		if permanent(err) {
			r.failMessage(ctx, db, cl, j, fmt.Sprintf("cannot send to remote runner %d: %v", rn.ID, status.Convert(err).Message()), log)
			return
		}
		if time.Now().After(deadline) {
			r.failMessage(ctx, db, cl, j, fmt.Sprintf("could not hand the job to the gateway for runner %d within %v: %v", rn.ID, limit, err), log)
			return
		}
		log.Warn().Err(err).Dur("retry_in", backoff).Msg("hand job to the gateway")
		fault.Sleep(ctx, backoff)
		if backoff < 2*time.Second {
			backoff *= 2
		}
		if time.Since(lastExtend) > r.lease/3 {
			if ok, _ := db.ExtendLease(ctx, cl, r.lease); !ok {
				return
			}
			lastExtend = time.Now()
		}
	}
	now := time.Now()
	if err := db.MessageSent(ctx, cl, transportID, dst, dispatched, now); err != nil {
		log.Error().Err(err).Msg("record sent message")
		return
	}
	// Checked at the acknowledgement's deadline or, when earlier, at the earliest the
	// result can be due (the result's limit runs from the acknowledgement, which comes
	// after now): a check that comes early is put off to the right time.
	due := min(now.Add(ackLimit).UnixMilli(), now.Add(r.remote.resultLimit(&out)).UnixMilli()) // out: with the job's timeout
	if err := r.store.AddRemoteDue(ctx, db.ContextID, cl.Item, time.UnixMilli(due)); err != nil {
		log.Error().Err(err).Msg("schedule acknowledgement check")
	}
	r.poke()
	r.m.messages.WithLabelValues(model.KindJobRequest, "sent_remote").Inc()
	log.Info().Uint32(obs.KeyRunnerID, rn.ID).Str("to", dst).Str("transport_id", transportID).Msg("job sent to a remote runner")
}

func (r *router) poke() {
	select {
	case r.wakeDue <- struct{}{}:
	default:
	}
}

// materialize takes a job request from another node: the job is written here and
// queued for the local runner, and the origin gets an acknowledgement (ackLater). A
// request that comes after its take-by time is dropped: its origin has given up on it.
func (r *router) materialize(ctx context.Context, db *store.DB, cl *store.Claim, m *model.Message, log zerolog.Logger) {
	j := m.Job[0]
	log = log.With().Uint32(obs.KeyJobID, j.ID).Str("origin", j.Origin.PK).Logger()
	if r.tooLate(ctx, db, cl, &j, log) {
		return
	}
	target := keys.Queue(j.QueueSuffix())
	if j.RunnerID != 0 {
		// The origin's runner id: served here by the local runner of that id, if any.
		if rn, err := db.LoadRunner(ctx, j.RunnerID); err == nil && rn.Local {
			target = keys.PinnedQueue(j.RunnerID, j.QueueSuffix())
		}
	}
	if target == keys.Queue(j.QueueSuffix()) {
		served, err := db.ScriptTypeServed(ctx, j.ScriptType)
		what := fmt.Sprintf("serves script_type %q", j.ScriptType)
		if exec, _ := j.Handler(); exec != "" {
			served, err = db.ExecutorServed(ctx, exec)
			what = fmt.Sprintf("has executor %q", exec)
		}
		if err == nil && !served {
			reason := fmt.Sprintf("no runner of context %d on this node %s", db.ContextID, what)
			j.Status, j.Error, j.Fatal = model.JobError, reason, true
			r.sendResult(ctx, &j, log)
			_ = db.Ack(ctx, cl)
			log.Warn().Msg(reason)
			return
		}
	}
	if _, err := db.MaterializeJob(ctx, &j); err != nil {
		log.Warn().Err(err).Msg("cannot take the remote job")
		j.Status, j.Error, j.Fatal = model.JobError, err.Error(), true
		r.sendResult(ctx, &j, log)
		_ = db.Ack(ctx, cl)
		return
	}
	_, err := db.TxPipelined(ctx, func(p redis.Pipeliner) error {
		store.AckMessageOn(ctx, p, cl, model.MessageAcknowledged)
		store.EnqueueOn(ctx, p, db.ContextID, target, keys.Job(j.CallerID, j.ID))
		return nil
	})
	if err != nil {
		log.Error().Err(err).Msg("queue remote job")
		return
	}
	r.ackLater(ctx, db.ContextID, &j, log)
	r.m.messages.WithLabelValues(model.KindJobRequest, "delivered_remote").Inc()
	log.Info().Str("queue", target).Msg("job from another node queued")
}

// tooLate drops, with its reason, a job request that came after its take-by time (a
// node back from a partition or a restart: Mycelium delivers for 5 minutes). Its
// origin has given up waiting for the acknowledgement and retried or failed the job
// itself: run here, its work would run twice, or after its origin called it failed.
func (r *router) tooLate(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job, log zerolog.Logger) bool {
	o := j.Origin
	now := time.Now()
	if o.TakeByMs == 0 || now.UnixMilli() < o.TakeByMs {
		return false
	}
	takeBy := time.UnixMilli(o.TakeByMs)
	reason := fmt.Sprintf("job request from node %s came %v after its take-by time (%s): its origin has given up waiting for the acknowledgement; dropped, not run",
		o.PK, now.Sub(takeBy).Round(time.Millisecond), takeBy.UTC().Format(time.RFC3339Nano))
	if err := db.FailMessage(ctx, cl.Item, store.MessageFailure{Reason: reason, At: now, Release: cl}); err != nil {
		log.Error().Err(err).Msg("record a late job request")
		r.giveBack(ctx, db, cl, err)
		return true
	}
	log.Warn().Str("reason", reason).Msg("late job request dropped")
	r.m.messages.WithLabelValues(model.KindJobRequest, "too_late").Inc()
	return true
}

// ackLater arranges the acknowledgement of a job from another node, queued here: it
// goes to the origin after --remote-ack-delay, or at the request's take-by time if
// that is sooner, unless the job's result has gone back first (returnResult cancels
// it): a job that ends quickly costs its origin two messages, not three. The
// schedule is kept in Redis (coord:remote_due), so a router that restarts sends it.
// An origin that set no take-by time (an older node) is acknowledged at once: its
// acknowledgement timeout is unknown here.
func (r *router) ackLater(ctx context.Context, ctxID uint32, j *model.Job, log zerolog.Logger) {
	o := j.Origin
	if r.remote.AckDelay <= 0 || o.TakeByMs == 0 {
		_ = r.sendAck(ctx, o, log)
		return
	}
	at := time.UnixMilli(min(time.Now().Add(r.remote.AckDelay).UnixMilli(), o.TakeByMs))
	if err := r.store.AddAckDue(ctx, ctxID, keys.Job(j.CallerID, j.ID), at); err != nil {
		log.Warn().Err(err).Msg("schedule the acknowledgement; sending it now")
		_ = r.sendAck(ctx, o, log)
		return
	}
	r.poke()
}

// dueAck sends the acknowledgement of a job from another node whose result has not
// gone back within --remote-ack-delay; one that cannot be sent is tried again every
// second until the request's take-by time.
func (r *router) dueAck(ctx context.Context, it store.RemoteDue) {
	db, err := r.store.Ctx(it.ContextID)
	if err != nil {
		return
	}
	caller, id, err := keys.ParseJobKey(it.JobKey)
	if err != nil {
		return
	}
	j, err := db.LoadJob(ctx, caller, id)
	if err != nil || j.Origin == nil {
		return // gone (deleted, expired): nobody waits for it
	}
	log := r.log.With().Uint32(obs.KeyContextID, it.ContextID).Uint32(obs.KeyJobID, id).Str("origin", j.Origin.PK).Logger()
	if err := r.sendAck(ctx, j.Origin, log); err != nil && time.Now().UnixMilli() < j.Origin.TakeByMs {
		_ = r.store.AddAckDue(ctx, it.ContextID, it.JobKey, time.Now().Add(time.Second))
	}
}

// sendAck tells the origin node its job is queued here (a lost ack costs the origin a
// retry after its ack timeout).
func (r *router) sendAck(ctx context.Context, o *model.Origin, log zerolog.Logger) error {
	env := &remote.Envelope{Kind: remote.KindAck, ContextID: o.ContextID, MsgKey: o.MsgKey}
	payload, err := env.Encode()
	if err != nil || r.gateway == nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.gateway.Send(cctx, &herov1.GatewaySendRequest{DestinationPk: o.PK, Envelope: payload}); err != nil {
		log.Warn().Err(err).Msg("send acknowledgement")
		return err
	}
	r.m.messages.WithLabelValues(remote.KindAck, "sent_remote").Inc()
	return nil
}

// sendResult pushes a job's end to its origin node, retrying until the gateway takes
// it (or ctx ends).
func (r *router) sendResult(ctx context.Context, j *model.Job, log zerolog.Logger) bool {
	if r.gateway == nil {
		log.Error().Msg("a job from another node ended but this router has no gateway to return its result")
		return false
	}
	res := *j
	res.Script, res.DepResults = "", nil
	env := &remote.Envelope{Kind: remote.KindJobResult, ContextID: j.Origin.ContextID, MsgKey: j.Origin.MsgKey,
		Message: &model.Message{CallerID: j.CallerID, ContextID: j.Origin.ContextID, MessageType: model.MessageTypeJob,
			MessageFormatType: model.FormatText, Kind: model.KindJobResult, FlowID: j.FlowID, Job: []model.Job{res},
			Message: "result of job " + model.JobRef{ContextID: j.Origin.ContextID, CallerID: j.CallerID, ID: j.ID}.String()}}
	payload, err := env.Encode()
	if err != nil {
		// Too large for Mycelium (a huge result map): the origin learns that the job
		// ended and why its result could not come back, rather than waiting for ever.
		payload, err = r.shrunkResult(env, err.Error())
		if err != nil {
			log.Error().Err(err).Msg("encode result")
			return false
		}
	}
	backoff := 100 * time.Millisecond
	shrunk := false
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := r.gateway.Send(cctx, &herov1.GatewaySendRequest{DestinationPk: j.Origin.PK, Envelope: payload})
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if permanent(err) {
			if shrunk {
				log.Error().Err(err).Msg("the gateway refuses even the shortened result; the origin's result timeout applies")
				return true
			}
			log.Warn().Err(err).Msg("the gateway refuses the result; sending a shortened one")
			if payload, err = r.shrunkResult(env, status.Convert(err).Message()); err != nil {
				log.Error().Err(err).Msg("encode result")
				return false
			}
			shrunk = true
			continue
		}
		log.Warn().Err(err).Dur("retry_in", backoff).Msg("return result to the origin node")
		fault.Sleep(ctx, backoff)
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

// shrunkResult is a result envelope without the job's result map and output, ending
// the job in error with the reason its result could not travel.
func (r *router) shrunkResult(env *remote.Envelope, reason string) ([]byte, error) {
	e := *env
	m := *env.Message
	j := m.Job[0]
	j.Result, j.Error = nil, "the job ended ("+string(j.Status)+") but its result could not be returned over Mycelium: "+reason
	j.Status, j.Fatal = model.JobError, true
	m.Job = []model.Job{j}
	e.Message = &m
	return e.Encode()
}

// returnResult: a job run here for another node ended; its result goes back.
func (r *router) returnResult(ctx context.Context, db *store.DB, cl *store.Claim, m *model.Message, log zerolog.Logger) {
	j := m.Job[0]
	log = log.With().Uint32(obs.KeyJobID, j.ID).Str("origin", j.Origin.PK).Logger()
	if !r.sendResult(ctx, &j, log) {
		return // stays claimed
	}
	// The result answers for the acknowledgement, if that has not gone yet.
	if err := r.store.CancelAckDue(ctx, db.ContextID, keys.Job(j.CallerID, j.ID)); err != nil {
		log.Warn().Err(err).Msg("cancel the pending acknowledgement (it goes too, needlessly)")
	}
	_, err := db.TxPipelined(ctx, func(p redis.Pipeliner) error {
		store.AckMessageOn(ctx, p, cl, model.MessageProcessed)
		return nil
	})
	if err != nil {
		log.Error().Err(err).Msg("ack returned result")
		return
	}
	// The job ran for another node: kept here for the retention, then removed.
	if r.retention > 0 {
		_ = r.store.ExpireAt(ctx, db.ContextID, fmt.Sprintf("job:%d:%d", j.CallerID, j.ID), time.Now().Add(r.retention))
	}
	r.m.messages.WithLabelValues(model.KindJobResult, "returned").Inc()
	log.Info().Str("status", string(j.Status)).Msg("result returned to the origin node")
}

// applyRemoteResult: the end of a job that ran on another node. It is written into
// the job here (for the attempt this node waits for) and reported to the scheduler.
func (r *router) applyRemoteResult(ctx context.Context, db *store.DB, cl *store.Claim, m *model.Message, log zerolog.Logger) {
	j := m.Job[0]
	log = log.With().Uint32(obs.KeyJobID, j.ID).Str("request", m.OriginMsg).Logger()
	req, err := db.LoadMessageKey(ctx, m.OriginMsg)
	if err != nil {
		log.Warn().Err(err).Msg("result for an unknown request; dropped")
		_ = db.Ack(ctx, cl)
		return
	}
	applied, err := db.ApplyRemoteResult(ctx, &j, "remote:"+req.TransportDst)
	if err != nil {
		log.Error().Err(err).Msg("record remote result")
		return
	}
	if !applied {
		// A late result of an attempt the origin gave up on (or a second copy).
		log.Info().Uint32("attempt", j.Attempt).Msg("stale remote result ignored")
		_ = db.Ack(ctx, cl)
		return
	}
	done := &herov1.JobDoneRequest{ContextId: db.ContextID, FlowId: j.FlowID, CallerId: j.CallerID, JobId: j.ID,
		Attempt: max(j.Attempt, 1), Status: string(j.Status), Error: j.Error, Fatal: j.Fatal}
	if !r.reportEnd(ctx, db, cl, []*herov1.JobDoneRequest{done}, log) {
		return
	}
	if err := db.ResultDelivered(ctx, m.OriginMsg, cl, time.Now()); err != nil {
		log.Error().Err(err).Msg("ack remote result")
		return
	}
	r.m.messages.WithLabelValues(model.KindJobResult, "delivered_remote").Inc()
	log.Info().Str("status", string(j.Status)).Msg("remote job ended")
}

// remoteDueLoop checks remote requests whose acknowledgement or result is due.
func (r *router) remoteDueLoop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wakeDue:
		case <-timer.C:
			r.checkRemoteDue(ctx)
		}
		wait := 30 * time.Second // a safety net; the timer follows the earliest deadline
		if next, err := r.store.NextRemoteDue(ctx); err == nil && !next.IsZero() {
			wait = time.Until(next)
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

func (r *router) checkRemoteDue(ctx context.Context) {
	items, err := r.store.PopRemoteDue(ctx, time.Now(), 100)
	if err != nil {
		return
	}
	for _, it := range items {
		if it.Ack {
			r.dueAck(ctx, it)
			continue
		}
		db, err := r.store.Ctx(it.ContextID)
		if err != nil {
			continue
		}
		m, err := db.LoadMessageKey(ctx, it.MsgKey)
		if err != nil || len(m.Job) == 0 {
			continue
		}
		log := r.log.With().Uint32(obs.KeyContextID, it.ContextID).Str(obs.KeyMessage, it.MsgKey).Uint32(obs.KeyJobID, m.Job[0].ID).Logger()
		var reason string
		switch m.Status {
		case model.MessageDispatched:
			if m.SentAtMs > 0 {
				if due := time.UnixMilli(m.SentAtMs).Add(seconds(m.TimeoutAck, r.remote.AckTimeout)); time.Now().Before(due) {
					_ = r.store.AddRemoteDue(ctx, it.ContextID, it.MsgKey, due)
					continue
				}
			}
			reason = fmt.Sprintf("no acknowledgement from the remote runner (%s) within %v", m.TransportDst, seconds(m.TimeoutAck, r.remote.AckTimeout))
		case model.MessageAcknowledged:
			limit := r.remote.resultLimit(m)
			due := time.UnixMilli(m.AckedAtMs).Add(limit)
			if time.Now().Before(due) {
				_ = r.store.AddRemoteDue(ctx, it.ContextID, it.MsgKey, due)
				continue
			}
			reason = fmt.Sprintf("no result from the remote runner (%s) within %v", m.TransportDst, limit)
		default:
			continue // processed or failed already
		}
		r.failRemote(ctx, db, m, it.MsgKey, reason, log)
	}
	if len(items) == 100 {
		r.poke()
	}
}

// failRemote ends a remote attempt that timed out: message error, job error, and the
// scheduler told (not fatal: the job's retry policy applies).
func (r *router) failRemote(ctx context.Context, db *store.DB, m *model.Message, msgKey, reason string, log zerolog.Logger) {
	j := m.Job[0]
	cur, err := db.LoadJob(ctx, j.CallerID, j.ID)
	if err != nil || cur.Status.Terminal() {
		return
	}
	now := time.Now()
	fail := j
	fail.Status, fail.Error, fail.Attempt, fail.FinishedAt, fail.FinishedAtMs, fail.FinishedAtUs = model.JobError, reason, cur.Attempt, now.Unix(), now.UnixMilli(), now.UnixMicro()
	if applied, err := db.ApplyRemoteResult(ctx, &fail, "remote:"+m.TransportDst); err != nil || !applied {
		return
	}
	_ = db.FailMessage(ctx, msgKey, store.MessageFailure{Reason: reason, At: now, Event: jobFailed(&j, reason)})
	log.Warn().Str("reason", reason).Msg("remote job timed out")
	r.m.messages.WithLabelValues(model.KindJobRequest, "remote_timeout").Inc()
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := r.scheduler.JobDone(cctx, &herov1.JobDoneRequest{ContextId: db.ContextID, FlowId: j.FlowID, CallerId: j.CallerID, JobId: j.ID,
			Attempt: cur.Attempt, Status: string(model.JobError), Error: reason})
		cancel()
		if err == nil {
			return
		}
		r.m.schedulerErrs.Inc()
		fault.Sleep(ctx, time.Second)
	}
}
