package e2e

import (
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// flow.pause: the running job finishes, its dependent is not dispatched while the
// flow is paused (also across a kill -9 of every service: 2.5 s of a delayed job's
// wait show the time went by; the flow still shows its pause), and runs after
// flow.resume; the flow then finishes.
func TestFlowPauseResume(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	createFlow(t, c, 1, nil, jobSpec{id: 1, typ: "sh", script: "sleep 1; echo A=1 >> \"$HERO_RESULT_FILE\""},
		jobSpec{id: 2, typ: "sh", script: "echo B=$HERO_DEP_1_A >> \"$HERO_RESULT_FILE\"", deps: []uint32{1}})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 1}, nil)
	var f struct {
		Status    string `json:"status"`
		Paused    bool   `json:"paused"`
		PauseNote string `json:"pause_note"`
	}
	c.MustCall(t, "flow.pause", map[string]any{"context_id": ctx1, "id": 1, "note": "hold on"}, &f)
	if !f.Paused || f.PauseNote != "hold on" || f.Status != "started" {
		t.Fatalf("paused flow: %+v", f)
	}
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, 1).Status == "finished" }) {
		t.Fatalf("the running job did not finish while its flow was paused: %+v", loadJob(t, c, 1))
	}
	killAllServices(s, c) // kill -9 of every service while paused changes nothing
	var sub struct {
		Job delayedJob `json:"job"`
	}
	c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"script": "true", "script_type": "sh"}, "delay": "2500ms"}, &sub)
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadDelayed(t, c, sub.Job.ID).Status == "finished" }) {
		t.Fatal("the delayed job did not run")
	}
	if j := loadJob(t, c, 2); j.Status != "waiting_for_prerequisites" && j.Status != "dispatched" || j.StartedAtMs != 0 {
		t.Fatalf("a job of a paused flow started: %+v", j)
	}
	if j := loadJob(t, c, 2); j.Attempt != 0 {
		t.Fatalf("a job of a paused flow was dispatched: %+v", j)
	}
	var still struct {
		Paused    bool   `json:"paused"`
		PauseNote string `json:"pause_note"`
	}
	c.MustCall(t, "flow.load", map[string]any{"context_id": ctx1, "id": 1}, &still)
	if !still.Paused || still.PauseNote != "hold on" {
		t.Fatalf("the flow after the restarts: %+v (want paused, its note)", still)
	}
	f.Paused = false // the answer leaves out a false paused
	c.MustCall(t, "flow.resume", map[string]any{"context_id": ctx1, "id": 1, "note": "go"}, &f)
	if f.PauseNote != "go" {
		t.Fatalf("resumed flow's note: %+v", f)
	}
	var raw map[string]any
	c.MustCall(t, "flow.load", map[string]any{"context_id": ctx1, "id": 1}, &raw)
	if raw["paused"] == true {
		t.Fatalf("flow.load after the resume says paused: %v", raw["paused"])
	}
	if f.Paused {
		t.Fatalf("resumed flow: %+v", f)
	}
	end := c.WaitFlow(t, ctx1, 1, time.Minute)
	if end.Status != "finished" || loadJob(t, c, 2).Result["B"] != "1" {
		t.Fatalf("resumed flow: %+v, job 2 %+v", end, loadJob(t, c, 2))
	}
	// A flow that is not started does not pause: named.
	createFlow(t, c, 2, nil, jobSpec{id: 3, typ: "sh", script: "true"})
	if err := c.Call("flow.pause", map[string]any{"context_id": ctx1, "id": 2}, nil); err == nil {
		t.Error("a created flow paused")
	}
}
