package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

type submitted struct {
	Job struct {
		harness.Job
		Traceparent string `json:"traceparent"`
	} `json:"job"`
	Existing bool `json:"existing"`
}

// Acceptance (issue 23, 6): job.submit returns at once with the job dispatched, and the
// job runs to its end; a unique_key returns the same job while its TTL lasts and a new
// one after it; a chosen id with other content is refused, a batch stores all or
// nothing; SubmitJob over gRPC takes a traceparent from its metadata.
func TestJobSubmit(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	tp := "00-" + producerTrace + "-00f067aa0ba902b7-01"
	var sub submitted
	traced(c, tp).MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"script": "echo submitted", "script_type": "sh"}}, &sub)
	id := sub.Job.ID
	if id == 0 || sub.Existing || sub.Job.Status != "dispatched" || sub.Job.Attempt != 1 || sub.Job.Traceparent != tp {
		t.Fatalf("job.submit: %+v", sub)
	}
	if !c.WaitEvent(t, ctx1, 30*time.Second, func() bool { return loadJob(t, c, id).Status == "finished" }) {
		t.Fatalf("submitted job %d did not finish: %+v", id, loadJob(t, c, id))
	}
	if j := loadJob(t, c, id); j.Result["output"] != "submitted\n" {
		t.Fatalf("submitted job's result: %+v", j)
	}

	checkSubmitUniqueKey(t, c)
	checkSubmitChosenID(t, c)
	checkSubmitBatch(t, c)
	checkSubmitGRPC(t, c, tp)
	// Nine jobs were created (the existing ones returned are not counted).
	if n, err := harness.Metric(s.API, "hero_jobs_submitted_total"); err != nil || n != 9 {
		t.Errorf("hero_jobs_submitted_total = %v (%v), want 9", n, err)
	}
}

// checkSubmitUniqueKey: unique_key: the same job while the key lasts, a new one
// after.
func checkSubmitUniqueKey(t *testing.T, c *harness.Client) {
	t.Helper()
	rdb := redisOf(ctx1).Client(t, ctx1)
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "Ex").Err(); err != nil {
		t.Fatal(err)
	}
	expired := rdb.Subscribe(ctx, "__keyevent@1__:expired")
	defer func() { _ = expired.Close() }()
	if _, err := expired.Receive(ctx); err != nil { // the subscription is live
		t.Fatal(err)
	}
	uniq := map[string]any{"context_id": ctx1, "job": map[string]any{"script": "echo once", "script_type": "sh"}, "unique_key": "nightly-report", "unique_ttl_seconds": 1}
	var first, again submitted
	c.MustCall(t, "job.submit", uniq, &first)
	c.MustCall(t, "job.submit", uniq, &again)
	if first.Existing || !again.Existing || again.Job.ID != first.Job.ID {
		t.Fatalf("unique_key within its TTL: first %+v, again %+v", first, again)
	}
	deadline := time.After(10 * time.Second)
	for gone := false; !gone; {
		select {
		case m := <-expired.Channel():
			gone = m.Payload == "coord:unique:nightly-report"
		case <-deadline:
			t.Fatal("the unique key did not expire within 10 s of its 1 s TTL")
		}
	}
	var after submitted
	c.MustCall(t, "job.submit", uniq, &after)
	if after.Existing || after.Job.ID == first.Job.ID {
		t.Fatalf("unique_key after its TTL: %+v, want a new job (not %d)", after, first.Job.ID)
	}
}

// checkSubmitChosenID: a chosen id: the same content is the same job, other
// content is refused.
func checkSubmitChosenID(t *testing.T, c *harness.Client) {
	t.Helper()
	var sub, again submitted
	chosen := map[string]any{"context_id": ctx1, "job": map[string]any{"id": 900, "script": "echo chosen", "script_type": "sh"}}
	c.MustCall(t, "job.submit", chosen, &sub)
	c.MustCall(t, "job.submit", chosen, &again)
	if sub.Existing || !again.Existing || again.Job.ID != 900 {
		t.Fatalf("job.submit of a chosen id twice: %+v then %+v", sub, again)
	}
	err := c.Call("job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 900, "script": "echo other", "script_type": "sh"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "different script") {
		t.Fatalf("job.submit of an existing id with another script: %v", err)
	}
}

// checkSubmitBatch: a batch: one unique key twice is one job; a bad job refuses
// the batch.
func checkSubmitBatch(t *testing.T, c *harness.Client) {
	t.Helper()
	var batch struct {
		Items []submitted `json:"items"`
	}
	item := func(script, key string) map[string]any {
		it := map[string]any{"job": map[string]any{"script": script, "script_type": "sh"}}
		if key != "" {
			it["unique_key"], it["unique_ttl_seconds"] = key, 60
		}
		return it
	}
	c.MustCall(t, "job.submit_batch", map[string]any{"context_id": ctx1, "jobs": []any{item("echo b1", "k"), item("echo b2", ""), item("echo b3", "k")}}, &batch)
	if len(batch.Items) != 3 || batch.Items[0].Existing || batch.Items[1].Existing || !batch.Items[2].Existing ||
		batch.Items[2].Job.ID != batch.Items[0].Job.ID || batch.Items[1].Job.ID == batch.Items[0].Job.ID {
		t.Fatalf("job.submit_batch: %+v", batch.Items)
	}
	b2 := batch.Items[1].Job.ID
	if !c.WaitEvent(t, ctx1, 30*time.Second, func() bool { return loadJob(t, c, b2).Status == "finished" }) {
		t.Fatalf("batch job %d did not finish", b2)
	}
	err := c.Call("job.submit_batch", map[string]any{"context_id": ctx1, "jobs": []any{item("echo ok", ""), map[string]any{"job": map[string]any{"id": 901, "script": "x", "script_type": "pyhton"}}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "pyhton") {
		t.Fatalf("job.submit_batch with a bad script type: %v", err)
	}
	if err := c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 901}, nil); err == nil {
		t.Fatal("a refused batch stored a job")
	}
}

// checkSubmitGRPC: SubmitJob with a traceparent (tp) in the metadata, SubmitJobs.
func checkSubmitGRPC(t *testing.T, c *harness.Client, tp string) {
	t.Helper()
	ctx := context.Background()
	api := c.API(t)
	res, err := api.SubmitJob(metadata.AppendToOutgoingContext(ctx, "traceparent", tp),
		&herov1.SubmitJobRequest{ContextId: ctx1, Job: &herov1.Job{ScriptType: "sh", Script: "echo grpc"}})
	if err != nil || res.Job.Id == 0 || res.Job.Traceparent != tp || res.Existing {
		t.Fatalf("SubmitJob: %v, %v", res, err)
	}
	many, err := api.SubmitJobs(ctx, &herov1.SubmitJobsRequest{ContextId: ctx1, Jobs: []*herov1.SubmitJobItem{
		{Job: &herov1.Job{ScriptType: "sh", Script: "true"}}, {Job: &herov1.Job{ScriptType: "sh", Script: "true"}}}})
	if err != nil || len(many.Items) != 2 || many.Items[0].Job.Id == many.Items[1].Job.Id {
		t.Fatalf("SubmitJobs: %v, %v", many, err)
	}
	last := many.Items[1].Job.Id
	if !c.WaitEvent(t, ctx1, 30*time.Second, func() bool { return loadJob(t, c, last).Status == "finished" }) {
		t.Fatalf("job %d submitted over gRPC did not finish", last)
	}
}
