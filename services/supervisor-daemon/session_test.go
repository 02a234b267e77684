package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/auth"
)

// A connection's verified session is fresh for its actor and signature only, until
// the recheck interval; the cache never holds more than its bound, dropping the
// entries due for a new check first.
func TestSessionCache(t *testing.T) {
	c := newSessionCache(4, 30*time.Second)
	t0 := time.Unix(1700000000, 0)
	ekm := func(b byte) []byte { return bytes.Repeat([]byte{b}, auth.ExporterLen) }
	c.put(ekm(1), 7, "sig", t0, 0)
	for _, tc := range []struct {
		name  string
		ekm   []byte
		actor uint32
		sig   string
		at    time.Time
		want  bool
	}{
		{"same connection, actor and signature", ekm(1), 7, "sig", t0.Add(29 * time.Second), true},
		{"after the recheck interval", ekm(1), 7, "sig", t0.Add(30 * time.Second), false},
		{"another connection", ekm(2), 7, "sig", t0, false},
		{"another actor", ekm(1), 8, "sig", t0, false},
		{"another signature", ekm(1), 7, "sig2", t0, false},
		{"a clock that went back", ekm(1), 7, "sig", t0.Add(-time.Second), false},
	} {
		if got := c.fresh(tc.ekm, tc.actor, tc.sig, tc.at); got != tc.want {
			t.Errorf("%s: fresh %v, want %v", tc.name, got, tc.want)
		}
	}
	c.drop(ekm(1))
	if c.fresh(ekm(1), 7, "sig", t0) {
		t.Fatal("a dropped session is still fresh")
	}
	// Full: the expired entries go first, the fresh ones stay.
	c.put(ekm(1), 1, "s", t0, 0)
	c.put(ekm(2), 1, "s", t0, 0)
	c.put(ekm(3), 1, "s", t0.Add(40*time.Second), 0)
	c.put(ekm(4), 1, "s", t0.Add(40*time.Second), 0)
	now := t0.Add(45 * time.Second)
	c.put(ekm(5), 1, "s", now, 0)
	if len(c.entries) != 3 || !c.fresh(ekm(3), 1, "s", now) || !c.fresh(ekm(4), 1, "s", now) || !c.fresh(ekm(5), 1, "s", now) {
		t.Fatalf("after eviction: %d entries", len(c.entries))
	}
	for i := 6; i < 20; i++ {
		c.put(ekm(byte(i)), 1, "s", now, 0)
	}
	if len(c.entries) != 4 || !c.fresh(ekm(19), 1, "s", now) {
		t.Fatalf("%d entries, want the bound 4 with the newest", len(c.entries))
	}
}

// A notice that an actor changed drops that actor's sessions and no other's, and a
// verification that began before the drop (it may have read the replaced key) is not
// kept.
func TestSessionCacheDropsAnActor(t *testing.T) {
	c := newSessionCache(16, 30*time.Second)
	t0 := time.Unix(1700000000, 0)
	ekm := func(b byte) []byte { return bytes.Repeat([]byte{b}, auth.ExporterLen) }
	c.put(ekm(1), 7, "a", t0, c.epoch.Load())
	c.put(ekm(2), 7, "b", t0, c.epoch.Load())
	c.put(ekm(3), 8, "c", t0, c.epoch.Load())
	began := c.epoch.Load()
	c.dropActor(7)
	if c.fresh(ekm(1), 7, "a", t0) || c.fresh(ekm(2), 7, "b", t0) {
		t.Fatal("actor 7's sessions survived its change")
	}
	if !c.fresh(ekm(3), 8, "c", t0) {
		t.Fatal("actor 8's session was dropped by actor 7's change")
	}
	c.put(ekm(1), 7, "a", t0, began) // verified against the key as it was before the change
	if c.fresh(ekm(1), 7, "a", t0) {
		t.Fatal("a verification from before the change was kept")
	}
	c.put(ekm(1), 7, "a", t0, c.epoch.Load())
	if !c.fresh(ekm(1), 7, "a", t0) {
		t.Fatal("a verification after the change was not kept")
	}
	c.dropAll()
	if c.fresh(ekm(1), 7, "a", t0) || c.fresh(ekm(3), 8, "c", t0) {
		t.Fatal("dropAll kept a session")
	}
}
