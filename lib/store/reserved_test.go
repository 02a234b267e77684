package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A submission checks the keys of the job ids and message ids it reserved in one
// EXISTS each (not one a job), and so does a finish of several standalone runs for
// their result messages' ids; the claim of those jobs starts each one under its own
// id and caller (read from its key), with its started event naming them.
func TestReservedIDsCheckedTogether(t *testing.T) {
	s, db := shContext(t)
	rdb := srv.Client(t, 1)
	const n = 8
	exists := commandCalls(t, 1, "exists")
	ids := submitSh(t, s, n)
	if d := commandCalls(t, 1, "exists") - exists; d != 2 {
		t.Errorf("%d EXISTS for %d submitted jobs, want 2 (their job keys together, their messages' together)", d, n)
	}
	seen := map[uint32]bool{}
	for _, id := range ids {
		if !exists1(t, keys.Job(7, id)) || seen[id] {
			t.Fatalf("job %d: stored %v, ids %v", id, exists1(t, keys.Job(7, id)), ids)
		}
		seen[id] = true
	}
	exists = commandCalls(t, 1, "exists")
	claimAndFinish(t, db, ids)
	if d := commandCalls(t, 1, "exists") - exists; d != 1 {
		t.Errorf("%d EXISTS for the claim and the result messages of %d runs, want 1", d, n)
	}
	checkStartedEvents(t, db, ids)
	// each run's result message is its own
	msgs := map[string]bool{}
	for _, id := range ids {
		for _, m := range jobMsgs(t, rdb, 7, id) {
			if msgs[m] || !exists1(t, "message:7:"+m) {
				t.Fatalf("job 7:%d's message %s: shared or missing", id, m)
			}
			msgs[m] = true
		}
	}
	if len(msgs) != 2*n {
		t.Fatalf("%d messages for %d jobs, want a request and a result each", len(msgs), n)
	}
}

// The ids a call reserves are each its number in decimal, their keys and their
// hashes' id fields too, across tens and hundreds (lib_state's keys_free makes them
// from their tens and last digit): the jobs' ids, their request messages' and their
// result messages'.
func TestReservedIDsAcrossTens(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	for _, from := range []uint32{0, 95} {
		rdb.Set(ctx, keys.JobSeqPrefix+"7", from, 0)
		rdb.Set(ctx, keys.MessageSeq, from, 0)
		const n = 16
		ids := submitAndFinish(t, s, db, n)
		for i, id := range ids {
			if want := from + 1 + uint32(i); id != want {
				t.Fatalf("from %d: job %d has id %d, want %d (ids %v)", from, i, id, want, ids)
			}
			if got := rdb.HGet(ctx, keys.Job(7, id), "id").Val(); got != fmt.Sprint(id) {
				t.Fatalf("job 7:%d: its hash's id %q", id, got)
			}
			msgs := jobMsgs(t, rdb, 7, id)
			want := []string{fmt.Sprint(from + 1 + uint32(i)), fmt.Sprint(from + 1 + n + uint32(i))}
			if strings.Join(msgs, " ") != strings.Join(want, " ") {
				t.Fatalf("job 7:%d: messages %v, want %v", id, msgs, want)
			}
			for _, m := range msgs {
				if !exists1(t, "message:7:"+m) {
					t.Fatalf("job 7:%d: message %s missing", id, m)
				}
			}
		}
	}
}

// checkStartedEvents: a job.started event names each job 7:<id> of ids.
func checkStartedEvents(t *testing.T, db *store.DB, ids []uint32) {
	t.Helper()
	evs, err := db.ReadEvents(context.Background(), "0", 10000)
	if err != nil {
		t.Fatal(err)
	}
	startedOf := map[uint32]bool{}
	for _, e := range evs {
		if e.Type == string(model.EventJobStarted) && e.CallerID == 7 {
			startedOf[e.JobID] = true
		}
	}
	for _, id := range ids {
		if !startedOf[id] {
			t.Errorf("no job.started event names job 7:%d", id)
		}
	}
}

// exists1: key exists in context 1.
func exists1(t *testing.T, key string) bool {
	t.Helper()
	return srv.Client(t, 1).Exists(context.Background(), key).Val() == 1
}

