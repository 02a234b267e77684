package e2e

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
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
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, id).Status == "finished" }) {
		t.Fatalf("submitted job %d did not finish: %+v", id, loadJob(t, c, id))
	}
	if j := loadJob(t, c, id); j.Result["output"] != "submitted\n" {
		t.Fatalf("submitted job's result: %+v", j)
	}

	checkSubmitUniqueKey(t, c)
	checkSubmitChosenID(t, c)
	checkSubmitBatch(t, c)
	checkSubmitGRPC(t, c, tp)
	checkSubmitStream(t, s, c, tp)
	checkSubmitStreamBatch(t, s, c)
	// Thirteen jobs were created (the existing ones returned are not counted).
	if n, err := harness.Metric(s.API, "hero_jobs_submitted_total"); err != nil || n != 13 {
		t.Errorf("hero_jobs_submitted_total = %v (%v), want 13", n, err)
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
	deadline := time.After(time.Minute)
	for gone := false; !gone; {
		select {
		case m := <-expired.Channel():
			gone = m.Payload == "coord:unique:nightly-report"
		case <-deadline:
			t.Fatal("the unique key did not expire within a minute of its 1 s TTL")
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
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, b2).Status == "finished" }) {
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
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, last).Status == "finished" }) {
		t.Fatalf("job %d submitted over gRPC did not finish", last)
	}
}

// checkSubmitStream: SubmitJobStream answers each submission by its seq: a job (with
// the item's traceparent), the same job for a unique key sent twice, the typed error
// of a refused one while the others go on; each item is counted as a request.
func checkSubmitStream(t *testing.T, s *harness.Stack, c *harness.Client, tp string) {
	t.Helper()
	before, _ := harness.Metric(s.API, "hero_api_requests_total", `method="SubmitJobStream"`, `code="OK"`)
	sh := func(script string) *herov1.Job { return &herov1.Job{ScriptType: "sh", Script: script} }
	items := []*herov1.SubmitJobStreamRequest{
		{Seq: 7, Submit: &herov1.SubmitJobRequest{ContextId: ctx1, Job: sh("echo streamed")}, Traceparent: tp},
		{Seq: 8, Submit: &herov1.SubmitJobRequest{ContextId: ctx1, Job: &herov1.Job{ScriptType: "no-such-type", Script: "true"}}},
		{Seq: 9, Submit: &herov1.SubmitJobRequest{ContextId: ctx1, Job: sh("true"), UniqueKey: "streamed", UniqueTtlSeconds: 60}},
		{Seq: 10, Submit: &herov1.SubmitJobRequest{ContextId: ctx1, Job: sh("true"), UniqueKey: "streamed", UniqueTtlSeconds: 60}},
	}
	got := streamSubmissions(t, c, items, false)
	if len(got) != 4 {
		t.Fatalf("%d answers for 4 submissions: %v", len(got), got)
	}
	if j := got[7].GetSubmit().GetJob(); j == nil || j.Id == 0 || j.Traceparent != tp || j.Status != "dispatched" {
		t.Errorf("item 7: %v", got[7])
	}
	if e := got[8].GetError(); e == nil || codes.Code(e.Code) != codes.InvalidArgument || !strings.Contains(e.Message, "script_type") || got[8].Submit != nil {
		t.Errorf("item 8 (a script type that does not exist): %v", got[8])
	}
	a, b := got[9].GetSubmit(), got[10].GetSubmit()
	if a == nil || b == nil || a.Job.Id != b.Job.Id || a.Existing == b.Existing {
		t.Errorf("items 9 and 10 (one unique key): %v, %v", got[9], got[10])
	}
	if n, err := harness.Metric(s.API, "hero_api_requests_total", `method="SubmitJobStream"`, `code="OK"`); err != nil || n-before != 3 {
		t.Errorf("SubmitJobStream items answered OK: %v (%v), want 3", n-before, err)
	}
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, got[7].Submit.Job.Id).Status == "finished" }) {
		t.Fatalf("the streamed job did not finish")
	}
}

