package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/mycelium"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/remote"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// gateway bridges this node and its Mycelium node: it pushes envelopes for the
// router, and long-polls the node's inbox, checks each message's source, and hands
// it to the router (job requests and results) or records it (acks).
type gateway struct {
	store       *store.Store
	log         zerolog.Logger
	my          *mycelium.Client
	router      herov1.RouterClient
	pollTimeout time.Duration
	routerWait  time.Duration // how long an inbound message waits for an unavailable router
	gate        *pollGate     // the gateway's other calls go before its long poll
	lease       *lease        // makes one replica per Mycelium node the one that pops its inbox

	mu        sync.Mutex
	connected bool
	self      string // our node's public key
	lastKey   string // the key the node answered with last (checkIdentity)
	m         gatewayMetrics
}

type gatewayParams struct {
	store       *store.Store
	log         zerolog.Logger
	reg         prometheus.Registerer
	mycelium    *mycelium.Client
	router      herov1.RouterClient
	pollTimeout time.Duration
	routerWait  time.Duration
	leaseTTL    time.Duration // 0: defaultLeaseTTL
	leaseRenew  time.Duration // 0: defaultLeaseRenew
	token       string        // this replica's lease token (newToken)
	// onLease is told the lease's state ("active", "standby") and key (nil: ignored).
	onLease func(state, key string)
}

type gatewayMetrics struct {
	messages *prometheus.CounterVec
	refused  *prometheus.CounterVec
	errors   prometheus.Counter
	up       prometheus.Gauge
	// routerRetries counts deliveries retried because the router was unavailable.
	routerRetries prometheus.Counter
	// notJSON counts 200 answers to a pop whose body was not JSON (passed over).
	notJSON prometheus.Counter
	// yields counts long polls cancelled so that another call could go first.
	yields prometheus.Counter
}

// leaseSettings fills in the defaults.
func (p gatewayParams) leaseSettings() (ttl, renew time.Duration, onLease func(state, key string)) {
	ttl, renew, onLease = p.leaseTTL, p.leaseRenew, p.onLease
	if ttl == 0 {
		ttl = defaultLeaseTTL
	}
	if renew == 0 {
		renew = defaultLeaseRenew
	}
	if onLease == nil {
		onLease = func(string, string) {}
	}
	return ttl, renew, onLease
}

func newGateway(p gatewayParams) *gateway {
	f := promauto.With(p.reg)
	g := &gateway{
		store: p.store, log: p.log, my: p.mycelium, router: p.router, pollTimeout: p.pollTimeout, routerWait: p.routerWait,
		gate: newPollGate(),
		m: gatewayMetrics{
			messages: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_gateway_messages_total",
				Help: "Envelopes sent and received over Mycelium, by direction (in, out), kind and outcome."}, []string{"direction", "kind", "outcome"}),
			refused: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_gateway_refused_total",
				Help: "Inbound messages refused, by reason (source_not_allowed, unknown_context, malformed, unknown_message, wrong_source)."}, []string{"reason"}),
			errors: f.NewCounter(prometheus.CounterOpts{Name: "hero_gateway_mycelium_errors_total", Help: "Failed calls to the Mycelium node (retried with backoff)."}),
			up:     f.NewGauge(prometheus.GaugeOpts{Name: "hero_gateway_mycelium_up", Help: "1 while the Mycelium node answers, 0 otherwise."}),
			routerRetries: f.NewCounter(prometheus.CounterOpts{Name: "hero_gateway_router_retries_total",
				Help: "Deliveries of inbound messages retried because the router was unavailable."}),
			notJSON: f.NewCounter(prometheus.CounterOpts{Name: "hero_gateway_mycelium_not_json_total",
				Help: "Answers of the Mycelium node to a pop that were 200 with a body that is not JSON (logged and passed over)."}),
			yields: f.NewCounter(prometheus.CounterOpts{Name: "hero_gateway_poll_yields_total",
				Help: "Long polls of the Mycelium node cancelled so that a push, status or admin call could go first."}),
		},
	}
	ttl, renew, onLease := p.leaseSettings()
	token := p.token
	if token == "" {
		token = newToken()
	}
	g.lease = &lease{
		log: p.log, token: token, ttl: ttl, renew: renew, margin: leaseMargin(ttl), onChange: onLease,
		changed: make(chan struct{}),
		onYield: g.yieldFor,
		active: f.NewGauge(prometheus.GaugeOpts{Name: "hero_gateway_active",
			Help: "1 while this replica holds its Mycelium node's gateway lease and pops the node's inbox, 0 in standby (pushes only)."}),
		changes: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_gateway_lease_changes_total",
			Help: "Changes of this replica's hold on its Mycelium node's gateway lease, by change (acquired, lost, released)."}, []string{"change"}),
		renewal: f.NewCounter(prometheus.CounterOpts{Name: "hero_gateway_lease_renewal_errors_total",
			Help: "Renewals of the gateway lease that failed (Redis unreachable), retried until the lease's safety margin."}),
	}
	if p.store != nil {
		g.lease.rdb = p.store.G()
	}
	return g
}

