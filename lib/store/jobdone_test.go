package store_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
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
// notice (as the runner reckons from what it ran, or as its DUMP comes out), are told
// by reference as before.
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
	res, err := s.SubmitJobs(ctx, 31, []store.Submission{{Job: mk(true, "true")}, {Job: mk(false, "true")}, {Job: mk(true, big)}, {Job: mk(true, "true")}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	awaited, plain, large, dumped := res[0].Job, res[1].Job, res[2].Job, res[3].Job
	// a field the runner does not reckon with, too large to travel once dumped (LZF
	// does not shrink it)
	r, noise := rand.New(rand.NewPCG(1, 2)), make([]byte, 20000)
	for i := range noise {
		noise[i] = byte(r.IntN(256))
	}
	rc.HSet(ctx, keys.Job(1, dumped.ID), "padding", string(noise))
	// a result whose value holds bytes of the notice's own (and is over 255 bytes)
	out := "=\u00a5\u0090\u00dc:\n" + strings.Repeat("y", 300)
	runs := claimSh(t, db, 4)
	fs := make([]store.Finish, len(runs))
	for i, st := range runs {
		if st.Job.Awaited != (st.Job.ID != plain.ID) {
			t.Fatalf("claimed job %d reads awaited %v", st.Job.ID, st.Job.Awaited)
		}
		o := store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"out": out}}
		fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: o, Apply: true}
	}
	if oks, errs, applied := store.FinishJobsApplied(ctx, fs); applied.Ends != 4 {
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
	if want := "31:1:" + itoa(plain.ID) + " 31:1:" + itoa(large.ID) + " 31:1:" + itoa(dumped.ID); len(refs) != 1 || refs[0] != want {
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
	if err != nil || j.Status != model.JobFinished || j.Result["out"] != out || !j.Awaited {
		t.Fatalf("the told job: %+v %v", j, err)
	}
}

// A notice of awaited jobs reads job by job, each hash's DUMP as long as its line says
// (whatever bytes it holds); one that does not read gives the jobs before the fault
// and an error naming it.
func TestParseAwaitedNotice(t *testing.T) {
	srv.Flush(t)
	ctx := context.Background()
	rc := srv.Client(t, 1)
	rc.HSet(ctx, "a", "id", "3", "out", "x\n1:2:9 5\n=")
	rc.HSet(ctx, "b", "id", "4")
	rc.Set(ctx, "s", "not a hash", 0)
	a, b, str := rc.Dump(ctx, "a").Val(), rc.Dump(ctx, "b").Val(), rc.Dump(ctx, "s").Val()
	job := func(ref, dump string) string { return fmt.Sprintf("%s %d\n%s", ref, len(dump), dump) }
	got, err := store.ParseAwaitedNotice("=" + job("1:2:3", a) + job("1:2:4", b))
	if err != nil || len(got) != 2 {
		t.Fatalf("%+v %v", got, err)
	}
	if got[0].Ref != (model.JobRef{ContextID: 1, CallerID: 2, ID: 3}) || strings.Join(got[0].Pairs, "|") != "id|3|out|x\n1:2:9 5\n=" {
		t.Fatalf("first job %+v", got[0])
	}
	if got[1].Ref != (model.JobRef{ContextID: 1, CallerID: 2, ID: 4}) || strings.Join(got[1].Pairs, "|") != "id|4" {
		t.Fatalf("second job %+v", got[1])
	}
	for payload, want := range map[string]string{
		job("1:2:3", a):                         "does not begin with '='",
		"=1:2:3 5":                              "job 1 has no",
		"=1:2:3\n":                              "job 1 has no",
		"=1:2 5\nabcde":                         "job 1: ",
		"=1:2:3 x\n":                            "job 1:2:3: a dump of \"x\" bytes",
		"=" + job("1:2:3", a) + "1:2:4 99\nabc": "job 1:2:4: a dump of \"99\" bytes where 3 are left",
		"=" + job("1:2:3", a) + job("1:2:4", str): "job 1:2:4: hash dump: object type 0",
	} {
		got, err := store.ParseAwaitedNotice(payload)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %+v %v; want an error with %q", payload, got, err, want)
		}
	}
	if got, _ := store.ParseAwaitedNotice("=" + job("1:2:3", a) + job("1:2:4", str)); len(got) != 1 {
		t.Errorf("the jobs before a fault: %+v", got)
	}
}
