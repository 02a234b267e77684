package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// Issue 20: a context placed on another server keeps its coordination entries (wake
// tokens, active flows, due retries, expiries, done notifications) in DB 0 of that
// server, where its scripts write them, and the store's readers find them there: the
// wake-ups, the due and expiry queues and the active flows are read from every server.
// Before, they were read from the primary only, so that work of a placed context moved
// only through the 5 s idle fallbacks and its retries and retention never ran.
func TestPlacedContextCoordination(t *testing.T) {
	other := redistest.Start(t)
	srv.Flush(t)
	ctx := context.Background()
	s, err := store.Open(ctx, store.Options{URL: srv.URL, Placement: "10-19=" + other.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Servers()) != 2 || !s.IsPrimary(s.Servers()[0]) || s.ServerFor(12) != s.Servers()[1] {
		t.Fatalf("servers: %d, context 12 on %v", len(s.Servers()), s.ServerFor(12).Name)
	}
	notes := followFlowDone(t, s)
	db := mustCtx(t, s, 12)
	db3 := mustCtx(t, s, 3) // on the primary

	f, jobs := checkPlacedFlowActiveAndWakesRouters(t, s, db)
	checkPlacedQueueWakeups(t, s, db, db3)
	checkPlacedRetryDue(t, s, db, f, jobs[0].ID)
	checkPlacedFlowEndAndRetention(t, s, db, notes)

	// Nothing of context 12 went to the primary's DB 0 but its registry entry.
	for _, k := range []string{keys.Due, keys.Expire, keys.ActiveFlows, keys.WakeMsgOut, keys.WakeRunner(1, "queue:sh")} {
		if n := srv.Client(t, 0).Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s is on the primary", k)
		}
	}
}

// followFlowDone follows the done notifications on every server (as
// supervisor-daemon does).
func followFlowDone(t *testing.T, s *store.Store) <-chan *redis.Message {
	t.Helper()
	ctx := context.Background()
	notes := make(chan *redis.Message, 16)
	for _, sv := range s.Servers() {
		sub := sv.Coord().Subscribe(ctx, keys.FlowDone)
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		go func() {
			for m := range sub.Channel() {
				notes <- m
			}
		}()
	}
	return notes
}

// checkPlacedFlowActiveAndWakesRouters: a started flow of the placed context is
// active, and counted; its dispatch wakes the routers through the wake list of its
// server.
func checkPlacedFlowActiveAndWakesRouters(t *testing.T, s *store.Store, db *store.DB) (*model.Flow, []*model.Job) {
	t.Helper()
	ctx := context.Background()
	f, jobs := flowWith(t, s, db, 2)
	if af, err := s.ActiveFlows(ctx); err != nil || len(af) != 1 || af[0] != [2]uint32{12, f.ID} {
		t.Fatalf("active flows %v %v, want [12 %d]", af, err, f.ID)
	}
	if n, err := s.ActiveFlowCount(ctx); err != nil || n != 1 {
		t.Fatalf("active flow count %d %v, want 1", n, err)
	}
	if _, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	w, err := s.WaitWake(ctx, 5*time.Second, s.Everywhere(keys.WakeMsgOut, keys.WakeMsgIn)...)
	if err != nil || w.Key != keys.WakeMsgOut || w.Token != "12" || w.Server != s.ServerFor(12) {
		t.Fatalf("router wake-up: %+v %v, want a token of context 12 on msg_out of its server", w, err)
	}
	return f, jobs
}

