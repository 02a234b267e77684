package store_test

import (
	"context"
	"fmt"
	"slices"
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
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	const n = 8
	var subs []store.Submission
	for i := range n {
		subs = append(subs, store.Submission{Job: shJob(7, 0, fmt.Sprintf("echo %d", i)), Actor: "7"})
	}
	exists := commandCalls(t, 1, "exists")
	out, err := s.SubmitGuarded(ctx, 1, subs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := commandCalls(t, 1, "exists") - exists; d != 2 {
		t.Errorf("%d EXISTS for %d submitted jobs, want 2 (their job keys together, their messages' together)", d, n)
	}
	var ids []uint32
	for _, o := range out {
		if !exists1(t, keys.Job(7, o.Job.ID)) || slices.Contains(ids, o.Job.ID) {
			t.Fatalf("job %d: stored %v, ids before %v", o.Job.ID, exists1(t, keys.Job(7, o.Job.ID)), ids)
		}
		ids = append(ids, o.Job.ID)
	}
	got, err := db.ClaimStarts(ctx, "queue:sh", "w7", time.Minute, make([]string, n), store.Wake{})
	if err != nil || len(got) != n {
		t.Fatalf("claim: %d started, %v", len(got), err)
	}
	fs := make([]store.Finish, len(got))
	for i, st := range got {
		if st.Outcome != store.StartRun || st.Job == nil || st.Job.CallerID != 7 || st.Job.ID != ids[i] {
			t.Fatalf("claimed %d: %+v %+v (want job 7:%d)", i, st, st.Job, ids[i])
		}
		fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: store.JobOutcome{Status: model.JobFinished}}
	}
	evs, err := db.ReadEvents(ctx, "0", 10000)
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
	exists = commandCalls(t, 1, "exists")
	oks, errs := store.FinishJobs(ctx, fs)
	for i := range oks {
		if errs[i] != nil || !oks[i] {
			t.Fatalf("finish %d: %v %v", i, oks[i], errs[i])
		}
	}
	if d := commandCalls(t, 1, "exists") - exists; d != 1 {
		t.Errorf("%d EXISTS for the result messages of %d runs, want 1", d, n)
	}
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

// exists1: key exists in context 1.
func exists1(t *testing.T, key string) bool {
	t.Helper()
	return srv.Client(t, 1).Exists(context.Background(), key).Val() == 1
}