// checkSubmitStreamBatch: a client that takes batches (its opening metadata) learns
// from the stream's header that the server does, and one message carrying several
// submissions is answered item by item, as if each came alone: a job each, the typed
// error of a refused one, the same job for a unique key sent twice, and a clear error
// for an item that holds a batch itself; the batch is observed
// (hero_api_stream_batch_items{direction="received"}).
func checkSubmitStreamBatch(t *testing.T, s *harness.Stack, c *harness.Client) {
	t.Helper()
	count0, _ := harness.Metric(s.API, "hero_api_stream_batch_items_count", `direction="received"`)
	sum0, _ := harness.Metric(s.API, "hero_api_stream_batch_items_sum", `direction="received"`)
	sh := func(script string) *herov1.Job { return &herov1.Job{ScriptType: "sh", Script: script} }
	batch := []*herov1.SubmitJobStreamRequest{
		{Seq: 1, Submit: &herov1.SubmitJobRequest{ContextId: ctx1, Job: sh("echo batched")}},
		{Seq: 2, Submit: &herov1.SubmitJobRequest{ContextId: ctx1, Job: &herov1.Job{ScriptType: "no-such-type", Script: "true"}}},
		{Seq: 3, Submit: &herov1.SubmitJobRequest{ContextId: ctx1, Job: sh("true"), UniqueKey: "batched", UniqueTtlSeconds: 60}},
		{Seq: 4, Submit: &herov1.SubmitJobRequest{ContextId: ctx1, Job: sh("true"), UniqueKey: "batched", UniqueTtlSeconds: 60}},
		{Seq: 5, Batch: []*herov1.SubmitJobStreamRequest{{Seq: 6, Submit: &herov1.SubmitJobRequest{ContextId: ctx1, Job: sh("true")}}}},
	}
	got := streamSubmissions(t, c, []*herov1.SubmitJobStreamRequest{{Batch: batch}}, true)
	if len(got) != 5 {
		t.Fatalf("%d answers for 5 batched submissions: %v", len(got), got)
	}
	if j := got[1].GetSubmit().GetJob(); j == nil || j.Id == 0 || j.Status != "dispatched" || j.Script != "echo batched" {
		t.Errorf("batched item 1: %v", got[1])
	}
	if e := got[2].GetError(); e == nil || codes.Code(e.Code) != codes.InvalidArgument || !strings.Contains(e.Message, "script_type") {
		t.Errorf("batched item 2 (a script type that does not exist): %v", got[2])
	}
	a, b := got[3].GetSubmit(), got[4].GetSubmit()
	if a == nil || b == nil || a.Job.Id != b.Job.Id || a.Existing == b.Existing {
		t.Errorf("batched items 3 and 4 (one unique key): %v, %v", got[3], got[4])
	}
	if e := got[5].GetError(); e == nil || codes.Code(e.Code) != codes.InvalidArgument || !strings.Contains(e.Message, "batch") {
		t.Errorf("batched item 5 (holding a batch): %v", got[5])
	}
	count, err1 := harness.Metric(s.API, "hero_api_stream_batch_items_count", `direction="received"`)
	sum, err2 := harness.Metric(s.API, "hero_api_stream_batch_items_sum", `direction="received"`)
	if err1 != nil || err2 != nil || count-count0 != 1 || sum-sum0 != 5 {
		t.Errorf("received batches observed: %v messages, %v items (%v, %v); want 1 of 5", count-count0, sum-sum0, err1, err2)
	}
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, got[1].Submit.Job.Id).Status == "finished" }) {
		t.Fatalf("the batched job did not finish")
	}
}

// streamSubmissions sends items on one SubmitJobStream of c, closes its side and
// returns every answer by its seq (a batch's answers each by its own), the stream
// having ended cleanly. batches: the client says it takes batch messages, and checks
// that the server's header says it does; otherwise no answer may come in a batch.
func streamSubmissions(t *testing.T, c *harness.Client, items []*herov1.SubmitJobStreamRequest, batches bool) map[uint64]*herov1.SubmitJobStreamResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if batches {
		ctx = metadata.AppendToOutgoingContext(ctx, "hero-stream-batch", "1")
	}
	st, err := c.API(t).SubmitJobStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if md, err := st.Header(); err != nil || !slices.Contains(md.Get("hero-stream-batch"), "1") {
		t.Fatalf("the stream's header %v (%v) does not say the server takes batches", md, err)
	}
	for _, it := range items {
		if err := st.Send(it); err != nil {
			t.Fatalf("send %d: %v", it.Seq, err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]*herov1.SubmitJobStreamResponse{}
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("the stream failed after %d answers: %v (answers so far %v)", len(got), err, got)
		}
		if len(r.Batch) == 0 {
			got[r.Seq] = r
			continue
		}
		if !batches {
			t.Fatalf("answers in a batch to a client that did not say it takes them: %v", r)
		}
		for _, a := range r.Batch {
			got[a.Seq] = a
		}
	}
}