// The new jobs of a submission of several jobs, and the result messages of a finish of
// several standalone runs that go to the router, are each copied from a scratch hash of
// the fields they share (one COPY and a short HSET each), which is gone after the call;
// they hold what a job or a message stored on its own holds (a call of one job, one
// run), whatever a scratch hash left by a failed call held. (The jobs' request
// messages, routed here, are stored short: no COPY; their reads are compared here too;
// TestSubmitSharesOneCallersFields copies a router's request messages.)
func TestMessagesCopiedFromSharedFields(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	// one job alone: its messages are written whole
	one := submitAndFinish(t, s, db, 1)
	// scratch hashes a call that failed midway left (Redis does not undo a script's
	// writes before its error) give the next calls nothing
	rdb.HSet(ctx, keys.MessageTemplate, "stray", "x")
	rdb.HSet(ctx, keys.JobTemplate, "stray", "x")
	copies := commandCalls(t, 1, "copy")
	four := submitAndFinish(t, s, db, 4)
	if d := commandCalls(t, 1, "copy") - copies; d != 8 {
		t.Errorf("%d COPYs for 4 jobs and their results, want 8", d)
	}
	if n := rdb.Exists(ctx, keys.MessageTemplate, keys.JobTemplate).Val(); n != 0 {
		t.Fatalf("%d scratch hashes left", n)
	}
	// the jobs' fields that differ by job: its id, script, messages, times, claim, trace
	jobOwn := map[string]bool{"id": true, "script": true, "msgs": true, "created_at": true, "updated_at": true, "created_at_ms": true,
		"dispatched_at_ms": true, "started_at_us": true, "finished_at_us": true, "claim": true, "trace_id": true}
	alone := rdb.HGetAll(ctx, keys.Job(7, one[0])).Val()
	for _, id := range four {
		got := rdb.HGetAll(ctx, keys.Job(7, id)).Val()
		if len(got) != len(alone) || got["id"] != fmt.Sprint(id) || got["script"] == "" {
			t.Fatalf("job %d: %v; alone: %v", id, got, alone)
		}
		for f, v := range alone {
			if g, ok := got[f]; !ok || (!jobOwn[f] && g != v) {
				t.Fatalf("job %d: %s = %q, alone %q", id, f, g, v)
			}
		}
	}
	// the fields that differ by message: its id, text, job list and times
	own := map[string]bool{"id": true, "message": true, "job": true, "created_at": true, "updated_at": true, "created_at_ms": true}
	for _, id := range four {
		for k, m := range jobMsgs(t, rdb, 7, id) {
			got := db.MessageHash(ctx, "message:7:"+m)
			want := db.MessageHash(ctx, "message:7:"+jobMsgs(t, rdb, 7, one[0])[k])
			if len(got) != len(want) {
				t.Fatalf("message %s of job %d: %v; alone: %v", m, id, got, want)
			}
			for f, v := range want {
				if g, ok := got[f]; !ok || (!own[f] && g != v) {
					t.Fatalf("message %s of job %d: %s = %q, alone %q", m, id, f, g, v)
				}
			}
			if got["id"] != m || !strings.Contains(got["job"], fmt.Sprintf(`"id":%d`, id)) {
				t.Fatalf("message %s of job %d: %v", m, id, got)
			}
		}
	}
}

// submitAndFinish submits n sh jobs of caller 7 in one call, claims them and finishes
// them together (successes); it returns their ids.
func submitAndFinish(t *testing.T, s *store.Store, db *store.DB, n int) []uint32 {
	t.Helper()
	ids := submitSh(t, s, n)
	claimAndFinish(t, db, ids)
	return ids
}

// submitSh submits n sh jobs of caller 7 in one call and returns their ids.
func submitSh(t *testing.T, s *store.Store, n int) []uint32 {
	t.Helper()
	var subs []store.Submission
	for i := range n {
		subs = append(subs, store.Submission{Job: shJob(7, 0, fmt.Sprintf("echo %d", i)), Actor: "7"})
	}
	out, err := s.SubmitGuarded(context.Background(), 1, subs, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint32, n)
	for i, o := range out {
		ids[i] = o.Job.ID
	}
	return ids
}

// claimAndFinish claims the jobs 7:<id> of ids (in order, from queue:sh) and finishes
// them together, successes.
func claimAndFinish(t *testing.T, db *store.DB, ids []uint32) {
	t.Helper()
	ctx := context.Background()
	got, err := db.ClaimStarts(ctx, "queue:sh", "w7", time.Minute, make([]string, len(ids)), store.Wake{})
	if err != nil || len(got) != len(ids) {
		t.Fatalf("claim: %d started, %v", len(got), err)
	}
	fs := make([]store.Finish, len(got))
	for i, st := range got {
		if st.Outcome != store.StartRun || st.Job == nil || st.Job.CallerID != 7 || st.Job.ID != ids[i] {
			t.Fatalf("claimed %d: %+v (want job 7:%d)", i, st, ids[i])
		}
		fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: store.JobOutcome{Status: model.JobFinished}}
	}
	oks, errs := store.FinishJobs(ctx, fs)
	for i := range oks {
		if errs[i] != nil || !oks[i] {
			t.Fatalf("finish %d: %v %v", i, oks[i], errs[i])
		}
	}
}
