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

// Issue 49: an event stores no time (its id's is its time_ms), for the job events
// whose type says it no status, and the frequent job events' types as short codes; a
// read gives all three back as before, and reads an entry of an earlier version (the
// type spelled out) the same.
func TestEventsStoreNoTimeNorImpliedStatus(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 50)
	ctx := context.Background()
	rc := srv.Client(t, 50)
	before := time.Now().UnixMilli() - 60_000 // the context's creation, before
	if _, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 50, Script: "true", ScriptType: "sh"}, "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
		store.AddEvent(ctx, p, &store.Event{Type: string(model.EventJobStarted), Actor: "runner", JobID: 1, CallerID: 1, Status: string(model.JobStarted), Detail: "d"})
		store.AddEvent(ctx, p, &store.Event{Type: string(model.EventJobCancelled), Actor: "7", JobID: 1, CallerID: 1, Status: string(model.JobError)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	raw := rc.XRange(ctx, keys.Events, "-", "+").Val() // context.created, job.created, job.started, job.cancelled
	if len(raw) != 4 {
		t.Fatalf("%d events, want 4: %v", len(raw), raw)
	}
	for _, e := range raw {
		if _, ok := e.Values["time_ms"]; ok {
			t.Fatalf("event %s stores time_ms: %v", e.ID, e.Values)
		}
	}
	if _, ok := raw[2].Values["status"]; ok || raw[2].Values["type"] != "s" {
		t.Fatalf("job.started stores its status, or its type spelled out: %v", raw[2].Values)
	}
	if raw[1].Values["type"] != "c" || raw[3].Values["type"] != string(model.EventJobCancelled) {
		t.Fatalf("job.created stored as %v, job.cancelled as %v", raw[1].Values["type"], raw[3].Values["type"])
	}
	// an earlier version's entry: its type spelled out
	rc.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, Values: []any{"type", "job.finished", "actor", "runner", "job_id", "1", "caller_id", "1"}})
	evs, err := db.ReadEvents(ctx, "0", 10)
	if err != nil || len(evs) != 5 {
		t.Fatal(len(evs), err)
	}
	for i, want := range []model.EventType{model.EventContextCreated, model.EventJobCreated, model.EventJobStarted, model.EventJobCancelled, model.EventJobFinished} {
		if evs[i].Type != string(want) {
			t.Fatalf("event %d read as %q, want %q", i, evs[i].Type, want)
		}
	}
	if evs[4].Status != string(model.JobFinished) {
		t.Fatalf("an earlier version's job.finished: status %q", evs[4].Status)
	}
	checkDispatchDetailsRead(t, db, rc, evs[4].ID)
	after := time.Now().UnixMilli()
	for _, e := range evs {
		if e.TimeMs < before-1000 || e.TimeMs > after+1000 || !strings.HasPrefix(e.ID, fmt.Sprint(e.TimeMs, "-")) {
			t.Fatalf("event %s: time_ms %d, want its id's (between %d and %d)", e.ID, e.TimeMs, before, after)
		}
	}
	if evs[2].Status != string(model.JobStarted) || evs[3].Status != string(model.JobError) || evs[1].Status != "" {
		t.Fatalf("statuses read: %q %q %q", evs[1].Status, evs[2].Status, evs[3].Status)
	}
}

// checkFirstDispatchStoresNoDetail: the job.dispatched event of job id's first attempt
// (of caller 1, in the DB of rc) stores no detail (issue 49), and reads "attempt 1".
func checkFirstDispatchStoresNoDetail(t *testing.T, db *store.DB, rc *redis.Client, id uint32) {
	t.Helper()
	ctx := context.Background()
	n := 0
	for _, e := range rc.XRange(ctx, keys.Events, "-", "+").Val() {
		if e.Values["type"] == model.EventJobDispatched.Stored() && e.Values["job_id"] == fmt.Sprint(id) {
			if n++; e.Values["detail"] != "" {
				t.Fatalf("job %d's first dispatch stores detail %q", id, e.Values["detail"])
			}
		}
	}
	evs, err := db.ReadEvents(ctx, "0", 1000)
	if err != nil || n != 1 {
		t.Fatalf("job %d: %d dispatch events, %v", id, n, err)
	}
	for _, e := range evs {
		if e.Type == string(model.EventJobDispatched) && e.JobID == id && e.Detail != "attempt 1" {
			t.Fatalf("job %d's first dispatch reads detail %q", id, e.Detail)
		}
	}
}

// checkDispatchDetailsRead: job.dispatched of a first attempt stores no detail, which
// reads "attempt 1"; a later attempt's stores it, and an earlier version's entry with
// it reads the same (the events after id after).
func checkDispatchDetailsRead(t *testing.T, db *store.DB, rc *redis.Client, after string) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
		store.AddEvent(ctx, p, &store.Event{Type: string(model.EventJobDispatched), Actor: "scheduler", JobID: 1, CallerID: 1, Detail: "attempt 2"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rc.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, Values: []any{"type", "d", "actor", "scheduler", "job_id", "1", "caller_id", "1", "status", "", "detail", ""}})
	rc.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, Values: []any{"type", "job.dispatched", "actor", "scheduler", "job_id", "1", "caller_id", "1", "detail", "attempt 1"}})
	devs, err := db.ReadEvents(ctx, after, 10)
	if err != nil || len(devs) != 3 || devs[0].Detail != "attempt 2" || devs[1].Detail != "attempt 1" || devs[2].Detail != "attempt 1" || devs[1].Status != string(model.JobDispatched) {
		t.Fatalf("job.dispatched events read: %+v %v", devs, err)
	}
}
