package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
)

// Identities. A runner process's worker id and a router's consumer id name its
// claims (processing lists, leases), and they are stable for a deployment slot, so
// that a process restarted after a crash takes its own claims back at once. Two live
// processes under one id would take each other's claims: each holds its id in DB 0
// (coord:owner:<kind>:<id> = "<host>\t<pid>\t<process start>\t<nonce>", with a TTL
// that a live holder refreshes), and a second live process is refused.

// IdentityKey is the DB-0 key that holds an id of a kind ("runner", "router").
func IdentityKey(kind, id string) string { return keys.Owner(kind, id) }

// ErrIdentityInUse: a live process holds the id.
var ErrIdentityInUse = errors.New("id in use by a live process")

// Identity is an id this process holds.
type Identity struct {
	s          *Store
	key, value string
	ttl        time.Duration
}

// HoldIdentity takes id of kind for this process. A free id is taken at once; so is
// one held by an earlier life of this process slot (same host, and its process is
// gone: a crash and restart). One held by a process elsewhere is waited for until its
// TTL passes (a crashed holder stops refreshing it), for at most twice the TTL; a
// holder that is alive keeps it: ErrIdentityInUse, which names the holder. ttl is how
// long a crashed holder blocks the id; Keep refreshes it.
func (s *Store) HoldIdentity(ctx context.Context, kind, id string, ttl time.Duration) (*Identity, error) {
	host, _ := os.Hostname()
	pid := os.Getpid()
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	me := strings.Join([]string{host, strconv.Itoa(pid), procStart(pid), hex.EncodeToString(nonce[:])}, "\t")
	key := IdentityKey(kind, id)
	deadline := time.Now().Add(2 * ttl)
	replace := ""
	var bo fault.Backoff
	for {
		cur, err := (&acquireArgs{IdentityKey: key, Value: me, TTLMs: ttl.Milliseconds(), Replace: replace}).run(ctx, s.primary)
		switch {
		case err != nil && fault.Transient(err) && ctx.Err() == nil:
			if !bo.Sleep(ctx) {
				return nil, ctx.Err()
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("hold %s id %q: %w", kind, id, err)
		case cur == "" || cur == replace:
			return &Identity{s: s, key: key, value: me, ttl: ttl}, nil
		}
		f := strings.Split(cur, "\t")
		if len(f) == 4 && f[0] == host {
			// Same host: its process is alive or not, and if not this is a restart.
			if p, _ := strconv.Atoi(f[1]); p == pid || !procAlive(p, f[2]) {
				replace = cur
				continue
			}
			return nil, fmt.Errorf("%w: %s id %q is held by process %s on this host (%s): give each process its own id", ErrIdentityInUse, kind, id, f[1], host)
		}
		if time.Now().After(deadline) {
			holder := cur
			if len(f) == 4 {
				holder = "process " + f[1] + " on " + f[0]
			}
			return nil, fmt.Errorf("%w: %s id %q is held by %s, which kept it alive for %s: give each process its own id", ErrIdentityInUse, kind, id, holder, 2*ttl)
		}
		// Another host: a crashed holder's TTL runs out; a live one refreshes it.
		t := time.NewTimer(min(ttl/4, time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Keep refreshes the hold every TTL/3 until ctx ends (Release gives it up). It
// returns an error when another process took the id (this one had been away longer
// than the TTL); passing Redis faults are retried.
func (i *Identity) Keep(ctx context.Context) error {
	t := time.NewTicker(i.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, i.ttl/3)
		cur, err := (&refreshArgs{IdentityKey: i.key, Value: i.value, TTLMs: i.ttl.Milliseconds()}).run(rctx, i.s.primary)
		cancel()
		if err == nil && cur != i.value {
			return fmt.Errorf("%w: %s was taken by another process (%q) while this one could not refresh it", ErrIdentityInUse, i.key, cur)
		}
	}
}

// Release gives the id up (if this process still holds it).
func (i *Identity) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// best effort: the key's TTL ends a hold that is not released
	_, _ = (&releaseIdentityArgs{IdentityKey: i.key, Value: i.value}).run(ctx, i.s.primary)
}

// The mycelium-gateway's lease of its Mycelium node (services/mycelium-gateway,
// lease.go), one replica per node: its scripts are the store's so that the loader of
// the store's functions (supervisor-daemon) has them too. Each runs on c (the primary
// server's DB 0) with lease, the key keys.GatewayLease.

// GatewayLeaseAcquire takes the lease when nobody holds it, or extends it when token
// still holds it: held, else the key's PTTL in ms (-2: it expired meanwhile; see
// lua/gateway_lease_acquire.lua).
func GatewayLeaseAcquire(ctx context.Context, c redis.Cmdable, lease, token string, ttl time.Duration) (held bool, pttlMs int64, err error) {
	r, err := (&gatewayLeaseAcquireArgs{LeaseKey: lease, Token: token, TTLMs: ttl.Milliseconds()}).run(ctx, cmdRunner{c})
	if err == nil && len(r) == 0 {
		err = fmt.Errorf("lua/gateway_lease_acquire.lua: an empty reply")
	}
	if err != nil {
		return false, 0, err
	}
	if r[0] == 1 {
		return true, 0, nil
	}
	if len(r) > 1 {
		pttlMs = r[1]
	}
	return false, pttlMs, nil
}

// GatewayLeaseExtend renews the lease if token holds it (lua/gateway_lease_extend.lua).
func GatewayLeaseExtend(ctx context.Context, c redis.Cmdable, lease, token string, ttl time.Duration) (bool, error) {
	n, err := (&gatewayLeaseExtendArgs{LeaseKey: lease, Token: token, TTLMs: ttl.Milliseconds()}).run(ctx, cmdRunner{c})
	return n == 1, err
}

// GatewayLeaseRelease deletes the lease if token holds it and tells the standbys
// (lua/gateway_lease_release.lua).
func GatewayLeaseRelease(ctx context.Context, c redis.Cmdable, lease, token string) (bool, error) {
	n, err := (&gatewayLeaseReleaseArgs{LeaseKey: lease, Token: token}).run(ctx, cmdRunner{c})
	return n == 1, err
}

// procStart is when a process started (field 22 of /proc/<pid>/stat, in clock
// ticks since boot), which tells a pid reused by another process; "" without /proc.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 19 {
			return f[19]
		}
	}
	return ""
}

// procAlive says whether the process pid that started at start (procStart) runs.
func procAlive(pid int, start string) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return start == "" || procStart(pid) == start
}