// infoTimeout bounds the readiness check's call to the node.
const infoTimeout = 3 * time.Second

// check is the readiness check: the Mycelium node answers GET /api/v1/admin, with
// the key it had when the gateway started. The call goes before the gateway's own
// long poll (pollGate), so it answers at once rather than after the poll.
func (g *gateway) check(ctx context.Context) error {
	g.yield(ctx)
	leave := g.gate.enter()
	defer leave()
	ctx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	info, err := g.my.Info(ctx)
	if err != nil {
		g.setConnected(false)
		return fmt.Errorf("the Mycelium node at %s does not answer: %v", g.my.BaseURL(), err)
	}
	g.setConnected(true)
	return g.checkIdentity(info.NodePubkey)
}

// checkIdentity: a node that restarted without its key file has a new key (and
// address). Its peers still send to the old one, and list it as the allowed source
// of their contexts and as where their requests went: nothing gets through until an
// operator restores the key file or gives the peers the new key. Not ready, with
// what to do, logged once per key.
func (g *gateway) checkIdentity(pk string) error {
	g.mu.Lock()
	self, seen := g.self, g.lastKey
	g.lastKey = pk
	g.mu.Unlock()
	if self == "" || pk == self {
		return nil
	}
	err := fmt.Errorf("the Mycelium node at %s now has the key %s, not %s as when this gateway started: it restarted without its key file, with a new identity, and its peers still send to (and accept results from) the old key; restore the node's key file and restart it, or give the peers the new key (runner pubkey, allowed_sources) and restart this gateway", g.my.BaseURL(), pk, self)
	if seen != pk {
		g.log.Error().Str("public_key", self).Str("node_key", pk).Msg("the Mycelium node came back with a new identity")
	}
	return err
}

func (g *gateway) setConnected(ok bool) {
	g.mu.Lock()
	changed := g.connected != ok
	g.connected = ok
	g.mu.Unlock()
	if ok {
		g.m.up.Set(1)
	} else {
		g.m.up.Set(0)
	}
	if changed {
		if ok {
			g.log.Info().Str("mycelium", g.my.BaseURL()).Str("public_key", g.self).Msg("connected to the Mycelium node")
		} else {
			g.log.Warn().Str("mycelium", g.my.BaseURL()).Msg("lost the Mycelium node; retrying")
		}
	}
}

// busyPeek is how often the poll loop looks at the inbox (a peek with timeout 0)
// while other calls are in progress and its long poll is held back.
const busyPeek = 25 * time.Millisecond

