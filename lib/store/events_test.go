package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

func TestCheckEventPosition(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 9)
	rdb := srv.Client(t, 9)
	rdb.Del(ctx, keys.Events)
	// No stream: any position passes.
	if err := db.CheckEventPosition(ctx, "5-0"); err != nil {
		t.Fatalf("no stream: %v", err)
	}
	for _, id := range []string{"10-0", "20-0", "30-0", "40-0"} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: id, Values: []any{"type", "job.started"}})
	}
	rdb.XTrimMinID(ctx, keys.Events, "30-0") // 10 and 20 are gone
	for _, tc := range []struct {
		after string
		want  error
	}{
		{"", nil}, {"0", nil}, {"$", nil},
		{"30-0", nil}, {"40-0", nil}, {"99-0", nil}, // kept, or newer than everything
		{"20-0", store.ErrEventsTrimmed}, {"10-0", store.ErrEventsTrimmed}, {"25-3", store.ErrEventsTrimmed},
		{"soon", store.ErrBadEventID}, {"1-x", store.ErrBadEventID},
	} {
		err := db.CheckEventPosition(ctx, tc.after)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("after %q: %v, want %v", tc.after, err, tc.want)
		}
	}
	// Everything trimmed: a position before the last event written is gone; the last one
	// itself is not (nothing came after it).
	rdb.XTrimMaxLen(ctx, keys.Events, 0)
	if err := db.CheckEventPosition(ctx, "30-0"); !errors.Is(err, store.ErrEventsTrimmed) {
		t.Errorf("emptied stream, older position: %v", err)
	}
	if err := db.CheckEventPosition(ctx, "40-0"); err != nil {
		t.Errorf("emptied stream, last position: %v", err)
	}
}

// An EventReader follows its context's stream on one connection: wait after wait, it
// returns the new events of its context only (its database selected once), and a wait
// blocks until an event arrives.
func TestEventReaderFollowsItsContext(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 11)
	_ = mustCtx(t, s, 12)
	rdb, other := srv.Client(t, 11), srv.Client(t, 12)
	rdb.Del(ctx, keys.Events)
	other.Del(ctx, keys.Events)
	r := db.EventReader()
	defer func() { _ = r.Close() }()
	after := "0"
	for round, ids := range [][]string{{"10-0", "11-0"}, {"12-0"}} {
		for _, id := range ids {
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: id, Values: []any{"type", "job.started", "job_id", "1"}})
			other.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: id, Values: []any{"type", "flow.started"}})
		}
		evs, err := r.Wait(ctx, after, 100, time.Second)
		if err != nil || len(evs) != len(ids) {
			t.Fatalf("round %d: %d events %v, want %d", round, len(evs), err, len(ids))
		}
		for i, e := range evs {
			if e.ID != ids[i] || e.Type != "job.started" || e.ContextID != 11 {
				t.Fatalf("round %d event %d: %+v", round, i, e)
			}
		}
		after = evs[len(evs)-1].ID
	}
	got := make(chan []store.Event, 1)
	go func() {
		evs, _ := r.Wait(ctx, after, 100, time.Minute)
		got <- evs
	}()
	// The wait blocks until this event (or its 1-minute bound, which fails the test).
	for deadline := time.Now().Add(time.Minute); !strings.Contains(srv.Client(t, 0).Info(ctx, "clients").Val(), "blocked_clients:1"); {
		if time.Now().After(deadline) {
			t.Fatal("the wait never blocked")
		}
		time.Sleep(2 * time.Millisecond) // nothing signals a blocked client but INFO
	}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: "13-0", Values: []any{"type", "job.finished"}})
	if evs := <-got; len(evs) != 1 || evs[0].ID != "13-0" {
		t.Fatalf("blocked wait: %+v", evs)
	}
}

