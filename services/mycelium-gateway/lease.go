package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/store"
)

// Lease defaults (--lease-ttl, --lease-renew).
const (
	defaultLeaseTTL   = 10 * time.Second
	defaultLeaseRenew = 3 * time.Second
	// releaseTimeout bounds the compare-and-delete of a clean shutdown.
	releaseTimeout = 2 * time.Second
	// renewRetry is how soon a renewal that failed (Redis unreachable) is tried again.
	renewRetry = 500 * time.Millisecond
)

// leaseMargin is how long before its lease could expire in Redis a gateway stops
// using its node's inbox when renewals fail: a fifth of the lease. It covers the time
// the node takes to drop the requests the gateway abandons then: its poll, and a pop
// removing a message already handed on (timeout 0; it waits only for the node's
// lock, and is abandoned too when the lease's term ends).
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// lease makes one gateway replica per Mycelium node the active one: the only one
// that polls and pops the node's inbox. The lease is the key coord:gateway:<node's
// public key> in DB 0 of the primary Redis, set with NX and a TTL to this replica's
// token, renewed by a compare-and-extend every renew interval, and deleted by a
// compare-and-delete on a clean shutdown, which also publishes on the channel of the
// same name. Every replica serves the router's Send calls (a push is safe from any);
// a standby does not touch the inbox. It tries again when the holder announces its
// release, and otherwise when the key's remaining TTL has run out (a holder killed
// with SIGKILL announces nothing): it takes over at most a lease after the holder's
// last renewal.
//
// The holder stops using the inbox (term ends) when a renewal finds the key gone or
// another's, or when renewals have failed until leaseMargin before the lease could
// have expired in Redis (the expiry is counted from when the last successful renewal
// was sent, so it is never later than Redis's own).
type lease struct {
	rdb    *redis.Client
	log    zerolog.Logger
	token  string
	ttl    time.Duration
	renew  time.Duration
	margin time.Duration
	// onChange is told the state: "active", "standby" (called with the lease's key).
	onChange func(state, key string)
	// onYield is called, while this replica is active, when another replica is about
	// to push through the node (its push would otherwise wait behind this one's poll).
	onYield func()

	active  prometheus.Gauge
	changes *prometheus.CounterVec
	renewal prometheus.Counter

	mu      sync.Mutex
	pk      string          // the node's public key, once known
	term    context.Context // non-nil while this replica holds the lease; done when that ends
	changed chan struct{}   // closed and replaced whenever term changes
}

// newToken names this replica's hold on a lease: host, process and a random part
// (a restarted process never mistakes its predecessor's lease for its own).
func newToken() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), rand.Text())
}

// current returns the context of this replica's hold on the lease (nil in standby),
// which ends when the hold does, and a channel closed at the next change.
func (l *lease) current() (context.Context, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term, l.changed
}

func (l *lease) set(term context.Context) {
	l.mu.Lock()
	l.term = term
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// yield asks the holder to stop its long poll for a moment (yieldHold), so that
// this standby's call to the node does not wait for the node's lock behind it (a
// v0.7.10 node holds its lock for a whole long poll). Best effort: without it the
// call still goes through, after the poll.
func (l *lease) yield(ctx context.Context) {
	l.mu.Lock()
	pk, active := l.pk, l.term != nil
	l.mu.Unlock()
	if active {
		return
	}
	if err := l.rdb.Publish(ctx, keys.GatewayYield, pk).Err(); err != nil {
		l.log.Debug().Err(err).Msg("could not ask the active gateway to yield; calling the node anyway")
	}
}

// listen passes the lease's announcements on: a release to released (standbys try
// at once), a yield for this node (or any node: a standby that does not know its
// node's key yet) to onYield while this replica is active.
func (l *lease) listen(msgs <-chan *redis.Message, pk, key string, released chan<- struct{}) {
	for m := range msgs {
		switch m.Channel {
		case key:
			select {
			case released <- struct{}{}:
			default:
			}
		case keys.GatewayYield:
			if term, _ := l.current(); term != nil && l.onYield != nil && (m.Payload == "" || m.Payload == pk) {
				l.onYield()
			}
		}
	}
}

// The lease's compare-and-set steps are lib/store's (lua/gateway_lease_*.lua, called
// through store.GatewayLease*), so that supervisor-daemon, which alone loads the
// store's Redis functions, ships them too.

// run holds or waits for the lease of the node whose public key is pk until ctx
// ends. The caller ends ctx only once it has stopped using the inbox: a lease held
// then is released (compare-and-delete) so that a standby takes over at once.
func (l *lease) run(ctx context.Context, pk string) {
	key := keys.GatewayLease(pk)
	l.mu.Lock()
	l.pk = pk
	l.mu.Unlock()
	l.onChange("standby", key)
	sub := l.rdb.Subscribe(ctx, key, keys.GatewayYield)
	released := make(chan struct{}, 1)
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		l.listen(sub.Channel(), pk, key, released)
	}()
	defer func() {
		_ = sub.Close() // closes sub.Channel(): listen returns
		<-listening
	}()
	backoff := 200 * time.Millisecond
	waiting := false
	for ctx.Err() == nil {
		sent := time.Now()
		held, pttl, err := store.GatewayLeaseAcquire(ctx, l.rdb, key, l.token, l.ttl)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.log.Warn().Err(err).Str("lease_key", key).Dur("retry_in", backoff).Msg("gateway lease: cannot reach Redis; retrying")
			if !fault.Sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		if held {
			waiting = false
			l.hold(ctx, key, sent)
			continue
		}
		// Standby: another replica holds the lease. Wait for its release, or for the
		// key's remaining TTL as the safety net (a holder killed announces nothing).
		wait := l.ttl
		if pttl > 0 && time.Duration(pttl)*time.Millisecond < l.ttl {
			wait = time.Duration(pttl) * time.Millisecond
		} else if pttl == -2 {
			wait = 0 // expired between SET and PTTL: try again at once
		}
		if !waiting {
			waiting = true
			l.log.Info().Str("lease_key", key).Dur("holder_ttl", wait).Msg("gateway lease held by another replica: standby (pushes only, no inbox polling)")
		}
		t := time.NewTimer(wait + 5*time.Millisecond)
		select {
		case <-ctx.Done():
		case <-released:
		case <-t.C:
		}
		t.Stop()
	}
}