// run connects (learning our public key), then, while this replica holds its node's
// gateway lease, pops inbound messages, until ctx ends. Connection loss is retried
// with backoff; nothing queued is lost meanwhile (messages wait in the Mycelium node;
// outbound sends fail and the router retries them). The lease is released only once
// the poll loop has stopped, so that the next holder never polls beside it.
func (g *gateway) run(ctx context.Context) error {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil && g.selfKey() == "" {
		g.yield(ctx)
		leave := g.gate.enter()
		info, err := g.my.Info(ctx)
		leave()
		if err != nil {
			g.fail(ctx, err, &backoff)
			continue
		}
		g.mu.Lock()
		g.self = info.NodePubkey
		g.mu.Unlock()
		g.setConnected(true)
	}
	if ctx.Err() != nil {
		return nil
	}
	if g.lease.rdb == nil {
		return errors.New("the gateway lease needs a store")
	}
	lctx, stopLease := context.WithCancel(context.Background())
	leaseDone := make(chan struct{})
	go func() {
		defer close(leaseDone)
		g.lease.run(lctx, g.selfKey())
	}()
	backoff = 200 * time.Millisecond
	for ctx.Err() == nil {
		term, changed := g.lease.current()
		if term == nil {
			// Standby: no inbox polling until this replica holds the lease.
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		g.step(ctx, term, &backoff)
	}
	stopLease()
	<-leaseDone
	return nil
}

// step peeks at the inbox, hands on what it found, then pops it. Its calls to the
// inbox end when the lease's term does; the hand-over to the router does not (a
// message handed on twice is recognised by the far side).
func (g *gateway) step(ctx, term context.Context, backoff *time.Duration) {
	if term.Err() != nil {
		return // the term ended since the loop looked (AfterFunc below cancels asynchronously)
	}
	tctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(term, cancel)
	defer func() {
		stop()
		cancel()
	}()
	// Peek, handle, then pop: a gateway that dies between taking a message and
	// handing it on finds the message again when it restarts. The far side of every
	// hand-over recognises a second copy (the router's inbound dedup, the ack
	// script), so at-least-once here is exactly-once in effect.
	msg, err := g.peek(tctx)
	switch {
	case tctx.Err() != nil:
		return // the lease's term or the gateway ended
	case errors.Is(err, mycelium.ErrMalformed):
		// The node works; one message could not be read (e.g. not base64): drop it.
		g.refuse(&mycelium.InboundMessage{}, "unknown", "malformed", err.Error())
		g.remove(tctx, nil)
		return
	case errors.Is(err, mycelium.ErrNotJSON):
		// The node (or something in front of it) answered nonsense: counted, logged
		// and passed over. The pop that follows takes the inbox's head; should that
		// be a readable message it is handled, not lost.
		g.m.notJSON.Inc()
		g.log.Warn().Err(err).Msg("the Mycelium node answered a pop with a body that is not JSON; passed over")
		g.remove(tctx, nil)
		return
	case err != nil:
		g.fail(tctx, err, backoff)
		return
	}
	*backoff = 200 * time.Millisecond
	g.setConnected(true)
	if msg != nil {
		g.receive(ctx, msg)
		g.remove(tctx, msg)
	}
}

// peek looks at the head of the node's inbox. With no other call in progress it
// long-polls (up to pollTimeout), and that poll is cancelled as soon as another call
// enters the gate; with calls in progress it only looks (timeout 0: on a v0.7.10 node
// that look waits for the node's lock behind those calls, then answers at once) and
// then waits for them to end, at most busyPeek. (nil, nil): nothing yet.
func (g *gateway) peek(ctx context.Context) (*mycelium.InboundMessage, error) {
	pctx, end, busy := g.gate.begin(ctx)
	if pctx == nil {
		msg, err := g.my.Pop(ctx, nil, 0, true)
		if err != nil || msg != nil {
			return msg, err
		}
		t := time.NewTimer(busyPeek)
		defer t.Stop()
		select {
		case <-busy:
		case <-t.C:
		case <-ctx.Done():
		}
		return nil, nil
	}
	defer end()
	msg, err := g.my.Pop(pctx, nil, g.pollTimeout, true)
	if err != nil && pctx.Err() != nil && ctx.Err() == nil {
		g.m.yields.Inc() // cancelled for another call: not a failure
		return nil, nil
	}
	return msg, err
}

// remove pops the message just handled (peeked is nil for one that could not be read).
// The gateway owns its node's inbox, so the head is the message it peeked; should
// another consumer have taken that one meanwhile, the message popped instead is
// handled here rather than lost (and nothing popped means that consumer took it). The
// pop is not cancelled for other calls (a pop abandoned after the node took the
// message would lose it). Its timeout is 0: a v0.7.10 node gives a pop its timeout
// only once the pop holds the node's lock, so even a pop that waits behind a push
// (or another client's long poll) looks at the inbox when its turn comes.
func (g *gateway) remove(ctx context.Context, peeked *mycelium.InboundMessage) {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		msg, err := g.my.Pop(ctx, nil, 0, false)
		switch {
		case errors.Is(err, mycelium.ErrMalformed):
			if peeked != nil { // not the message peeked: another unreadable one
				g.refuse(&mycelium.InboundMessage{}, "unknown", "malformed", err.Error())
			}
			return
		case errors.Is(err, mycelium.ErrNotJSON):
			g.m.notJSON.Inc()
			g.log.Warn().Err(err).Msg("the Mycelium node answered a pop with a body that is not JSON; passed over")
			return
		case err != nil:
			g.fail(ctx, err, &backoff)
			continue
		}
		if msg != nil && (peeked == nil || msg.ID != peeked.ID) {
			was := "" // nothing readable was peeked
			if peeked != nil {
				was = peeked.ID
			}
			g.log.Warn().Str("peeked", was).Str("popped", msg.ID).Msg("inbox head changed under the gateway; handling the popped message")
			g.receive(ctx, msg)
		}
		return
	}
}

