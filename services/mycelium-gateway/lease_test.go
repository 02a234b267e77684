package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/mycelium"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/myceliumemu"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// replica is one gateway of a test: its own store and Mycelium client (whose
// User-Agent names it to the emulated node).
type replica struct {
	g    *gateway
	ua   string
	logs *syncBuffer
	stop context.CancelFunc
	done chan error
}

func startReplica(t *testing.T, r *redistest.Server, nd *myceliumemu.Node, ua string, ttl, renew time.Duration) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, store.Options{URL: r.URL, ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := mycelium.New(mycelium.Config{BaseURL: nd.URL(), UserAgent: ua})
	if err != nil {
		t.Fatal(err)
	}
	rp := &replica{ua: ua, logs: &syncBuffer{}, stop: cancel, done: make(chan error, 1)}
	rp.g = newGateway(gatewayParams{store: st, log: zerolog.New(rp.logs), reg: prometheus.NewRegistry(), mycelium: mc,
		router: &routerStub{}, pollTimeout: 2 * time.Minute, routerWait: time.Minute, leaseTTL: ttl, leaseRenew: renew})
	go func() { rp.done <- rp.g.run(ctx) }()
	t.Cleanup(func() {
		rp.shutdown(t)
		st.Close()
	})
	return rp
}

func (rp *replica) shutdown(t *testing.T) {
	t.Helper()
	rp.stop()
	if err := <-rp.done; err != nil {
		t.Error(err)
	}
	rp.done <- nil // a second shutdown (the cleanup) finds it ended
}

// waitLease waits until the replica is active (want true) or not, with a deadline,
// on the lease's change events.
func (rp *replica) waitLease(t *testing.T, want bool, within time.Duration) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		term, changed := rp.g.lease.current()
		if (term != nil) == want {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%s: active=%v not reached within %v; logs:\n%s", rp.ua, want, within, rp.logs.String())
		}
	}
}

// waitLog waits, with a deadline, until the replica logged a line containing s (on
// each write to its log).
func (rp *replica) waitLog(t *testing.T, s string, within time.Duration) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		text, written := rp.logs.next()
		if strings.Contains(text, s) {
			return
		}
		select {
		case <-written:
		case <-deadline.C:
			t.Fatalf("%s did not log %q within %v:\n%s", rp.ua, s, within, rp.logs.String())
		}
	}
}

