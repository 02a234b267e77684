package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/store"
)

// Direct tests of the lease's three scripts (lib/store's lua/gateway_lease_*.lua) on a real Redis: their
// effect on the lease key (its holder and TTL, the release's publication) and their
// refusals when another replica's token holds it.

// leaseEnv is a lease key held by token "a" for 5 s.
type leaseEnv struct {
	t   *testing.T
	ctx context.Context
	rdb *redis.Client
	key string
}

func newLeaseEnv(t *testing.T) *leaseEnv {
	t.Helper()
	srv.Flush(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	// The store's functions are there once a loader (supervisor-daemon) opened it.
	st, err := store.Open(ctx, store.Options{URL: srv.URL, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	e := &leaseEnv{t: t, ctx: ctx, rdb: srv.Client(t, 0), key: keys.GatewayLease("pk1")}
	if held, pttl := e.acquire("a", 5000); !held {
		t.Fatalf("acquire of a free lease: refused (pttl %d), want held", pttl)
	}
	if e.holder() != "a" || e.pttl() <= 0 || e.pttl() > 5000 {
		t.Fatalf("after acquire: holder %q, pttl %d; want a, ≤ 5000", e.holder(), e.pttl())
	}
	return e
}

func (e *leaseEnv) pttl() int64 {
	e.t.Helper()
	d, err := e.rdb.PTTL(e.ctx, e.key).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return d.Milliseconds()
}

func (e *leaseEnv) holder() string {
	e.t.Helper()
	v, err := e.rdb.Get(e.ctx, e.key).Result()
	if err != nil && err != redis.Nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *leaseEnv) acquire(token string, ttlMs int64) (bool, int64) {
	e.t.Helper()
	held, pttl, err := store.GatewayLeaseAcquire(e.ctx, e.rdb, e.key, token, time.Duration(ttlMs)*time.Millisecond)
	if err != nil {
		e.t.Fatal(err)
	}
	return held, pttl
}

// extend and release run the scripts on the lease key: 1 done, 0 not.
func (e *leaseEnv) extend(token string, ttlMs int64) int {
	e.t.Helper()
	ok, err := store.GatewayLeaseExtend(e.ctx, e.rdb, e.key, token, time.Duration(ttlMs)*time.Millisecond)
	if err != nil {
		e.t.Fatal(err)
	}
	if ok {
		return 1
	}
	return 0
}

func (e *leaseEnv) release(token string) int {
	e.t.Helper()
	ok, err := store.GatewayLeaseRelease(e.ctx, e.rdb, e.key, token)
	if err != nil {
		e.t.Fatal(err)
	}
	if ok {
		return 1
	}
	return 0
}

// acquire: refused to another token with the key's PTTL (nothing changed); the
// holder's acquire extends.
func TestLeaseAcquireScript(t *testing.T) {
	e := newLeaseEnv(t)
	if held, pttl := e.acquire("b", 60000); held || pttl <= 0 || pttl > 5000 {
		t.Fatalf("acquire of a held lease: held %v, pttl %d; want refused, 0 < pttl ≤ 5000", held, pttl)
	}
	if e.holder() != "a" || e.pttl() > 5000 {
		t.Fatalf("a refused acquire changed the lease: holder %q, pttl %d", e.holder(), e.pttl())
	}
	if held, _ := e.acquire("a", 60000); !held || e.pttl() <= 5000 {
		t.Fatalf("acquire by the holder: held %v, pttl %d; want held and the new TTL", held, e.pttl())
	}
}

// extend: only the holder's token renews.
func TestLeaseExtendScript(t *testing.T) {
	e := newLeaseEnv(t)
	if n := e.extend("b", 60000); n != 0 || e.pttl() > 5000 {
		t.Fatalf("extend by another token: %d, pttl %d; want 0 and no change", n, e.pttl())
	}
	if n := e.extend("a", 60000); n != 1 || e.pttl() <= 5000 {
		t.Fatalf("extend by the holder: %d, pttl %d; want 1 and the new TTL", n, e.pttl())
	}
}

// release: only the holder's token; it deletes the key and publishes on it.
func TestLeaseReleaseScript(t *testing.T) {
	e := newLeaseEnv(t)
	sub := e.rdb.Subscribe(e.ctx, e.key)
	defer sub.Close()
	if _, err := sub.Receive(e.ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	if n := e.release("b"); n != 0 || e.holder() != "a" {
		t.Fatalf("release by another token: %d, holder %q; want 0 and the lease kept", n, e.holder())
	}
	if n := e.release("a"); n != 1 || e.holder() != "" {
		t.Fatalf("release by the holder: %d, holder %q; want 1 and the key gone", n, e.holder())
	}
	// The first publication is the holder's: a refused release publishes nothing.
	msg, err := sub.ReceiveMessage(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Channel != e.key || msg.Payload != "a" {
		t.Fatalf("release published %q on %q, want %q on %q", msg.Payload, msg.Channel, "a", e.key)
	}
	if n := e.extend("a", 1000); n != 0 {
		t.Fatalf("extend of a released lease: %d, want 0", n)
	}
}