func (g *gateway) fail(ctx context.Context, err error, backoff *time.Duration) {
	if ctx.Err() != nil {
		return
	}
	g.m.errors.Inc()
	g.setConnected(false)
	g.log.Debug().Err(err).Dur("retry_in", *backoff).Msg("mycelium call failed")
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	if *backoff < 5*time.Second {
		*backoff *= 2
	}
}

func (g *gateway) selfKey() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.self
}

// yieldHold is how long the active gateway holds back its long poll (peeking with
// timeout 0 instead) when a standby announces a push: long enough for the push to
// reach the node after its announcement.
const yieldHold = 500 * time.Millisecond

// yieldFor lets a standby's push go before this active gateway's long poll, as its
// own pushes do (pollGate).
func (g *gateway) yieldFor() {
	leave := g.gate.enter()
	time.AfterFunc(yieldHold, leave)
}

// yield asks the active replica, when this one is a standby, to let its next call
// to the node go before the active one's long poll.
func (g *gateway) yield(ctx context.Context) {
	if g.lease.rdb != nil {
		g.lease.yield(ctx)
	}
}

// send pushes an envelope to another node, ahead of the gateway's own long poll (and,
// from a standby, ahead of the active replica's).
func (g *gateway) send(ctx context.Context, dst mycelium.Destination, topic string, payload []byte, kind string) (string, error) {
	g.yield(ctx)
	leave := g.gate.enter()
	res, err := g.my.Push(ctx, dst, []byte(topic), payload, nil)
	leave()
	if err != nil {
		g.m.errors.Inc()
		g.m.messages.WithLabelValues("out", kind, "error").Inc()
		return "", err
	}
	g.m.messages.WithLabelValues("out", kind, "sent").Inc()
	g.log.Debug().Str("kind", kind).Str("to", dst.String()).Str("topic", topic).Str("transport_id", res.ID).Msg("sent")
	return res.ID, nil
}

func (g *gateway) refuse(m *mycelium.InboundMessage, kind, reason, detail string) {
	g.m.refused.WithLabelValues(reason).Inc()
	g.m.messages.WithLabelValues("in", kind, "refused").Inc()
	g.log.Warn().Str("reason", reason).Str("source", m.SrcPK).Str("source_ip", m.SrcIP).Str("topic", string(m.Topic)).Str("detail", detail).Msg("inbound message refused")
}