// TestTrimEventsKeepsRetainedFlows (issue 17): trimming by age (a retention shortened
// below a flow's age) drops older events but never those of a flow or job still
// kept; once they are gone, their events go too.
func TestTrimEventsKeepsRetainedFlows(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 15)
	rc := srv.Client(t, 15)
	old := time.Now().Add(-time.Hour).UnixMilli()
	rc.Del(ctx, keys.Events) // the context's own creation event: newer than old
	if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: fmt.Sprintf("%d-0", old), Values: []string{"type", "old"}}).Err(); err != nil {
		t.Fatal(err)
	}
	f, _ := flowWith(t, s, db, 2)
	kept := rc.XLen(ctx, keys.Events).Val() - 1
	// A retention of "nothing": everything before now+1s would go.
	if err := db.TrimEvents(ctx, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	evs := rc.XRange(ctx, keys.Events, "-", "+").Val()
	if int64(len(evs)) != kept || kept == 0 || evs[0].Values["type"] == "old" {
		t.Fatalf("after the trim: %d events %v, want the flow's %d", len(evs), evs, kept)
	}
	if err := db.DeleteFlow(ctx, f.ID, true, "test"); err != nil {
		t.Fatal(err)
	}
	if err := db.TrimEvents(ctx, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := rc.XLen(ctx, keys.Events).Val(); n != 0 {
		t.Fatalf("%d events left once the flow and its jobs are gone", n)
	}
}

// A submission's events go in two stream entries whatever the call's jobs (the first
// job's job.created, then one entry of the others: lua/lib_state.lua's ev_flush); every
// reader gives the events back with ids of their own, in order, and a reader that
// stopped at any of them reads on from there, missing nothing and reading nothing twice.
func TestSubmittedEventsSharedEntryReadAsTwo(t *testing.T) {
	ctx := context.Background()
	db, evs := submitThreeJobs(t)
	checkEventIDsIncrease(t, evs)
	// From each event's id: the events after it, by each reader.
	for i := range evs {
		checkReadOnFrom(t, db, evs, i)
	}
	if n, err := db.NewestEvents(ctx, time.UnixMilli(0), 3); err != nil || eventIDs(n) != eventIDs(evs[3:]) {
		t.Errorf("NewestEvents, 3: %s, %v; want %s", eventIDs(n), err, eventIDs(evs[3:]))
	}
	if id, err := db.LastEventID(ctx); err != nil || id != evs[5].ID {
		t.Errorf("LastEventID: %s, %v; want %s", id, err, evs[5].ID)
	}
	// The first entry trimmed: each id of the second's events is still a position that
	// misses nothing, and so is the first's (nothing lies between it and them); one
	// before it is not.
	srv.Client(t, 27).XTrimMinID(ctx, keys.Events, evs[5].ID)
	for _, e := range evs {
		if err := db.CheckEventPosition(ctx, e.ID); err != nil {
			t.Errorf("position %s (%s), the first entry trimmed: %v", e.ID, e.Type, err)
		}
	}
	var ms, seq uint64
	fmt.Sscanf(evs[0].ID, "%d-%d", &ms, &seq)
	if seq > 0 {
		if err := db.CheckEventPosition(ctx, fmt.Sprintf("%d-%d", ms, seq-1)); !errors.Is(err, store.ErrEventsTrimmed) {
			t.Errorf("a position before the trimmed entry: %v; want ErrEventsTrimmed", err)
		}
	}
}

// A submission's jobs but the call's first hold their job.created and job.dispatched
// in one record of the call's shared entry (type "cd", two events, two sequence
// numbers): the entry holds three records for the five events after the first, and
// its id is the fifth's.
func TestSubmittedJobsOneRecordEach(t *testing.T) {
	ctx := context.Background()
	_, evs := submitThreeJobs(t)
	raw := srv.Client(t, 27).XRevRangeN(ctx, keys.Events, "+", "-", 1).Val()
	if len(raw) != 1 || raw[0].ID != evs[5].ID {
		t.Fatalf("the last entry: %+v; want the id %s", raw, evs[5].ID)
	}
	detail, _ := raw[0].Values["detail"].(string)
	want := fmt.Sprintf("d 0 %d 1 0 0 cd 0 %d 1 0 0 cd 0 %d 1 0 0 ", evs[1].JobID, evs[3].JobID, evs[5].JobID)
	if raw[0].Values["type"] != "m" || detail != want {
		t.Errorf("the shared entry: type %v, records %q; want m, %q", raw[0].Values["type"], detail, want)
	}
}

// submitThreeJobs submits three no-op handler jobs in one call to context 27 and
// returns their events as ReadEvents gives them, after checking the stream's entries
// (four) and the events (each job's job.created, then its job.dispatched).
func submitThreeJobs(t *testing.T) (*store.DB, []store.Event) {
	t.Helper()
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 27)
	if _, _, err := s.CreateRunner(ctx, 27, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"go"}); err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(t, 27)
	before := rdb.XLen(ctx, keys.Events).Val()
	subs := make([]store.Submission, 3)
	for i := range subs {
		subs[i] = store.Submission{Job: &model.Job{CallerID: 1, ContextID: 27, FunctionName: "go#noop"}}
	}
	out, err := s.SubmitJobs(ctx, 27, subs, "1")
	if err != nil {
		t.Fatal(err)
	}
	if n := rdb.XLen(ctx, keys.Events).Val() - before; n != 2 {
		t.Fatalf("3 jobs submitted in one call wrote %d stream entries; want 2 (the first event's, then one of the five others)", n)
	}
	all, err := db.ReadEvents(ctx, "0", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var evs []store.Event
	var got, want []string
	for _, e := range all {
		if e.JobID != 0 && e.CallerID == 1 {
			evs = append(evs, e)
			got = append(got, fmt.Sprintf("%d %s %s %s", e.JobID, e.Type, e.Status, e.Detail))
		}
	}
	for _, o := range out {
		want = append(want, fmt.Sprintf("%d job.created  %s", o.Job.ID, keys.Job(1, o.Job.ID)), fmt.Sprintf("%d job.dispatched dispatched attempt 1", o.Job.ID))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	return db, evs
}

// checkEventIDsIncrease checks that the events' ids are stream ids in increasing
// order, each with its time.
func checkEventIDsIncrease(t *testing.T, evs []store.Event) {
	t.Helper()
	var lastMs, lastSeq uint64
	for i, e := range evs {
		var ms, seq uint64
		if _, err := fmt.Sscanf(e.ID, "%d-%d", &ms, &seq); err != nil || ms < lastMs || ms == lastMs && seq <= lastSeq || e.TimeMs != int64(ms) {
			t.Fatalf("event %d: id %q (%v) after %d-%d, time %d", i, e.ID, err, lastMs, lastSeq, e.TimeMs)
		}
		lastMs, lastSeq = ms, seq
	}
}

func eventIDs(es []store.Event) string {
	var s []string
	for _, e := range es {
		s = append(s, e.ID)
	}
	return strings.Join(s, " ")
}

// checkReadOnFrom checks what ReadEvents and WaitEvents give after evs[i] (the
// events after it, or the next one with a limit of one), and that its id is a
// position that misses nothing.
func checkReadOnFrom(t *testing.T, db *store.DB, evs []store.Event, i int) {
	t.Helper()
	ctx := context.Background()
	e, rest := evs[i], eventIDs(evs[i+1:])
	if r, err := db.ReadEvents(ctx, e.ID, 1000); err != nil || eventIDs(r) != rest {
		t.Errorf("ReadEvents after %s (%s): %s, %v; want %s", e.ID, e.Type, eventIDs(r), err, rest)
	}
	if err := db.CheckEventPosition(ctx, e.ID); err != nil {
		t.Errorf("position %s: %v", e.ID, err)
	}
	if i+1 == len(evs) {
		return
	}
	next := evs[i+1].ID
	if r, err := db.ReadEvents(ctx, e.ID, 1); err != nil || eventIDs(r) != next {
		t.Errorf("ReadEvents after %s, limit 1: %s, %v; want %s", e.ID, eventIDs(r), err, next)
	}
	if w, err := db.WaitEvents(ctx, e.ID, 1000, time.Millisecond); err != nil || eventIDs(w) != rest {
		t.Errorf("WaitEvents after %s (%s): %s, %v; want %s", e.ID, e.Type, eventIDs(w), err, rest)
	}
	if w, err := db.WaitEvents(ctx, e.ID, 1, time.Millisecond); err != nil || eventIDs(w) != next {
		t.Errorf("WaitEvents after %s, count 1: %s, %v; want %s", e.ID, eventIDs(w), err, next)
	}
}

// A scheduled job among a call's new jobs appends its own entry after the events held
// before it: the new jobs after it start anew (two entries), so that no id of theirs is
// another entry's and none goes back in the stream.
func TestSubmittedEventsAroundAScheduledJob(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 28)
	if _, _, err := s.CreateRunner(ctx, 28, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"go"}); err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(t, 28)
	before := rdb.XLen(ctx, keys.Events).Val()
	job := func() *model.Job { return &model.Job{CallerID: 1, ContextID: 28, FunctionName: "go#noop"} }
	subs := []store.Submission{{Job: job()}, {Job: job(), RunAt: time.Now().Add(time.Hour)}, {Job: job()}, {Job: job()}}
	if _, err := s.SubmitJobs(ctx, 28, subs, "1"); err != nil {
		t.Fatal(err)
	}
	if n := rdb.XLen(ctx, keys.Events).Val() - before; n != 5 {
		t.Errorf("%d stream entries; want 5 (2, the scheduled job's 1, 2)", n)
	}
	all, err := db.ReadEvents(ctx, "0", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var evs []store.Event
	var got []string
	for _, e := range all {
		if e.JobID != 0 && e.CallerID == 1 {
			evs = append(evs, e)
			got = append(got, fmt.Sprintf("%d %s %s", e.JobID, e.Type, e.Status))
		}
	}
	want := "1 job.created ,1 job.dispatched dispatched,2 job.created scheduled,3 job.created ,3 job.dispatched dispatched,4 job.created ,4 job.dispatched dispatched"
	if strings.Join(got, ",") != want {
		t.Fatalf("read %s; want %s", strings.Join(got, ","), want)
	}
	checkEventIDsIncrease(t, evs)
}
