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
	if res := e.acquire("a", 5000); len(res) != 1 || res[0] != 1 {
		t.Fatalf("acquire of a free lease: %v, want [1]", res)
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

func (e *leaseEnv) acquire(token string, ttl int64) []int64 {
	e.t.Helper()
	res, err := acquireScript.Run(e.ctx, e.rdb, []string{e.key}, token, ttl).Int64Slice()
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// run runs the extend or release script on the lease key; its reply is a number.
func (e *leaseEnv) run(sc *store.Script, args ...any) int {
	e.t.Helper()
	n, err := sc.Run(e.ctx, e.rdb, []string{e.key}, args...).Int()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// acquire: refused to another token with the key's PTTL (nothing changed); the
// holder's acquire extends.
func TestLeaseAcquireScript(t *testing.T) {
	e := newLeaseEnv(t)
	if res := e.acquire("b", 60000); len(res) != 2 || res[0] != 0 || res[1] <= 0 || res[1] > 5000 {
		t.Fatalf("acquire of a held lease: %v, want [0 pttl≤5000]", res)
	}
	if e.holder() != "a" || e.pttl() > 5000 {
		t.Fatalf("a refused acquire changed the lease: holder %q, pttl %d", e.holder(), e.pttl())
	}
	if res := e.acquire("a", 60000); len(res) != 1 || res[0] != 1 || e.pttl() <= 5000 {
		t.Fatalf("acquire by the holder: %v, pttl %d; want [1] and the new TTL", res, e.pttl())
	}
}

// extend: only the holder's token renews.
func TestLeaseExtendScript(t *testing.T) {
	e := newLeaseEnv(t)
	if n := e.run(extendScript, "b", 60000); n != 0 || e.pttl() > 5000 {
		t.Fatalf("extend by another token: %d, pttl %d; want 0 and no change", n, e.pttl())
	}
	if n := e.run(extendScript, "a", 60000); n != 1 || e.pttl() <= 5000 {
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
	if n := e.run(releaseScript, "b"); n != 0 || e.holder() != "a" {
		t.Fatalf("release by another token: %d, holder %q; want 0 and the lease kept", n, e.holder())
	}
	if n := e.run(releaseScript, "a"); n != 1 || e.holder() != "" {
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
	if n := e.run(extendScript, "a", 1000); n != 0 {
		t.Fatalf("extend of a released lease: %d, want 0", n)
	}
}
