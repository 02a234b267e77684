package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// delayedJob is the part of a job the delayed-work tests read.
type delayedJob struct {
	ID          uint32 `json:"id"`
	Status      string `json:"status"`
	Error       string `json:"error"`
	Attempt     uint32 `json:"attempt"`
	RunAtMs     int64  `json:"run_at_ms"`
	StartedAtMs int64  `json:"started_at_ms"`
}

func loadDelayed(t *testing.T, c *harness.Client, id uint32) delayedJob {
	t.Helper()
	var j delayedJob
	c.MustCall(t, "job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": id}, &j)
	return j
}

// A job submitted with delay or run_at is stored scheduled with its time and starts
// no earlier (the scheduler dispatches it from coord:delayed); one stopped before its
// time never runs; one whose time comes while the scheduler is down runs once it is
// back; bad run_at/delay are refused naming the field, storing nothing.
func TestDelayedJob(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	submit := func(params map[string]any) delayedJob {
		t.Helper()
		params["context_id"] = ctx1
		var r struct {
			Job delayedJob `json:"job"`
		}
		c.MustCall(t, "job.submit", params, &r)
		return r.Job
	}
	before := time.Now()
	a := submit(map[string]any{"job": map[string]any{"script": "echo a", "script_type": "sh"}, "delay": "1500ms"})
	if a.Status != "scheduled" || a.RunAtMs < before.Add(1500*time.Millisecond).UnixMilli() || a.Attempt != 0 {
		t.Fatalf("a delayed submit: %+v", a)
	}
	runAt := time.Now().Add(2 * time.Second).UTC()
	b := submit(map[string]any{"job": map[string]any{"script": "echo b", "script_type": "sh"}, "run_at": runAt.Format(time.RFC3339Nano)})
	if b.Status != "scheduled" || b.RunAtMs != runAt.UnixMilli() {
		t.Fatalf("a submit with run_at: %+v (run_at %d)", b, runAt.UnixMilli())
	}
	if got := loadDelayed(t, c, a.ID); got.Status != "scheduled" {
		t.Fatalf("job.load of a delayed job: %+v", got)
	}
	// b is stopped before its time: it ends at once, cancelled, and never runs.
	var stopped delayedJob
	c.MustCall(t, "job.stop", map[string]any{"context_id": ctx1, "caller_id": 1, "id": b.ID}, &stopped)
	if stopped.Status != "error" || stopped.Error != "cancelled" {
		t.Fatalf("job.stop of a scheduled job: %+v", stopped)
	}
	// c runs after b's time: once it has run, b's time has passed too.
	cj := submit(map[string]any{"job": map[string]any{"script": "echo c", "script_type": "sh"}, "run_at": runAt.Add(100 * time.Millisecond).Format(time.RFC3339Nano)})
	for _, j := range []delayedJob{a, cj} {
		if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadDelayed(t, c, j.ID).Status == "finished" }) {
			t.Fatalf("delayed job %d did not finish: %+v", j.ID, loadDelayed(t, c, j.ID))
		}
		got := loadDelayed(t, c, j.ID)
		if got.StartedAtMs < j.RunAtMs || got.Attempt != 1 {
			t.Errorf("delayed job %d started at %d, before its run_at %d (or attempt %d)", j.ID, got.StartedAtMs, j.RunAtMs, got.Attempt)
		}
	}
	if got := loadDelayed(t, c, b.ID); got.Status != "error" || got.StartedAtMs != 0 {
		t.Errorf("the stopped delayed job ran: %+v", got)
	}

	// The scheduler is down when the job's time comes: it runs once the scheduler is back.
	s.Scheduler.Kill()
	d := submit(map[string]any{"job": map[string]any{"script": "echo d", "script_type": "sh"}, "delay": "300ms"})
	s.Scheduler = s.Start("scheduler")
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadDelayed(t, c, d.ID).Status == "finished" }) {
		t.Fatalf("a job due while the scheduler was down did not run after its restart: %+v", loadDelayed(t, c, d.ID))
	}

	// Bad input: named, nothing stored.
	for _, bad := range []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"delay": "soon"}, "delay"},
		{map[string]any{"delay": "-5s"}, "delay"},
		{map[string]any{"run_at": "tomorrow"}, "run_at"},
		{map[string]any{"run_at": runAt.Format(time.RFC3339), "delay": "1s"}, "run_at"},
		{map[string]any{"delay": "9000h"}, "run_at"},
	} {
		p := bad.params
		p["context_id"] = ctx1
		p["job"] = map[string]any{"id": 900, "script": "echo x", "script_type": "sh"}
		err := c.Call("job.submit", p, nil)
		re, ok := err.(*harness.RPCError)
		if !ok || re.Code != -32602 || re.Data["field"] != bad.field {
			t.Errorf("job.submit %v: %v (want invalid params naming %s)", bad.params, err, bad.field)
		}
		if err := c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 900}, nil); err == nil {
			t.Fatalf("a refused delayed submit stored its job (%v)", bad.params)
		}
	}
}

// flow.start with delay schedules the flow: status scheduled with its run_at, started
// by the scheduler no earlier; a scheduled flow cancelled before its time never runs.
func TestDelayedFlow(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{})
	createFlow(t, c, 1, nil, jobSpec{id: 1, typ: "sh", script: "echo A=1 >> \"$HERO_RESULT_FILE\""},
		jobSpec{id: 2, typ: "sh", script: "echo B=$HERO_DEP_1_A >> \"$HERO_RESULT_FILE\"", deps: []uint32{1}})
	createFlow(t, c, 2, nil, jobSpec{id: 3, typ: "sh", script: "echo never"})
	type flow struct {
		Status      string `json:"status"`
		RunAtMs     int64  `json:"run_at_ms"`
		StartedAtMs int64  `json:"started_at_ms"`
		Error       string `json:"error"`
	}
	var f1, f2 flow
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 1, "delay": "1s"}, &f1)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 2, "delay": "1s"}, &f2)
	if f1.Status != "scheduled" || f1.RunAtMs == 0 || f2.Status != "scheduled" {
		t.Fatalf("scheduled flows: %+v %+v", f1, f2)
	}
	// Starting it again with a time is refused: it is scheduled already.
	err := c.Call("flow.start", map[string]any{"context_id": ctx1, "id": 1, "delay": "5s"}, nil)
	if err == nil || !strings.Contains(err.Error(), "scheduled") {
		t.Errorf("rescheduling a scheduled flow: %v", err)
	}
	c.MustCall(t, "flow.cancel", map[string]any{"context_id": ctx1, "id": 2}, &f2)
	if f2.Status != "error" {
		t.Fatalf("cancelled scheduled flow: %+v", f2)
	}
	end := c.WaitFlow(t, ctx1, 1, time.Minute)
	var got flow
	c.MustCall(t, "flow.load", map[string]any{"context_id": ctx1, "id": 1}, &got)
	if end.Status != "finished" || got.StartedAtMs < f1.RunAtMs || loadJob(t, c, 2).Result["B"] != "1" {
		t.Fatalf("scheduled flow: %+v (started %d, run_at %d)", end, got.StartedAtMs, f1.RunAtMs)
	}
	if j := loadDelayed(t, c, 3); j.StartedAtMs != 0 || j.Status != "error" {
		t.Errorf("a job of the cancelled scheduled flow: %+v", j)
	}
}
