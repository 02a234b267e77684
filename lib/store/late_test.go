package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A runner frozen past its lease (issue 43): its claim's lease expired and a sweep
// queued the job again. While no other claim has taken the job, the run it still holds
// is the job's latest attempt: its end is recorded, its lease taken back, and this
// worker's own claims never start it a second time; once another claim has taken the
// job, the frozen run's end and renewal are refused.

// sweptClaim makes context ctxID with a flow of one job queued on the sh queue, starts
// it (worker w1) under a lease that has expired, and sweeps it: the job is back on the
// queue, still naming the claim.
func sweptClaim(t *testing.T, ctxID uint32) (*store.DB, string, *store.Claim, *model.Job) {
	t.Helper()
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, ctxID)
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 1)
	enqueueJobs(t, db, q, jobs)
	got, err := db.ClaimStarts(ctx, q, "w1", time.Millisecond, make([]string, 1), store.Wake{})
	if err != nil || len(got) != 1 || got[0].Outcome != store.StartRun {
		t.Fatalf("claim: %+v %v", got, err)
	}
	moved, err := db.RequeueExpired(ctx, time.Now().Add(time.Second), 100)
	if err != nil || len(moved) != 1 || moved[0].Item != got[0].Claim.Item {
		t.Fatalf("sweep: %+v %v", moved, err)
	}
	return db, q, got[0].Claim, got[0].Job
}

// lateState is what a late end or re-take must leave: the job's queue, the claim's
// processing list and the context's leases.
type lateState struct{ queued, processing, leases int64 }

func readLateState(t *testing.T, ctxID int, q, worker string) lateState {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, ctxID)
	return lateState{rc.LLen(ctx, q).Val(), rc.LLen(ctx, keys.Processing(worker)).Val(), rc.ZCard(ctx, keys.Leases).Val()}
}

func TestLateFinishAfterASweepIsRecorded(t *testing.T) {
	ctx := context.Background()
	db, q, cl, j := sweptClaim(t, 41)
	rc := srv.Client(t, 41)
	if st := readLateState(t, 41, q, "w1"); st != (lateState{1, 0, 0}) {
		t.Fatalf("after the sweep: %+v, want the job queued and nothing held", st)
	}
	msgs, evs := rc.LLen(ctx, keys.MsgOut).Val(), rc.XLen(ctx, keys.Events).Val()
	ok, err := db.FinishJob(ctx, cl, j, store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"k": "v"}})
	if !ok || err != nil {
		t.Fatalf("the late end was refused: %v %v", ok, err)
	}
	stored, err := db.LoadJob(ctx, 1, j.ID)
	if err != nil || stored.Status != model.JobFinished || stored.Attempt != j.Attempt || stored.Result["k"] != "v" {
		t.Fatalf("job after the late end: %+v %v", stored, err)
	}
	if st := readLateState(t, 41, q, "w1"); st != (lateState{}) {
		t.Fatalf("after the late end: %+v, want the queued copy gone and nothing held", st)
	}
	member := fmt.Sprintf("1:%d", j.ID)
	if rc.ZScore(ctx, keys.JobIndex+":"+string(model.JobFinished), member).Err() != nil || rc.ZScore(ctx, keys.JobIndex+":"+string(model.JobStarted), member).Err() == nil {
		t.Fatal("the status indexes do not say finished")
	}
	if m, e := rc.LLen(ctx, keys.MsgOut).Val()-msgs, rc.XLen(ctx, keys.Events).Val()-evs; m != 1 || e != 1 {
		t.Fatalf("the late end pushed %d result messages and %d events, want 1 and 1", m, e)
	}
	// Reported again (a lost answer): nothing changes.
	if ok, err := db.FinishJob(ctx, cl, j, store.JobOutcome{Status: model.JobError, Error: "again"}); !ok || err != nil {
		t.Fatalf("the same end again: %v %v", ok, err)
	}
	if m, e := rc.LLen(ctx, keys.MsgOut).Val()-msgs, rc.XLen(ctx, keys.Events).Val()-evs; m != 1 || e != 1 {
		t.Fatalf("the second report pushed more: %d messages, %d events", m, e)
	}
	if again, _ := db.LoadJob(ctx, 1, j.ID); again.Status != model.JobFinished || again.Error != "" {
		t.Fatalf("the second report changed the job: %+v", again)
	}
	// Nothing of the job is left to claim.
	if got, err := db.ClaimStarts(ctx, q, "w2", time.Minute, make([]string, 1), store.Wake{}); err != nil || len(got) != 0 {
		t.Fatalf("claim after the late end: %+v %v", got, err)
	}
}

func TestLateFinishAfterAnotherClaimIsRefused(t *testing.T) {
	ctx := context.Background()
	db, q, cl, j := sweptClaim(t, 42)
	again, err := db.ClaimStarts(ctx, q, "w2", time.Minute, make([]string, 1), store.Wake{})
	if err != nil || len(again) != 1 || again[0].Outcome != store.StartRun {
		t.Fatalf("another worker's claim: %+v %v", again, err)
	}
	if r, err := db.RenewLease(ctx, cl, time.Minute); r != store.LeaseLost || err != nil {
		t.Fatalf("the frozen claim's renewal: %v %v, want lost", r, err)
	}
	if ok, err := db.FinishJob(ctx, cl, j, store.JobOutcome{Status: model.JobFinished}); ok || err != nil {
		t.Fatalf("the frozen claim's late end: %v %v, want refused", ok, err)
	}
	stored, _ := db.LoadJob(ctx, 1, j.ID)
	if stored.Status != model.JobStarted || stored.Worker != "w2" {
		t.Fatalf("job after the refused end: %+v", stored)
	}
	if st := readLateState(t, 42, q, "w2"); st != (lateState{0, 1, 1}) {
		t.Fatalf("the running claim's state: %+v", st)
	}
	if ok, err := db.FinishJob(ctx, again[0].Claim, again[0].Job, store.JobOutcome{Status: model.JobFinished}); !ok || err != nil {
		t.Fatalf("the running claim's end: %v %v", ok, err)
	}
}

