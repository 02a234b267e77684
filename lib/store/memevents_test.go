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
