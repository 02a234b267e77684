package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A claim's job.started events and a finish's job.finished and job.failed go in two
// stream entries each, whatever the call's jobs (lua/lib_state.lua's ev_flush); every
// reader gives each event back with its id, type, status and detail, and a reader that
// stopped at any of them reads on from there.
func TestClaimAndFinishEventsInTwoEntries(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 29)
	if _, _, err := s.CreateRunner(ctx, 29, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"go"}); err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(t, 29)
	subs := make([]store.Submission, 3)
	for i := range subs {
		subs[i] = store.Submission{Job: &model.Job{CallerID: 1, ContextID: 29, FunctionName: "go#noop"}}
	}
	if _, err := s.SubmitJobs(ctx, 29, subs, "1"); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := keys.Queue((&model.Job{FunctionName: "go#noop"}).QueueSuffix())
	before := rdb.XLen(ctx, keys.Events).Val()
	started, err := db.ClaimStartsFresh(ctx, q, "w1", time.Minute, 3, store.Wake{})
	if err != nil || len(started) != 3 {
		t.Fatalf("claim: %d started, %v", len(started), err)
	}
	if n := rdb.XLen(ctx, keys.Events).Val() - before; n != 2 {
		t.Errorf("a claim of 3 jobs wrote %d stream entries; want 2", n)
	}
	// ends of each kind, one with an error of several words and lines
	const failure = "exit status 3: no such file\n  at line 2 (ünïcode)"
	outcomes := []store.JobOutcome{{Status: model.JobFinished}, {Status: model.JobError, Error: failure}, {Status: model.JobFinished}}
	var fs []store.Finish
	for i, st := range started {
		fs = append(fs, store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: outcomes[i]})
	}
	before = rdb.XLen(ctx, keys.Events).Val()
	oks, errs := store.FinishJobs(ctx, fs)
	for i := range oks {
		if !oks[i] || errs[i] != nil {
			t.Fatalf("finish %d: %v %v", i, oks[i], errs[i])
		}
	}
	if n := rdb.XLen(ctx, keys.Events).Val() - before; n != 2 {
		t.Errorf("a finish of 3 runs wrote %d stream entries; want 2", n)
	}
	evs, err := db.ReadEvents(ctx, last, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d:%d %s %s %s %q", e.CallerID, e.JobID, e.Type, e.Actor, e.Status, e.Detail))
	}
	for _, st := range started {
		want = append(want, fmt.Sprintf("1:%d job.started runner started %q", st.Job.ID, "attempt 1 on w1"))
	}
	for i, st := range started {
		if outcomes[i].Status == model.JobFinished {
			want = append(want, fmt.Sprintf("1:%d job.finished runner finished %q", st.Job.ID, ""))
		} else {
			want = append(want, fmt.Sprintf("1:%d job.failed runner error %q", st.Job.ID, failure))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	checkEventIDsIncrease(t, evs)
	for i := range evs {
		checkReadOnFrom(t, db, evs, i)
	}
	if n, err := db.NewestEvents(ctx, time.UnixMilli(0), 4); err != nil || eventIDs(n) != eventIDs(evs[2:]) {
		t.Errorf("NewestEvents, 4: %s, %v; want %s", eventIDs(n), err, eventIDs(evs[2:]))
	}
	if id, err := db.LastEventID(ctx); err != nil || id != evs[5].ID {
		t.Errorf("LastEventID: %s, %v; want %s", id, err, evs[5].ID)
	}
}

// Entries an earlier version wrote — a submission's job.created and job.dispatched of
// one job in one entry of type "cd", its id the job.dispatched's — read as they did: two
// events, the job.created with the id one sequence number before, each a position to
// read on from (a rolling upgrade reads the stream the previous version wrote).
func TestEarlierSharedEntriesStillRead(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 30)
	rdb := srv.Client(t, 30)
	rdb.Del(ctx, keys.Events)
	job := func(typ string, id int) []any {
		return []any{"type", typ, "actor", "1", "flow_id", "0", "job_id", fmt.Sprint(id), "caller_id", "1", "detail", ""}
	}
	for _, e := range []struct {
		id     string
		values []any
	}{
		{"100-0", job("c", 1)}, {"100-1", job("d", 1)}, {"100-3", job("cd", 2)}, {"100-5", job("cd", 3)},
		{"100-6", []any{"type", "s", "actor", "runner", "flow_id", "0", "job_id", "1", "caller_id", "1", "detail", "attempt 1 on w"}},
	} {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: e.id, Values: e.values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := db.ReadEvents(ctx, "0", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s %d %s %s %s", e.ID, e.JobID, e.Type, e.Status, e.Detail))
	}
	want := []string{
		"100-0 1 job.created  " + keys.Job(1, 1), "100-1 1 job.dispatched dispatched attempt 1",
		"100-2 2 job.created  " + keys.Job(1, 2), "100-3 2 job.dispatched dispatched attempt 1",
		"100-4 3 job.created  " + keys.Job(1, 3), "100-5 3 job.dispatched dispatched attempt 1",
		"100-6 1 job.started started attempt 1 on w",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := range evs {
		checkReadOnFrom(t, db, evs, i)
	}
}

// A submission after an entry whose sequence number is past what a Lua number holds
// exactly (a client's explicit id) puts its events' entry at the next millisecond:
// every event is read back, after that entry, each with an id of its own, in order.
func TestManyEventsAfterAHugeSequence(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 31)
	if _, _, err := s.CreateRunner(ctx, 31, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"go"}); err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(t, 31)
	// an hour ahead of the clock, so that the submission's XADD * follows it in its ms
	planted := fmt.Sprintf("%d-%d", time.Now().Add(time.Hour).UnixMilli(), uint64(1)<<60)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: planted, Values: []any{"type", "flow.started"}}).Err(); err != nil {
		t.Fatal(err)
	}
	subs := make([]store.Submission, 3)
	for i := range subs {
		subs[i] = store.Submission{Job: &model.Job{CallerID: 1, ContextID: 31, FunctionName: "go#noop"}}
	}
	out, err := s.SubmitJobs(ctx, 31, subs, "1")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := db.ReadEvents(ctx, planted, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d %s", e.JobID, e.Type))
	}
	for _, o := range out {
		want = append(want, fmt.Sprintf("%d job.created", o.Job.ID), fmt.Sprintf("%d job.dispatched", o.Job.ID))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read %s; want %s", strings.Join(got, ","), strings.Join(want, ","))
	}
	checkEventIDsIncrease(t, append([]store.Event{{ID: planted, TimeMs: mustMs(t, planted)}}, evs...))
	for i := range evs {
		checkReadOnFrom(t, db, evs, i)
	}
}

func mustMs(t *testing.T, id string) int64 {
	t.Helper()
	var ms int64
	if _, err := fmt.Sscanf(id, "%d-", &ms); err != nil {
		t.Fatal(err)
	}
	return ms
}