// checkPlacedQueueWakeups: job queue wake-ups of contexts on both servers: one wait
// takes one token, the other token is left (or given back) for the next wait.
func checkPlacedQueueWakeups(t *testing.T, s *store.Store, db, db3 *store.DB) {
	t.Helper()
	ctx := context.Background()
	for _, d := range []*store.DB{db, db3} { // runner 1 serves queue:sh in both
		if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error { return p.SAdd(ctx, keys.Wakers("queue:sh"), 1).Err() }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Enqueue(ctx, "queue:sh", "job:1:100"); err != nil {
		t.Fatal(err)
	}
	if err := db3.Enqueue(ctx, "queue:sh", "job:1:101"); err != nil {
		t.Fatal(err)
	}
	sets := store.WakeSetsOn(s.ServersOf([]uint32{3, 12}), keys.WakeRunner(1, "queue:sh"))
	if len(sets) != 2 {
		t.Fatalf("wake sets %+v, want one per server", sets)
	}
	got := map[string]bool{}
	for range 2 {
		w, err := s.WaitWake(ctx, 5*time.Second, sets...)
		if err != nil || w.Key == "" {
			t.Fatalf("queue wake-up: %+v %v", w, err)
		}
		got[w.Key+" "+w.Token] = true
	}
	if !got[keys.WakeRunner(1, "queue:sh")+" 3"] || !got[keys.WakeRunner(1, "queue:sh")+" 12"] {
		t.Fatalf("woke on %v, want each context's queue once", got)
	}
	if w, err := s.WaitWake(ctx, 300*time.Millisecond, sets...); err != nil || w.Key != "" {
		t.Fatalf("a third wake-up %+v %v: a token was duplicated", w, err)
	}
}

// checkPlacedRetryDue: a failed job's retry is due on the context's server and
// popped from there.
func checkPlacedRetryDue(t *testing.T, s *store.Store, db *store.DB, f *model.Flow, first uint32) {
	t.Helper()
	ctx := context.Background()
	res, err := db.CompleteNode(ctx, store.JobEnd{FlowID: f.ID, CallerID: 1, JobID: first, Attempt: 1, Status: model.JobError,
		Error: "boom", Retries: 1, Backoff: 50 * time.Millisecond, Actor: "scheduler"})
	if err != nil || res.RetryAt.IsZero() {
		t.Fatalf("failed end: %+v %v, want a retry", res, err)
	}
	if next, err := s.NextDue(ctx); err != nil || next.IsZero() {
		t.Fatalf("next due %v %v, want the retry", next, err)
	}
	due, err := s.PopDue(ctx, time.Now().Add(time.Second), 100)
	if err != nil || len(due) != 1 || due[0] != (store.DueItem{ContextID: 12, FlowID: f.ID, CallerID: 1, JobID: first}) {
		t.Fatalf("due %+v %v, want the retry of job %d of context 12", due, err, first)
	}
}

// checkPlacedFlowEndAndRetention: a flow that ends notifies on its server, leaves
// the active flows and is kept for its retention, which ends on its server's
// coord:expire.
func checkPlacedFlowEndAndRetention(t *testing.T, s *store.Store, db *store.DB, notes <-chan *redis.Message) {
	t.Helper()
	ctx := context.Background()
	f2, jobs2 := flowWith(t, s, db, 1)
	if _, err := db.DispatchMany(ctx, f2.ID, 1, jobs2, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	res, err := db.CompleteNode(ctx, store.JobEnd{FlowID: f2.ID, CallerID: 1, JobID: jobs2[0].ID, Attempt: 1, Status: model.JobFinished,
		Retries: -1, Actor: "scheduler", Retention: time.Minute})
	if err != nil || !res.FlowFinished {
		t.Fatalf("end: %+v %v, want the flow finished", res, err)
	}
	select {
	case m := <-notes:
		if m.Payload != "12:"+u32(f2.ID) {
			t.Fatalf("flow done %q, want 12:%d", m.Payload, f2.ID)
		}
	case <-time.After(time.Minute):
		t.Fatal("no flow-done notification on any server")
	}
	if n, err := s.ActiveFlowCount(ctx); err != nil || n != 1 {
		t.Fatalf("active flow count %d %v, want 1 (the first flow)", n, err)
	}
	if next, err := s.NextExpiry(ctx); err != nil || next.IsZero() {
		t.Fatalf("next expiry %v %v, want the flow's", next, err)
	}
	exp, err := s.PopExpired(ctx, time.Now().Add(2*time.Minute), 100)
	if err != nil || len(exp) != 1 || exp[0].ContextID != 12 || exp[0].Kind != "flow" || exp[0].FlowID != f2.ID {
		t.Fatalf("expired %+v %v, want flow %d of context 12", exp, err, f2.ID)
	}
}

func u32(v uint32) string { return keys.Flow(v)[len("flow:"):] }