func TestRenewLeaseTakesASweptClaimBack(t *testing.T) {
	ctx := context.Background()
	db, q, cl, j := sweptClaim(t, 43)
	srv.Client(t, 0).Del(ctx, keys.Busy) // a tidy sweep found nothing meanwhile
	if r, err := db.RenewLease(ctx, cl, time.Minute); r != store.LeaseRetaken || err != nil {
		t.Fatalf("renewal of the swept claim: %v %v, want retaken", r, err)
	}
	if st := readLateState(t, 43, q, "w1"); st != (lateState{0, 1, 1}) {
		t.Fatalf("after the re-take: %+v, want the claim held and nothing queued", st)
	}
	if srv.Client(t, 0).ZScore(ctx, keys.Busy, "43").Err() != nil {
		t.Fatal("the re-taken lease's context is not marked busy for the sweeps")
	}
	if moved, err := db.RequeueExpired(ctx, time.Now(), 100); err != nil || len(moved) != 0 {
		t.Fatalf("the re-taken lease is expired again: %+v %v", moved, err)
	}
	if r, err := db.RenewLease(ctx, cl, time.Minute); r != store.LeaseExtended || err != nil {
		t.Fatalf("the next renewal: %v %v, want extended", r, err)
	}
	if got, err := db.ClaimStarts(ctx, q, "w2", time.Minute, make([]string, 1), store.Wake{}); err != nil || len(got) != 0 {
		t.Fatalf("another worker claims after the re-take: %+v %v", got, err)
	}
	if ok, err := db.FinishJob(ctx, cl, j, store.JobOutcome{Status: model.JobFinished}); !ok || err != nil {
		t.Fatalf("end after the re-take: %v %v", ok, err)
	}
	if st := readLateState(t, 43, q, "w1"); st != (lateState{}) {
		t.Fatalf("after the end: %+v", st)
	}
	// A message's lease is not taken back.
	srv.Client(t, 43).LPush(ctx, keys.MsgOut, "message:1:1")
	mc, err := db.Claim(ctx, keys.MsgOut, "router-a", time.Millisecond)
	if err != nil || mc == nil {
		t.Fatal(mc, err)
	}
	if _, err := db.RequeueExpired(ctx, time.Now().Add(time.Second), 100); err != nil {
		t.Fatal(err)
	}
	if r, _ := db.RenewLease(ctx, mc, time.Minute); r != store.LeaseLost {
		t.Fatalf("a swept message claim: %v, want lost", r)
	}
}

func TestOwnClaimOfASweptJobTakesItBack(t *testing.T) {
	ctx := context.Background()
	db, q, cl, j := sweptClaim(t, 44)
	rc := srv.Client(t, 44)
	before := rc.HGetAll(ctx, cl.Item).Val()
	evs := rc.XLen(ctx, keys.Events).Val()
	got, err := db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 1), store.Wake{})
	if err != nil || len(got) != 1 || got[0].Outcome != store.StartRetaken || got[0].Claim.ID != cl.ID || got[0].Job != nil {
		t.Fatalf("the same worker's claim: %+v %v, want its earlier claim taken back", got, err)
	}
	if after := rc.HGetAll(ctx, cl.Item).Val(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the re-take changed the job:\n%v\n%v", before, after)
	}
	if n := rc.XLen(ctx, keys.Events).Val(); n != evs {
		t.Fatalf("the re-take added %d events", n-evs)
	}
	if st := readLateState(t, 44, q, "w1"); st != (lateState{0, 1, 1}) {
		t.Fatalf("after the re-take: %+v", st)
	}
	if r, err := db.RenewLease(ctx, cl, time.Minute); r != store.LeaseExtended || err != nil {
		t.Fatalf("the earlier claim's renewal: %v %v", r, err)
	}
	// The worker does not run it (its run is gone): it releases the claim, and the
	// job, no longer naming it, starts anew.
	if moved, err := db.ReleaseClaims(ctx, "w1", []string{cl.ID}); err != nil || len(moved) != 1 {
		t.Fatalf("release: %+v %v", moved, err)
	}
	if c := rc.HGet(ctx, cl.Item, "claim").Val(); c != "" {
		t.Fatalf("the released job still names claim %q", c)
	}
	got, err = db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 1), store.Wake{})
	if err != nil || len(got) != 1 || got[0].Outcome != store.StartRun || got[0].Claim.ID == cl.ID {
		t.Fatalf("claim after the release: %+v %v", got, err)
	}
	if ok, _ := db.FinishJob(ctx, cl, j, store.JobOutcome{Status: model.JobFinished}); ok {
		t.Fatal("the released claim's end was recorded")
	}
}