// receive handles one inbound message. Every refusal is logged with its reason and
// counted; the gateway keeps serving.
func (g *gateway) receive(ctx context.Context, m *mycelium.InboundMessage) {
	env, err := remote.Decode(m.Payload)
	if err != nil {
		g.refuse(m, "unknown", "malformed", err.Error())
		return
	}
	log := g.log.With().Uint32(obs.KeyContextID, env.ContextID).Str("kind", env.Kind).Str("source", m.SrcPK).Str("origin_msg", env.MsgKey).Logger()
	db, err := g.store.Ctx(env.ContextID)
	if err != nil {
		g.refuse(m, env.Kind, "unknown_context", err.Error())
		return
	}
	switch env.Kind {
	case remote.KindJobRequest:
		c, err := g.store.LoadContext(ctx, env.ContextID)
		if err != nil {
			g.refuse(m, env.Kind, "unknown_context", err.Error())
			return
		}
		if !slices.Contains(c.AllowedSources, m.SrcPK) {
			g.refuse(m, env.Kind, "source_not_allowed", fmt.Sprintf("context %d does not allow source %s", env.ContextID, m.SrcPK))
			return
		}
		msg := env.Message
		// Mycelium authenticates the source: the origin is its key, not what the payload says.
		msg.Job[0].Origin = &model.Origin{PK: m.SrcPK, ContextID: env.ContextID, MsgKey: env.MsgKey, TakeByMs: env.TakeByMs}
		res, err := g.deliver(ctx, &herov1.DeliverRequest{ContextId: env.ContextID, Message: protoconv.MessageToPB(msg), Source: m.SrcPK}, log)
		if err != nil {
			// The router refuses what it cannot take (e.g. the job conflicts); the origin's
			// ack timeout then applies its retry policy.
			g.refuse(m, env.Kind, "router_refused", err.Error())
			return
		}
		outcome := "delivered"
		if res.Duplicate {
			outcome = "duplicate"
			log.Info().Msg("duplicate job request: acknowledged again, not run twice")
		}
		g.m.messages.WithLabelValues("in", env.Kind, outcome).Inc()
	case remote.KindAck, remote.KindJobResult:
		req, err := db.LoadMessageKey(ctx, env.MsgKey)
		if nd := (*store.NoDatabaseError)(nil); errors.As(err, &nd) {
			g.refuse(m, env.Kind, "unknown_context", err.Error())
			return
		}
		if err != nil {
			g.refuse(m, env.Kind, "unknown_message", err.Error())
			return
		}
		if req.TransportDst != m.SrcPK && req.TransportDst != m.SrcIP {
			g.refuse(m, env.Kind, "wrong_source", fmt.Sprintf("%s was sent to %s, not to %s", env.MsgKey, req.TransportDst, m.SrcPK))
			return
		}
		if env.Kind == remote.KindAck {
			g.acknowledge(ctx, db, env.MsgKey, log)
			g.m.messages.WithLabelValues("in", env.Kind, "delivered").Inc()
			return
		}
		msg := env.Message
		msg.OriginMsg = env.MsgKey
		if _, err := g.deliver(ctx, &herov1.DeliverRequest{ContextId: env.ContextID, Message: protoconv.MessageToPB(msg), Source: m.SrcPK}, log); err != nil {
			g.refuse(m, env.Kind, "router_refused", err.Error())
			return
		}
		g.m.messages.WithLabelValues("in", env.Kind, "delivered").Inc()
	}
}

// deliver hands an inbound message to the local router. The message has left the
// Mycelium node already, so a router that is down or restarting (Unavailable,
// DeadlineExceeded) is retried with backoff for up to routerWait before the message is
// refused; a refusal by a working router (e.g. a conflicting job) is final.
func (g *gateway) deliver(ctx context.Context, req *herov1.DeliverRequest, log zerolog.Logger) (*herov1.DeliverResponse, error) {
	backoff := 100 * time.Millisecond
	giveUp := time.Now().Add(g.routerWait)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := g.router.Deliver(cctx, req)
		cancel()
		code := status.Code(err)
		if err == nil || (code != codes.Unavailable && code != codes.DeadlineExceeded) || ctx.Err() != nil || time.Now().After(giveUp) {
			return res, err
		}
		g.m.routerRetries.Inc()
		log.Warn().Err(err).Dur("retry_in", backoff).Msg("router unavailable; delivery retried")
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// acknowledge records that the far node queued the job of a request message.
func (g *gateway) acknowledge(ctx context.Context, db *store.DB, msgKey string, log zerolog.Logger) {
	if _, err := db.AckMessage(ctx, msgKey); err != nil {
		log.Error().Err(err).Msg("record acknowledgement")
		return
	}
	log.Debug().Msg("acknowledged")
}
