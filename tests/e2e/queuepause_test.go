package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// queueView is the part of a queue (queue.list, queue.pause, queue.resume) the tests read.
type queueView struct {
	Queue      string `json:"queue"`
	ScriptType string `json:"script_type"`
	Executor   string `json:"executor"`
	Depth      int64  `json:"depth"`
	Runners    int64  `json:"runners"`
	Paused     bool   `json:"paused"`
	PausedBy   string `json:"paused_by"`
	PauseNote  string `json:"pause_note"`
}

func listQueues(t testing.TB, c *harness.Client) map[string]queueView {
	t.Helper()
	var page struct {
		Items []queueView `json:"items"`
	}
	c.MustCall(t, "queue.list", map[string]any{"context_id": ctx1}, &page)
	out := map[string]queueView{}
	for _, q := range page.Items {
		out[q.Queue] = q
	}
	return out
}

// queue.pause of a script type's queue (docs/scheduling.md, "Pause and resume"): the
// job that runs goes on and finishes; the jobs submitted meanwhile do not start, also
// across a kill -9 of every service (bash jobs submitted after them, on a queue that is
// not paused, start and finish: the runner claims meanwhile); queue.list shows the
// queue paused with its depth; bad input is refused naming its field and changes
// nothing; after queue.resume every held job finishes.
func TestQueuePauseResume(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	submit := func(typ, script string) uint32 {
		t.Helper()
		var res struct {
			Job harness.Job `json:"job"`
		}
		c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"script": script, "script_type": typ}}, &res)
		return res.Job.ID
	}
	finished := func(id uint32) bool { return loadJob(t, c, id).Status == "finished" }

	running := submit("sh", "sleep 1")
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { st := loadJob(t, c, running).Status; return st == "started" || st == "finished" }) {
		t.Fatalf("the first job did not start: %+v", loadJob(t, c, running))
	}
	var q queueView
	c.MustCall(t, "queue.pause", map[string]any{"context_id": ctx1, "script_type": "sh", "note": "maintenance"}, &q)
	if q.Queue != "queue:sh" || q.ScriptType != "sh" || !q.Paused || q.PauseNote != "maintenance" || q.PausedBy == "" || q.Runners != 1 {
		t.Fatalf("paused queue: %+v", q)
	}
	var held []uint32
	for range 5 {
		held = append(held, submit("sh", "true"))
	}
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return finished(running) }) {
		t.Fatalf("the running job did not finish while its queue was paused: %+v", loadJob(t, c, running))
	}
	if other := submit("bash", "true"); !c.WaitEvent(t, ctx1, time.Minute, func() bool { return finished(other) }) {
		t.Fatalf("a job of a queue not paused did not run: %+v", loadJob(t, c, other))
	}
	killAllServices(s, c) // kill -9 of every service while paused changes nothing
	if other := submit("bash", "true"); !c.WaitEvent(t, ctx1, time.Minute, func() bool { return finished(other) }) {
		t.Fatalf("a job of a queue not paused did not run after the restarts: %+v", loadJob(t, c, other))
	}
	checkStillHeld(t, c, held)
	// Pausing again keeps the first pause's note; bad input is named and stores nothing.
	c.MustCall(t, "queue.pause", map[string]any{"context_id": ctx1, "script_type": "sh", "note": "again"}, &q)
	if q.PauseNote != "maintenance" {
		t.Fatalf("a second pause changed the note: %+v", q)
	}
	checkQueueBadInput(t, c)

	c.MustCall(t, "queue.resume", map[string]any{"context_id": ctx1, "script_type": "sh", "note": "done"}, &q)
	if q.Paused {
		t.Fatalf("resumed queue: %+v", q)
	}
	for _, id := range held {
		if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return finished(id) }) {
			t.Fatalf("job %d of the resumed queue did not finish: %+v", id, loadJob(t, c, id))
		}
	}
	checkQueueGRPC(t, c, submit, finished)
}

