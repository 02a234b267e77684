package store_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// The successful end of an awaited job (job.run's: its hash holds awaited) that the
// runner's finish applies is told on coord:jobdone with the job's hash as the end left
// it, read in the same step: a job.run call answers with it, without a read of its
// own. A job nobody awaits, and an awaited one whose hash is too large to travel in a
// notice, are told by reference as before.
func TestFinishTellsAwaitedEndsWithTheirHashes(t *testing.T) {
	s, db, rc := applyContext(t, 31)
	ctx := context.Background()
	sub := srv.Client(t, 0).Subscribe(ctx, keys.JobDone)
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	mk := func(awaited bool, script string) *model.Job {
		return &model.Job{CallerID: 1, Script: script, ScriptType: "sh", Awaited: awaited}
	}
	big := strings.Repeat("x", 17000) // its hash is over the notice's bound
	res, err := s.SubmitJobs(ctx, 31, []store.Submission{{Job: mk(true, "true")}, {Job: mk(false, "true")}, {Job: mk(true, big)}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	awaited, plain, large := res[0].Job, res[1].Job, res[2].Job
	runs := claimSh(t, db, 3)
	fs := make([]store.Finish, len(runs))
	for i, st := range runs {
		if st.Job.Awaited != (st.Job.ID != plain.ID) {
			t.Fatalf("claimed job %d reads awaited %v", st.Job.ID, st.Job.Awaited)
		}
		// a result whose values hold the notice's separators
		o := store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"out": "a:b\n=31:1:9 2\n3:x"}}
		fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: o, Apply: true}
	}
	if oks, errs, applied := store.FinishJobsApplied(ctx, fs); applied.Ends != 3 {
		t.Fatalf("finish: %v %v %+v", oks, errs, applied)
	}
	var refs, told []string
	for len(refs) == 0 || len(told) == 0 {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		m, err := sub.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("notices so far: %q %q: %v", refs, told, err)
		}
		if store.IsAwaitedNotice(m.Payload) {
			told = append(told, m.Payload)
		} else {
			refs = append(refs, m.Payload)
		}
	}
	if want := "31:1:" + itoa(plain.ID) + " 31:1:" + itoa(large.ID); len(refs) != 1 || refs[0] != want {
		t.Fatalf("notices by reference %q, want one %q", refs, want)
	}
	ended, err := store.ParseAwaitedNotice(told[0])
	if err != nil || len(told) != 1 || len(ended) != 1 {
		t.Fatalf("notices with hashes %q: %+v %v; want one of one job", told, ended, err)
	}
	if want := (model.JobRef{ContextID: 31, CallerID: 1, ID: awaited.ID}); ended[0].Ref != want {
		t.Fatalf("told job %v, want %v", ended[0].Ref, want)
	}
	h := map[string]string{}
	for i := 0; i+1 < len(ended[0].Pairs); i += 2 {
		h[ended[0].Pairs[i]] = ended[0].Pairs[i+1]
	}
	if stored := rc.HGetAll(ctx, keys.Job(1, awaited.ID)).Val(); !maps.Equal(h, stored) {
		t.Fatalf("told hash\n%v\nstored\n%v", h, stored)
	}
	j, err := db.JobFromPairs(1, awaited.ID, ended[0].Pairs)
	if err != nil || j.Status != model.JobFinished || j.Result["out"] != "a:b\n=31:1:9 2\n3:x" || !j.Awaited {
		t.Fatalf("the told job: %+v %v", j, err)
	}
}

// A notice of awaited jobs reads job by job, each value as long as its length says
// (whatever bytes it holds); one that does not read gives the jobs before the fault
// and an error naming it.
func TestParseAwaitedNotice(t *testing.T) {
	got, err := store.ParseAwaitedNotice("=1:2:3 2\n2:id1:34:a\nb:1:\n=1:2:4 0\n")
	if err != nil || len(got) != 2 {
		t.Fatalf("%+v %v", got, err)
	}
	if got[0].Ref != (model.JobRef{ContextID: 1, CallerID: 2, ID: 3}) || strings.Join(got[0].Pairs, "|") != "id|3|a\nb:|\n" {
		t.Fatalf("first job %+v", got[0])
	}
	if got[1].Ref != (model.JobRef{ContextID: 1, CallerID: 2, ID: 4}) || len(got[1].Pairs) != 0 {
		t.Fatalf("second job %+v", got[1])
	}
	for payload, want := range map[string]string{
		"1:2:3 0\n":               "does not begin with '='",
		"=1:2:3 0":                "no end of line",
		"=1:2 0\n":                "is not \"<context>:<caller>:<id> <pairs>\"",
		"=1:2:3\n":                "is not \"<context>:<caller>:<id> <pairs>\"",
		"=1:2:3 x\n":              "is not a count of pairs",
		"=1:2:3 1\n2:id9:toolong": "item 2 is not <length>:<bytes>",
		"=1:2:3 1\n2:id1":         "item 2 is not <length>:<bytes>",
		"=1:2:3 0\n=1:2:4 0\nx":   "job 3 does not begin with '='",
	} {
		got, err := store.ParseAwaitedNotice(payload)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %+v %v; want an error with %q", payload, got, err, want)
		}
	}
	if got, _ := store.ParseAwaitedNotice("=1:2:3 0\n=1:2:4 0\nx"); len(got) != 2 {
		t.Errorf("the jobs before a fault: %+v", got)
	}
}
