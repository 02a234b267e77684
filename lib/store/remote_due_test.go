package store_test

import (
	"context"
	"testing"
	"time"
)

// coord:remote_due holds the checks of requests sent to other nodes and the pending
// acknowledgements of jobs from other nodes apart: each comes back as what it is, an
// acknowledgement can be moved (scheduled again) and cancelled, and only due ones are
// popped.
func TestAckDuesAreKeptApartFromRequestChecks(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	now := time.Now()
	if err := s.AddRemoteDue(ctx, 1, "message:1:5", now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"job:1:7", "job:1:8", "job:1:9"} {
		if err := s.AddAckDue(ctx, 1, job, now.Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddAckDue(ctx, 1, "job:1:8", now.Add(time.Hour)); err != nil { // moved: not due
		t.Fatal(err)
	}
	if err := s.CancelAckDue(ctx, 1, "job:1:9"); err != nil {
		t.Fatal(err)
	}
	due, err := s.PopRemoteDue(ctx, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 2 {
		t.Fatalf("due %+v, want the request check and job 7's acknowledgement", due)
	}
	for _, d := range due {
		switch {
		case d.Ack && d.JobKey == "job:1:7" && d.MsgKey == "" && d.ContextID == 1:
		case !d.Ack && d.MsgKey == "message:1:5" && d.JobKey == "" && d.ContextID == 1:
		default:
			t.Fatalf("unexpected due item %+v", d)
		}
	}
	if next, err := s.NextRemoteDue(ctx); err != nil || next.Before(now.Add(59*time.Minute)) {
		t.Fatalf("next due %v %v: want job 8's acknowledgement in an hour", next, err)
	}
}