// pushAndDrain pushes n messages from node a to node b and waits until b's inbox is
// empty: some gateway popped them (they are not envelopes, so each is refused).
func pushAndDrain(t *testing.T, nw *myceliumemu.Network, a, b *myceliumemu.Node, n int) {
	t.Helper()
	ca, err := mycelium.New(mycelium.Config{BaseURL: a.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		if _, err := ca.Push(ctx, mycelium.Destination{PK: b.PK()}, []byte("runner7"), []byte{'x', byte('a' + i%26)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := nw.WaitUntil(ctx, func() bool { return b.InboxLen() == 0 }); err != nil {
		t.Fatalf("node b's inbox still holds %d messages: %v", b.InboxLen(), err)
	}
}

// Acceptance (issue 20, 5): two gateways for one Mycelium node: only the one that
// holds the lease polls and pops the node's inbox, the other stays off it; when the
// holder shuts down it releases the lease and the standby takes over at once (on the
// release's publication, not after the lease's 10 s).
func TestOneGatewayPopsItsNodesInboxAtATime(t *testing.T) {
	srv.Flush(t)
	nw := myceliumemu.NewForTest(t, "a", "b")
	a, b := nw.Node("a"), nw.Node("b")
	one := startReplica(t, srv, b, "gw-1", 0, 0)
	one.waitLease(t, true, time.Minute)
	two := startReplica(t, srv, b, "gw-2", 0, 0)
	two.waitLog(t, "standby (pushes only", 10*time.Second)
	pushAndDrain(t, nw, a, b, 20)
	if by := b.PollsBy(); by["gw-2"] != 0 || by["gw-1"] == 0 {
		t.Fatalf("pops by gateway with gw-1 active: %v", by)
	}
	if testutil.ToFloat64(one.g.lease.active) != 1 || testutil.ToFloat64(two.g.lease.active) != 0 {
		t.Fatal("hero_gateway_active: want 1 on the holder, 0 on the standby")
	}
	if got := testutil.ToFloat64(one.g.lease.changes.WithLabelValues("acquired")); got != 1 {
		t.Fatalf("gw-1 acquired the lease %v times, want 1", got)
	}

	// The standby still serves the router's Send calls, and its calls to the node do
	// not wait behind the holder's 2-minute long poll (the node's lock): it asks the
	// holder to yield.
	for i := range 5 {
		if err := nw.WaitUntil(context.Background(), func() bool { return b.PollClients() == 1 }); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := two.g.send(context.Background(), mycelium.Destination{PK: a.PK()}, "runner1", []byte("hello"), "test"); err != nil {
			t.Fatal(err)
		}
		if err := two.g.check(context.Background()); err != nil {
			t.Fatalf("the standby is not ready: %v", err)
		}
		if took := time.Since(start); took > time.Minute {
			t.Fatalf("push %d and readiness check from the standby took %v: they waited behind the holder's long poll", i, took)
		}
	}

	start := time.Now()
	one.shutdown(t)
	two.waitLease(t, true, time.Minute)
	if took := time.Since(start); took > defaultLeaseTTL/2 {
		t.Fatalf("the standby took over %v after the holder released the lease: it waited for the TTL, not the release", took)
	}
	if !strings.Contains(one.logs.String(), `"reason":"shutdown"`) {
		t.Fatalf("gw-1 did not release its lease on shutdown:\n%s", one.logs.String())
	}
	// gw-1's long poll in flight at its shutdown may reach the node after it (each
	// long poll dials a connection of its own, and the node counts a request when it
	// reads it; a loaded machine delays that read): one such poll, no more.
	before := b.PollsBy()["gw-1"]
	pushAndDrain(t, nw, a, b, 20)
	if by := b.PollsBy(); by["gw-1"] > before+1 || by["gw-2"] == 0 {
		t.Fatalf("pops by gateway after the hand-over: %v (gw-1 had %d)", by, before)
	}
	if got := b.MaxPollClients(); got != 1 {
		t.Fatalf("%d gateways polled node b's inbox at the same time, want 1", got)
	}
}

// A holder that cannot renew its lease (Redis stops answering) stops polling before
// the lease could expire in Redis, so the next holder never polls beside it; when
// Redis answers again it takes the lease back. A holder whose lease another replica
// took stops at its next renewal, and a standby takes an abandoned lease when its TTL
// has run out.
func TestGatewayThatLosesItsLeaseStopsPolling(t *testing.T) {
	r := redistest.Start(t)
	nw := myceliumemu.NewForTest(t, "a", "b")
	a, b := nw.Node("a"), nw.Node("b")
	const ttl, renew = 2 * time.Second, 400 * time.Millisecond
	one := startReplica(t, r, b, "gw-1", ttl, renew)
	one.waitLease(t, true, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := nw.WaitUntil(ctx, func() bool { return b.PollClients() == 1 }); err != nil {
		t.Fatal("the holder does not poll its node's inbox")
	}

	// Partition: Redis stops answering.
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	one.waitLease(t, false, 2*ttl)
	if err := nw.WaitUntil(ctx, func() bool { return b.PollClients() == 0 }); err != nil {
		t.Fatal("the gateway polls on without its lease")
	}
	stopped := time.Since(paused)
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if stopped >= ttl {
		t.Fatalf("the holder stopped polling %v after Redis stopped answering: after its %v lease could have passed to another", stopped, ttl)
	}
	one.waitLog(t, "renewals failed until", time.Minute)
	one.waitLease(t, true, time.Minute)
	pushAndDrain(t, nw, a, b, 5)

	// Another replica's token in the key: the holder stops at its next renewal; when
	// that lease ends unrenewed, a standby's wait for its TTL ends and it takes over.
	rc := r.Client(t, 0)
	key := keys.GatewayLease(b.PK())
	if err := rc.Set(ctx, key, "someone-else", 1500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	one.waitLease(t, false, 2*renew+time.Second)
	if err := nw.WaitUntil(ctx, func() bool { return b.PollClients() == 0 }); err != nil {
		t.Fatal("the gateway polls on after its lease passed to another")
	}
	one.waitLease(t, true, time.Minute)
	if took := time.Since(taken); took < 1500*time.Millisecond-100*time.Millisecond {
		t.Fatalf("took a lease held by another back after %v, before its TTL ran out", took)
	}
	pushAndDrain(t, nw, a, b, 5)
	if got := b.MaxPollClients(); got != 1 {
		t.Fatalf("%d clients polled at once, want 1", got)
	}
}
