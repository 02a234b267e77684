package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// The permission matrix of docs/api.md (seed 001 §4.2): what a reader, an executor, an
// admin and an outsider of a context may do. A refusal is -32003 and stores nothing.
func TestPermissionMatrix(t *testing.T) {
	s, admin := newStack(t, harness.StackOptions{})
	for _, id := range []uint32{2, 3, 4} {
		s.CreateActor(t, id)
	}
	admin.MustCall(t, "context.update", map[string]any{"id": ctx1, "readers": []int{2}, "executors": []int{3}}, nil)
	createFlow(t, admin, 60, nil, jobSpec{id: 1, typ: "sh", script: "echo one"})
	createFlow(t, admin, 61, nil, jobSpec{id: 2, typ: "sh", script: "sleep 30"})
	reader, executor, outsider := s.Client(2), s.Client(3), s.Client(4)

	type tc struct {
		who     *harness.Client
		name    string
		method  string
		params  map[string]any
		allowed bool
	}
	job := func(caller, id int) map[string]any {
		return map[string]any{"context_id": ctx1, "job": map[string]any{"id": id, "caller_id": caller, "script": "true", "script_type": "sh"}}
	}
	flow := func(id int) map[string]any { return map[string]any{"context_id": ctx1, "id": id} }
	cases := []tc{
		{reader, "reader", "flow.load", flow(60), true},
		{reader, "reader", "flow.dag", flow(60), true},
		{reader, "reader", "job.list", map[string]any{"context_id": ctx1}, true},
		{reader, "reader", "job.logs", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, true},
		{reader, "reader", "events.read", map[string]any{"context_id": ctx1}, true},
		{reader, "reader", "runner.list", map[string]any{"context_id": ctx1}, true},
		{reader, "reader", "job.create", job(2, 50), false},
		{reader, "reader", "flow.start", flow(60), false},
		{reader, "reader", "job.run", job(2, 51), false},
		{reader, "reader", "job.stop", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, false},
		{reader, "reader", "flow.cancel", flow(60), false},
		{reader, "reader", "flow.delete", flow(60), false},
		{reader, "reader", "runner.create", map[string]any{"context_id": ctx1, "runner": map[string]any{"id": 9, "script_types": []string{"sh"}}}, false},
		{reader, "reader", "context.update", map[string]any{"id": ctx1, "readers": []int{2, 4}}, false},
		{executor, "executor", "flow.load", flow(60), true},
		{executor, "executor", "job.create", job(3, 52), false},
		{executor, "executor", "flow.delete", flow(60), false},
		{executor, "executor", "runner.create", map[string]any{"context_id": ctx1, "runner": map[string]any{"id": 9, "script_types": []string{"sh"}}}, false},
		{executor, "executor", "context.update", map[string]any{"id": ctx1, "executors": []int{3, 4}}, false},
		{executor, "executor", "dlq.purge", map[string]any{"context_id": ctx1}, false},
		{executor, "executor", "flow.start", flow(60), true},
		{executor, "executor", "flow.start", flow(61), true},
		{executor, "executor", "job.run", job(3, 53), true},
		{outsider, "outsider", "flow.load", flow(60), false},
		{outsider, "outsider", "events.read", map[string]any{"context_id": ctx1}, false},
		{outsider, "outsider", "flow.start", flow(60), false},
	}
	for _, c := range cases {
		err := c.who.Call(c.method, c.params, nil)
		denied := err != nil && strings.Contains(err.Error(), "-32003")
		if c.allowed && denied {
			t.Errorf("%s %s: refused: %v", c.name, c.method, err)
		}
		if !c.allowed && !denied {
			t.Errorf("%s %s: want permission denied, got %v", c.name, c.method, err)
		}
		if c.allowed && err != nil {
			t.Errorf("%s %s: %v", c.name, c.method, err)
		}
	}
	// Refused creates stored nothing; the executor's stop works on the running job.
	for _, k := range [][2]int{{2, 50}, {2, 51}, {3, 52}} {
		if admin.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": k[0], "id": k[1]}, nil) == nil {
			t.Errorf("a refused call stored job %d of caller %d", k[1], k[0])
		}
	}
	if !admin.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, admin, 2).Status == "started" }) {
		t.Fatal("flow 61's job did not start")
	}
	if err := executor.Call("job.stop", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 2}, nil); err != nil {
		t.Fatalf("executor job.stop: %v", err)
	}
	if f := admin.WaitFlow(t, ctx1, 61, time.Minute); f.Status != "error" {
		t.Fatalf("stopped flow: %+v", f)
	}
	// Admins do what others may not.
	if f := admin.WaitFlow(t, ctx1, 60, time.Minute); f.Status != "finished" {
		t.Fatalf("flow 60: %+v", f)
	}
	admin.MustCall(t, "flow.delete", flow(60), nil)
	admin.MustCall(t, "context.update", map[string]any{"id": ctx1, "readers": []int{2, 4}}, nil)
	if err := outsider.Call("flow.load", flow(61), nil); err != nil {
		t.Fatalf("actor 4, made a reader, cannot read: %v", err)
	}
}