// hold keeps the lease acquired by the call sent at sent, renewing it, until it is
// lost or ctx ends (then it is released).
func (l *lease) hold(ctx context.Context, key string, sent time.Time) {
	term, end := context.WithCancel(context.Background())
	until := sent.Add(l.ttl - l.margin) // this replica uses the inbox until then at most
	l.set(term)
	l.active.Set(1)
	l.changes.WithLabelValues("acquired").Inc()
	l.onChange("active", key)
	l.log.Info().Str("lease_key", key).Str("token", l.token).Dur("lease_ttl", l.ttl).Msg("gateway lease acquired: active, polling the node's inbox")
	stop := func(change, reason string) {
		end()
		l.set(nil)
		l.active.Set(0)
		l.changes.WithLabelValues(change).Inc()
		l.onChange("standby", key)
		ev := l.log.Info()
		if change == "lost" {
			ev = l.log.Warn()
		}
		ev.Str("lease_key", key).Str("reason", reason).Msg("gateway lease " + change + ": stopped polling the node's inbox")
	}
	expiry := time.NewTimer(time.Until(until))
	defer expiry.Stop()
	next := time.NewTimer(l.renew)
	defer next.Stop()
	// Renewals run beside this loop, so that a Redis that stops answering (whose
	// calls block until their read timeouts and retries) cannot hold back the expiry.
	type renewal struct {
		at   time.Time
		held bool
		err  error
	}
	results := make(chan renewal, 1)
	inflight := false
	for {
		select {
		case <-ctx.Done():
			// The caller has stopped using the inbox: hand over at once.
			rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			released, err := store.GatewayLeaseRelease(rctx, l.rdb, key, l.token)
			cancel()
			switch {
			case err != nil:
				stop("released", "shutdown; the release failed ("+err.Error()+"), a standby takes over when the lease expires")
			case !released:
				stop("released", "shutdown; the lease had passed to another replica already")
			default:
				stop("released", "shutdown")
			}
			return
		case <-expiry.C:
			stop("lost", fmt.Sprintf("renewals failed until %v before the lease could expire", l.margin))
			return
		case <-next.C:
			if inflight {
				next.Reset(renewRetry) // the last one has not answered yet
				continue
			}
			inflight = true
			at := time.Now()
			go func() {
				ok, err := store.GatewayLeaseExtend(ctx, l.rdb, key, l.token, l.ttl)
				results <- renewal{at: at, held: ok, err: err}
			}()
		case r := <-results:
			inflight = false
			switch {
			case r.err != nil && ctx.Err() != nil:
				// shutting down: the ctx.Done case releases
			case r.err != nil:
				l.renewal.Inc()
				l.log.Warn().Err(r.err).Str("lease_key", key).Time("active_until", until).Msg("gateway lease renewal failed; retrying")
				next.Reset(renewRetry)
			case !r.held:
				stop("lost", "the lease expired or another replica holds it")
				return
			default:
				// Valid for ttl from when the renewal was sent (Redis counts from later).
				until = r.at.Add(l.ttl - l.margin)
				expiry.Reset(time.Until(until))
				next.Reset(l.renew)
			}
		}
	}
}
