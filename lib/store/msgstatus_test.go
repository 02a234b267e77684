package store_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// claimMessage puts a message hash on msg_out and claims it as a router does.
func claimMessage(t *testing.T, db *store.DB, key string) *store.Claim {
	t.Helper()
	ctx := context.Background()
	if err := srv.Client(t, int(db.ContextID)).HSet(ctx, key, "status", string(model.MessageDispatched), "kind", model.KindJobRequest).Err(); err != nil {
		t.Fatal(err)
	}
	if err := db.Enqueue(ctx, keys.MsgOut, key); err != nil {
		t.Fatal(err)
	}
	cl, err := db.Claim(ctx, keys.MsgOut, "router-a", time.Minute)
	if err != nil || cl == nil || cl.Item != key {
		t.Fatalf("claim %s: %+v %v", key, cl, err)
	}
	return cl
}

// released fails the test unless the claim is gone: its lease and its entry in the
// router's processing list.
func released(t *testing.T, db *store.DB, cl *store.Claim) {
	t.Helper()
	ctx := context.Background()
	if ok, _ := db.ExtendLease(ctx, cl, time.Minute); ok {
		t.Errorf("the claim of %s still holds its lease", cl.Item)
	}
	if slices.Contains(srv.Client(t, int(db.ContextID)).LRange(ctx, keys.Processing(cl.Consumer), 0, -1).Val(), cl.Item) {
		t.Errorf("the router's processing list still holds %s", cl.Item)
	}
}

// hashOf reads a message hash.
func hashOf(t *testing.T, db *store.DB, key string) map[string]string {
	t.Helper()
	h, err := srv.Client(t, int(db.ContextID)).HGetAll(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The router's message states go through the store: a request handed to the gateway
// is dispatched with its transport fields and its claim released; a failed one is in
// error with its reason, with the job's event when one is given and its claim
// released only when asked; a delivered result marks the request and the result
// processed and releases the result's claim.
func TestMessageStatusWrites(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 18)
	at := time.UnixMilli(1_700_000_000_123)

	sent := claimMessage(t, db, "message:1:1")
	if err := db.MessageSent(ctx, sent, "tr-9", "pk-far", at.Add(-time.Second), at); err != nil {
		t.Fatal(err)
	}
	h := hashOf(t, db, "message:1:1")
	if h["status"] != string(model.MessageDispatched) || h["transport_id"] != "tr-9" || h["transport_dst"] != "pk-far" ||
		h["dispatched_at_ms"] != strconv.FormatInt(at.Add(-time.Second).UnixMilli(), 10) || h["sent_at_ms"] != strconv.FormatInt(at.UnixMilli(), 10) ||
		h["updated_at"] != strconv.FormatInt(at.Unix(), 10) {
		t.Errorf("sent message: %v", h)
	}
	released(t, db, sent)

	late := claimMessage(t, db, "message:1:2")
	if err := db.FailMessage(ctx, late.Item, store.MessageFailure{Reason: "too late", At: at, Release: late}); err != nil {
		t.Fatal(err)
	}
	if h := hashOf(t, db, "message:1:2"); h["status"] != string(model.MessageError) || h["error"] != "too late" || h["updated_at"] != strconv.FormatInt(at.Unix(), 10) {
		t.Errorf("failed message: %v", h)
	}
	released(t, db, late)
	checkFailureWithEvent(t, db, at)

	request := claimMessage(t, db, "message:1:4")
	if err := db.Ack(ctx, request); err != nil {
		t.Fatal(err)
	}
	result := claimMessage(t, db, "message:1:5")
	if err := db.ResultDelivered(ctx, request.Item, result, at); err != nil {
		t.Fatal(err)
	}
	if h := hashOf(t, db, request.Item); h["status"] != string(model.MessageProcessed) || h["result_at_ms"] != strconv.FormatInt(at.UnixMilli(), 10) ||
		h["updated_at"] != strconv.FormatInt(at.Unix(), 10) {
		t.Errorf("request of a delivered result: %v", h)
	}
	if h := hashOf(t, db, result.Item); h["status"] != string(model.MessageProcessed) || h["updated_at"] != strconv.FormatInt(at.Unix(), 10) {
		t.Errorf("delivered result: %v", h)
	}
	released(t, db, result)
}

// checkFailureWithEvent: a failure with the job's event and no claim to release
// writes the event and leaves the claim held (the router releases it once the
// scheduler knows).
func checkFailureWithEvent(t *testing.T, db *store.DB, at time.Time) {
	t.Helper()
	ctx := context.Background()
	held := claimMessage(t, db, "message:1:3")
	last, err := db.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev := &store.Event{Type: string(model.EventJobFailed), Actor: store.ActorRouter, JobID: 7, CallerID: 1, Status: string(model.JobError), Detail: "no runner"}
	if err := db.FailMessage(ctx, held.Item, store.MessageFailure{Reason: "no runner", At: at, Event: ev}); err != nil {
		t.Fatal(err)
	}
	if h := hashOf(t, db, held.Item); h["status"] != string(model.MessageError) || h["error"] != "no runner" {
		t.Errorf("failed message: %v", h)
	}
	evs, err := db.ReadEvents(ctx, last, 10)
	if err != nil || len(evs) != 1 || evs[0].Type != string(model.EventJobFailed) || evs[0].JobID != 7 || evs[0].Detail != "no runner" {
		t.Errorf("events after the failure: %+v %v; want the job's failure", evs, err)
	}
	if ok, _ := db.ExtendLease(ctx, held, time.Minute); !ok {
		t.Error("a failure without Release released the claim")
	}
}