// checkQueueGRPC: the queues' gRPC methods (the Go SDK's PauseQueue, ListQueues,
// ResumeQueue) do what queue.pause, queue.list and queue.resume do: a job of the
// paused queue stays queued (ListQueues shows it, the queue paused with its note),
// bad input is InvalidArgument, and the job finishes after ResumeQueue.
func checkQueueGRPC(t *testing.T, c *harness.Client, submit func(typ, script string) uint32, finished func(uint32) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sc.Close() }()
	q, err := sc.PauseQueue(ctx, model.QueueRef{ScriptType: "bash"}, "over grpc")
	if err != nil || q.Queue != "queue:bash" || !q.Paused || q.PauseNote != "over grpc" || q.PausedBy == "" {
		t.Fatalf("PauseQueue: %+v, %v", q, err)
	}
	if _, err := sc.PauseQueue(ctx, model.QueueRef{ScriptType: "cobol"}, ""); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "script_type") {
		t.Fatalf("PauseQueue of no such type: %v (want InvalidArgument naming script_type)", err)
	}
	id := submit("bash", "true")
	qs, err := sc.ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range qs {
		if q.Queue == "queue:bash" {
			found = q.Paused && q.Depth == 1 && q.PauseNote == "over grpc"
		}
	}
	if !found || loadJob(t, c, id).StartedAtMs != 0 {
		t.Fatalf("ListQueues with a job of the paused bash queue: %+v (job %+v)", qs, loadJob(t, c, id))
	}
	if q, err := sc.ResumeQueue(ctx, model.QueueRef{ScriptType: "bash"}, ""); err != nil || q.Paused {
		t.Fatalf("ResumeQueue: %+v, %v", q, err)
	}
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return finished(id) }) {
		t.Fatalf("the job of the queue resumed over gRPC did not finish: %+v", loadJob(t, c, id))
	}
}

// killAllServices kill -9s every service of the stack and starts it again; c follows
// the API's new address.
func killAllServices(s *harness.Stack, c *harness.Client) {
	for _, name := range []string{"scheduler", "router", "runner", "supervisor-daemon"} {
		map[string]*harness.Proc{"scheduler": s.Scheduler, "router": s.Router, "runner": s.Runner, "supervisor-daemon": s.API}[name].Kill()
		s.Start(name)
	}
	c.URL, c.GRPCAddr = harness.APIURL(s.API), s.API.GRPCAddr
}

// checkStillHeld: the jobs of the paused sh queue are queued, none started, and
// queue.list shows the queue paused with them.
func checkStillHeld(t *testing.T, c *harness.Client, held []uint32) {
	t.Helper()
	for _, id := range held {
		if j := loadJob(t, c, id); j.Status != "dispatched" || j.StartedAtMs != 0 {
			t.Fatalf("job %d of the paused queue: %+v", id, j)
		}
	}
	qs := listQueues(t, c)
	if q := qs["queue:sh"]; !q.Paused || q.Depth != int64(len(held)) || q.PauseNote != "maintenance" {
		t.Fatalf("queue.list's sh queue: %+v", q)
	}
	if q := qs["queue:bash"]; q.Paused || q.Depth != 0 || q.Runners != 1 {
		t.Fatalf("queue.list's bash queue: %+v", q)
	}
}

// checkQueueBadInput: a queue.pause with bad input is refused naming its field and
// changes no queue.
func checkQueueBadInput(t *testing.T, c *harness.Client) {
	t.Helper()
	before := listQueues(t, c)
	for _, bad := range []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"context_id": ctx1, "script_type": "cobol"}, "script_type"},
		{map[string]any{"context_id": ctx1, "script_type": "sh", "executor": "mailer"}, "script_type"},
		{map[string]any{"context_id": ctx1, "executor": "no such"}, "executor"},
		{map[string]any{"context_id": ctx1}, "script_type"},
		{map[string]any{"context_id": ctx1, "script_type": "bash", "note": strings.Repeat("x", 1001)}, "note"},
	} {
		err := c.Call("queue.pause", bad.params, nil)
		if err == nil || !strings.Contains(err.Error(), "-32602") || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("queue.pause %v: %v (want invalid params naming %s)", bad.params, err, bad.field)
		}
	}
	if after := listQueues(t, c); len(after) != len(before) || after["queue:bash"].Paused {
		t.Fatalf("refused pauses changed the queues: %v", after)
	}
}
