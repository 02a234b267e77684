package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/store"
)

// procStartOf reads field 22 of /proc/<pid>/stat (as the store does).
func procStartOf(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Skip("no /proc")
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[19]
}

// TestHoldIdentity (issue 17): a free id, or one a dead process of this host held (a
// crash and restart), is taken at once; one a live process of this host holds is
// refused at once with a clear error; one held on another host is taken when its TTL
// runs out, and refused while its holder keeps refreshing it.
func TestHoldIdentity(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	g := srv.Client(t, 0)
	host, _ := os.Hostname()
	ttl := 600 * time.Millisecond

	id, err := s.HoldIdentity(ctx, "runner", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- id.Keep(kctx) }()
	stop()
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	id.Release()
	if n := g.Exists(ctx, store.IdentityKey("runner", "w1")).Val(); n != 0 {
		t.Fatal("a stopped holder left its id held")
	}

	// A live process of this host (our parent) holds it: refused at once.
	ppid := os.Getppid()
	g.Set(ctx, store.IdentityKey("runner", "w2"), fmt.Sprintf("%s\t%d\t%s\tn", host, ppid, procStartOf(t, ppid)), 10*time.Minute)
	start := time.Now()
	if _, err := s.HoldIdentity(ctx, "runner", "w2", time.Minute); !errors.Is(err, store.ErrIdentityInUse) || !strings.Contains(err.Error(), strconv.Itoa(ppid)) {
		t.Fatalf("held by a live process: %v", err)
	}
	if time.Since(start) > time.Minute {
		t.Fatalf("refusing took %v (the holder's key lives 10 minutes: it waited for it)", time.Since(start))
	}
	// A dead process of this host (a pid that started at another time): taken at once.
	g.Set(ctx, store.IdentityKey("runner", "w3"), fmt.Sprintf("%s\t%d\t1\tn", host, ppid), time.Minute)
	if _, err := s.HoldIdentity(ctx, "runner", "w3", time.Minute); err != nil {
		t.Fatalf("held by a dead process: %v", err)
	}
	// Another host, not refreshed: taken once its TTL passed.
	g.Set(ctx, store.IdentityKey("router", "r1"), "elsewhere\t1\t1\tn", ttl)
	start = time.Now()
	if _, err := s.HoldIdentity(ctx, "router", "r1", ttl); err != nil {
		t.Fatalf("held by a crashed process elsewhere: %v", err)
	}
	if d := time.Since(start); d > 2*ttl {
		t.Errorf("took %v to take an id whose TTL was %v", d, ttl)
	}
	// Another host that keeps refreshing: refused after twice the TTL.
	g.Set(ctx, store.IdentityKey("router", "r2"), "elsewhere\t1\t1\tn", ttl)
	rctx, stopRefresh := context.WithCancel(ctx)
	defer stopRefresh()
	go func() {
		tk := time.NewTicker(ttl / 4)
		defer tk.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tk.C:
				g.PExpire(ctx, store.IdentityKey("router", "r2"), ttl)
			}
		}
	}()
	if _, err := s.HoldIdentity(ctx, "router", "r2", ttl); !errors.Is(err, store.ErrIdentityInUse) || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("held by a live process elsewhere: %v", err)
	}
}
