package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A finish takes its runs' entries off the processing list as an LREM each from the
// tail would (lua/finish_jobs.lua: one LTRIM when they are the list's tail, in the
// claims' order or another; else an LREM each): what stays, and its order, is the
// same whichever way, a second copy of a job's entry (nearer the head) stays.
func TestFinishTakesItsRunsOffTheProcessingList(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 9)
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 6)
	enqueueJobs(t, db, q, jobs)
	started, err := db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, len(jobs)), store.Wake{})
	if err != nil || len(started) != len(jobs) {
		t.Fatalf("claim: %d started, %v", len(started), err)
	}
	rc := srv.Client(t, 9)
	proc := keys.Processing("w1")
	jk := func(i int) string { return keys.Job(1, jobs[i].ID) }
	check := func(step string, want ...string) {
		t.Helper()
		if got := rc.LRange(ctx, proc, 0, -1).Val(); !slices.Equal(got, want) {
			t.Fatalf("%s: processing list %v, want %v", step, got, want)
		}
	}
	finish := func(step string, idx ...int) {
		t.Helper()
		var fs []store.Finish
		for _, i := range idx {
			if started[i].Job == nil || started[i].Job.ID != jobs[i].ID {
				t.Fatalf("claim %d: %+v", i, started[i])
			}
			fs = append(fs, store.Finish{DB: db, Claim: started[i].Claim, Job: started[i].Job,
				Outcome: store.JobOutcome{Status: model.JobFinished}})
		}
		oks, errs := store.FinishJobs(ctx, fs)
		for k := range fs {
			if errs[k] != nil || !oks[k] {
				t.Fatalf("%s: finish of job %d: %v %v", step, idx[k], oks[k], errs[k])
			}
			if got := rc.HGet(ctx, jk(idx[k]), "status").Val(); got != string(model.JobFinished) {
				t.Fatalf("%s: job %d is %q", step, idx[k], got)
			}
		}
	}
	check("claimed (the first claimed at the tail)", jk(5), jk(4), jk(3), jk(2), jk(1), jk(0))
	finish("the tail, in another order", 1, 0)
	check("the tail, in another order", jk(5), jk(4), jk(3), jk(2))
	finish("not the tail", 3)
	check("not the tail", jk(5), jk(4), jk(2))
	rc.LPush(ctx, proc, jk(2)) // a second copy of job 2's entry, at the head
	finish("the tail, a copy at the head", 2)
	check("the tail, a copy at the head", jk(2), jk(5), jk(4))
	finish("the tail, in the claims' order", 4, 5)
	check("the tail, in the claims' order", jk(2))
}
