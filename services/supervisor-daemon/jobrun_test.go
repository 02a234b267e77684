package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// runService is a replica whose waiter follows coord:jobdone (as service.go feeds it),
// on submitStore's Redis, with the scheduler's settings recorded (a runner's finish
// applies the ends of standalone jobs itself).
func runService(t *testing.T) (*redistest.Server, *store.Store, *service) {
	t.Helper()
	srv, st := submitStore(t)
	s := benchService(t, st)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := st.SetSchedulerSettings(ctx, time.Hour, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		_ = followNotices(ctx, st, []string{keys.JobDone}, nil, func(n notice) {
			if !n.again {
				s.waiter.received(n.channel, n.payload, zerolog.Nop())
			}
		}, ready)
	}()
	waitClosed(t, "the subscription to "+keys.JobDone, ready)
	return srv, st, s
}

// runCall makes a job.run call of an sh job in context 1 as its executor; its answer
// comes on the channel returned.
func runCall(s *service) <-chan jobRunAnswer {
	out := make(chan jobRunAnswer, 1)
	go func() {
		j, err := s.jobRun(context.Background(), Principal{Actor: 2}, jobRunParams{ContextID: 1, Job: &jobIn{Script: "true", ScriptType: "sh"}})
		out <- jobRunAnswer{j, err}
	}()
	return out
}

type jobRunAnswer struct {
	j   *model.Job
	err error
}

// claimRun plays runner 1: it waits for the call's job on queue:sh (its wake token)
// and claims it.
func claimRun(t *testing.T, st *store.Store) store.Started {
	t.Helper()
	ctx := context.Background()
	w, err := st.WaitWake(ctx, time.Minute, store.WakeSetsOn(st.Servers(), keys.WakeRunner(1, keys.Queue("sh")))...)
	if err != nil || w.Key == "" {
		t.Fatalf("no wake token for the call's job: %+v %v", w, err)
	}
	db, err := st.Ctx(1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := db.ClaimStarts(ctx, keys.Queue("sh"), "w1", time.Minute, make([]string, 1), store.Wake{})
	if err != nil || len(got) != 1 || got[0].Outcome != store.StartRun {
		t.Fatalf("claim: %+v %v", got, err)
	}
	return got[0]
}

func answer(t *testing.T, ch <-chan jobRunAnswer) jobRunAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(time.Minute):
		t.Fatal("job.run did not answer within a minute")
		return jobRunAnswer{}
	}
}

// job.run stores its job awaited, and the runner's finish tells the job's successful
// end with its hash: the call answers with it, reading nothing after its submission
// (here every read of an ended job fails).
func TestJobRunAnswersWithTheEndsHash(t *testing.T) {
	srv, st, s := runService(t)
	dead, err := store.Open(context.Background(), store.Options{URL: srv.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	dead.Close() // its reads fail
	s.loads = newEndedLoads(dead)
	t.Cleanup(s.loads.shutdown)
	call := runCall(s)
	run := claimRun(t, st)
	if !run.Job.Awaited {
		t.Fatalf("job.run's job %d was stored without awaited", run.Job.ID)
	}
	o := store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"out": "done"}}
	db, err := st.Ctx(1)
	if err != nil {
		t.Fatal(err)
	}
	oks, errs, applied := store.FinishJobsApplied(context.Background(), []store.Finish{{DB: db, Claim: run.Claim, Job: run.Job, Outcome: o, Apply: true}})
	if applied.Ends != 1 {
		t.Fatalf("finish: %v %v %+v", oks, errs, applied)
	}
	a := answer(t, call)
	if a.err != nil || a.j.ID != run.Job.ID || a.j.Status != model.JobFinished || a.j.Result["out"] != "done" || a.j.FinishedAtUs == 0 {
		t.Fatalf("job.run answered %+v %v; want job %d finished with its result", a.j, a.err, run.Job.ID)
	}
}

// The call answers with the hash its notice tells, not with a read of the job: a
// notice telling an end the store does not hold (the job still runs there) answers.
func TestJobRunTakesTheToldHash(t *testing.T) {
	srv, st, s := runService(t)
	call := runCall(s)
	run := claimRun(t, st)
	pairs := []string{"id", fmt.Sprint(run.Job.ID), "caller_id", "2", "context_id", "1", "status", "finished", "result", `{"out":"from the notice"}`}
	notice := awaitedNotice(fmt.Sprintf("1:2:%d", run.Job.ID), pairs)
	if err := srv.Client(t, 0).Publish(context.Background(), keys.JobDone, notice).Err(); err != nil {
		t.Fatal(err)
	}
	a := answer(t, call)
	if a.err != nil || a.j.Status != model.JobFinished || a.j.Result["out"] != "from the notice" {
		t.Fatalf("job.run answered %+v %v; want the told job", a.j, a.err)
	}
}
