package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// trimStore opens a store on a flushed Redis with contexts 1..n, each holding one
// ancient event (id 1-0, older than any retention).
func trimStore(t *testing.T, n int) *store.Store {
	t.Helper()
	st := openFlushed(t)
	ctx := context.Background()
	for id := 1; id <= n; id++ {
		// before the context's own events (an id must be above the stream's last)
		if err := srv.Client(t, id).XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: "1-0", Values: []string{"type", "ancient"}}).Err(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.CreateContext(ctx, &model.Context{ID: uint32(id), Admins: []uint32{1}}, "operator"); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// hasAncient says whether context id still holds the ancient event.
func hasAncient(t *testing.T, id int) bool {
	t.Helper()
	got, err := srv.Client(t, id).XRange(context.Background(), keys.Events, "1-0", "1-0").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(got) == 1
}

// A retention expiry trims the events of the contexts it deleted something in, at
// once (the events older than the retention, now that the oldest object kept is
// gone), and only those: the others wait for the safety sweep.
func TestExpiryTrimsItsContextsEvents(t *testing.T) {
	ctx := context.Background()
	st := trimStore(t, 2)
	j, _, err := st.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 1, Script: "true", ScriptType: "sh"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	// (ended: retention deletes only an ended job)
	if err := srv.Client(t, 1).HSet(ctx, keys.Job(1, j.ID), "status", "finished").Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.ExpireAt(ctx, 1, "job:1:"+strconv.FormatUint(uint64(j.ID), 10), time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), retryBase: time.Second, retryCap: time.Second, sweepEvery: time.Minute, retention: time.Hour})
	e.runExpired(ctx)
	if n := srv.Client(t, 1).Exists(ctx, keys.Job(1, j.ID)).Val(); n != 0 {
		t.Fatalf("the expired job is still there")
	}
	if hasAncient(t, 1) {
		t.Error("context 1 keeps an event older than the retention after its expiry")
	}
	if !hasAncient(t, 2) {
		t.Error("context 2, where nothing expired, was trimmed by the expiry")
	}
	e.trimSweep(ctx)
	if hasAncient(t, 2) {
		t.Error("the safety sweep did not trim context 2")
	}
}

// The events' safety sweep visits a page of contexts a tick, going on from where it
// stopped and around again after the last: a tick's cost is bounded whatever the
// number of contexts.
func TestTrimSweepVisitsOnePageATick(t *testing.T) {
	ctx := context.Background()
	const page = 3
	n := page + 1
	st := trimStore(t, n)
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), retryBase: time.Second, retryCap: time.Second, sweepEvery: time.Minute, retention: time.Hour})
	e.trimPage = page
	left := func() int {
		k := 0
		for id := 1; id <= n; id++ {
			if hasAncient(t, id) {
				k++
			}
		}
		return k
	}
	e.trimSweep(ctx)
	if k := left(); k != 1 {
		t.Fatalf("after one tick %d contexts keep their ancient event, want 1 (a page of %d of %d)", k, page, n)
	}
	if e.trimNext != page {
		t.Fatalf("the next page starts at %d, want %d", e.trimNext, page)
	}
	e.trimSweep(ctx)
	if k := left(); k != 0 {
		t.Fatalf("after two ticks %d contexts keep their ancient event", k)
	}
	if e.trimNext != 0 {
		t.Fatalf("after the last page the sweep starts again at %d, want 0", e.trimNext)
	}
	// Once it knows how many contexts there are, a page is what a pass over them in
	// trimTicks ticks takes (at least one context): few contexts, few trims a tick.
	e.trimSweep(ctx)
	if e.trimNext != 1 {
		t.Fatalf("4 contexts over %d ticks: the page took %d contexts, want 1", e.trimTicks, e.trimNext)
	}
	e.trimTicks = 2
	e.trimSweep(ctx)
	if e.trimNext != 3 {
		t.Fatalf("4 contexts over 2 ticks: the sweep is at %d, want 1 + 2", e.trimNext)
	}
}

// A context's own retention (retention_seconds) has its events trimmed at its
// expiries even when the scheduler keeps everything else forever (--retention 0).
func TestExpiryTrimsByTheContextsOwnRetention(t *testing.T) {
	ctx := context.Background()
	st := openFlushed(t)
	if err := srv.Client(t, 1).XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: "1-0", Values: []string{"type", "ancient"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateContext(ctx, &model.Context{ID: 1, Admins: []uint32{1}, RetentionSeconds: 3600}, "operator"); err != nil {
		t.Fatal(err)
	}
	j, _, err := st.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 1, Script: "true", ScriptType: "sh"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	// (ended: retention deletes only an ended job)
	if err := srv.Client(t, 1).HSet(ctx, keys.Job(1, j.ID), "status", "finished").Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.ExpireAt(ctx, 1, "job:1:"+strconv.FormatUint(uint64(j.ID), 10), time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	e := newEngine(engineParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), retryBase: time.Second, retryCap: time.Second, sweepEvery: time.Minute})
	e.runExpired(ctx)
	if hasAncient(t, 1) {
		t.Error("context 1 keeps an event older than its own retention after its expiry")
	}
}
