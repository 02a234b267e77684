package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// rpcAnswer is one answer of a JSON-RPC batch.
type rpcAnswer struct {
	ID     any             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// sendBatch sends one JSON-RPC batch and returns its answers.
func sendBatch(t testing.TB, c *harness.Client, calls []map[string]any) []rpcAnswer {
	t.Helper()
	body, _ := json.Marshal(calls)
	req, err := c.NewRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := harness.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var out []rpcAnswer
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("batch answer %.300q: %v", b, err)
	}
	return out
}

// commandCalls reads how many times Redis ran a command (INFO commandstats).
func commandCalls(t testing.TB, rc *redis.Client, name string) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}

func createCall(id any, ctxID uint32, job map[string]any) map[string]any {
	call := map[string]any{"jsonrpc": "2.0", "method": "job.create", "params": map[string]any{"context_id": ctxID, "job": job}}
	if id != nil {
		call["id"] = id
	}
	return call
}

// TestJobCreateBatch: the job.create requests of a JSON-RPC batch are answered each on
// its own, in order, as one by one (a bad one gets its own error naming what was
// wrong and stores nothing; the others are stored, each with its event), and a batch
// of them costs Redis a few round trips, not a few per job.
func TestJobCreateBatch(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	s.CreateActor(t, 2)
	sh := func(id uint32, script string) map[string]any {
		return map[string]any{"id": id, "script": script, "script_type": "sh"}
	}
	calls := []map[string]any{
		createCall(1, ctx1, sh(101, "true")),
		createCall(2, ctx1, map[string]any{"id": 102, "script": "true", "script_type": "sh", "colour": "red"}),
		{"jsonrpc": "2.0", "id": 3, "method": "job.create", "params": map[string]any{"context_id": ctx1}},
		createCall(4, ctx1, sh(101, "true")),  // the same job again: found, not created
		createCall(5, ctx1, sh(101, "false")), // the same id, other content
		{"jsonrpc": "2.0", "id": 6, "method": "job.load", "params": map[string]any{"context_id": ctx1, "caller_id": 1, "id": 101}},
		createCall(7, ctx1, sh(103, "true")),
		createCall(8, ctx1, map[string]any{"id": 104, "function_name": "nope#x"}),
		createCall(nil, ctx1, sh(105, "true")), // a notification: stored, not answered
		createCall(9, 7, sh(106, "true")),      // no such context
		createCall(10, ctx1, map[string]any{"id": 107, "script": "true", "script_type": "cobol"}),
	}
	got := sendBatch(t, c, calls)
	want := []struct {
		id    float64
		error string // "" for a result
	}{
		{1, ""}, {2, "unknown field \"colour\""}, {3, "job is required"}, {4, ""}, {5, "script"},
		{6, ""}, {7, ""}, {8, "no runner in context 1 has executor \"nope\""}, {9, "context 7"}, {10, "script_type"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d answers for %d requests with an id: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		a := got[i]
		if a.ID != w.id {
			t.Fatalf("answer %d has id %v, want %v", i, a.ID, w.id)
		}
		switch {
		case w.error == "" && a.Error != nil:
			t.Errorf("request %v: %s", w.id, a.Error.Message)
		case w.error != "" && (a.Error == nil || !strings.Contains(a.Error.Message, w.error)):
			t.Errorf("request %v: got %s %+v, want an error naming %q", w.id, a.Result, a.Error, w.error)
		}
	}
	var j harness.Job
	if err := json.Unmarshal(got[0].Result, &j); err != nil || j.ID != 101 || j.Status != "dispatched" {
		t.Fatalf("job.create 101 answered %s (%v)", got[0].Result, err)
	}
	rdb := redisSrv.Client(t, int(ctx1))
	bg := context.Background()
	for id, stored := range map[uint32]bool{101: true, 102: false, 103: true, 104: false, 105: true, 107: false} {
		if n := rdb.Exists(bg, keys.Job(1, id)).Val(); (n == 1) != stored {
			t.Errorf("job 1:%d stored: %v, want %v", id, n == 1, stored)
		}
	}
	if v := rdb.HGet(bg, keys.Job(1, 101), "script").Val(); v != "true" {
		t.Errorf("job 101's script %q: the conflicting create changed it", v)
	}
	created := 0
	for _, e := range store.EntryEvents(1, rdb.XRange(bg, keys.Events, "-", "+").Val()) { // one entry may hold several events
		if e.Type == string(model.EventJobCreated) {
			created++
		}
	}
	if created != 3 {
		t.Errorf("%d job.created events, want 3 (101, 103, 105)", created)
	}

	// Round trips: each pipeline the API sends opens with SELECT. 200 creates one by
	// one cost several each (authorization, the executor check, the create, the
	// read-back); in one batch a few in all (the rest is the idle services' own).
	rc := redisSrv.Client(t, 0)
	var big []map[string]any
	for i := range 200 {
		big = append(big, createCall(i, ctx1, sh(uint32(1000+i), fmt.Sprintf("echo %d", i))))
	}
	before := commandCalls(t, rc, "select")
	for _, a := range sendBatch(t, c, big) {
		if a.Error != nil {
			t.Fatalf("batch of 200: %s", a.Error.Message)
		}
	}
	n := commandCalls(t, rc, "select") - before
	t.Logf("a batch of 200 job.create: %d SELECTs (round trips) in Redis meanwhile", n)
	if n > 100 {
		t.Errorf("a batch of 200 job.create cost %d round trips (SELECTs), want a few", n)
	}
}

// TestJobCreateBatchCall: job.create_batch (gRPC CreateJobs) creates a list of jobs of
// one context in one call, each on its own as a JSON-RPC batch of job.create does: an
// item is the job as stored, or the error its call alone would have got (a bad job
// stores nothing; a job created again with the same content is found); the call as a
// whole fails only when it is malformed or the caller may not create jobs there.
func TestJobCreateBatchCall(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{})
	sh := func(id uint32, script string) map[string]any {
		return map[string]any{"id": id, "script": script, "script_type": "sh"}
	}
	var res struct {
		Items []struct {
			Job   *harness.Job `json:"job"`
			Error *struct {
				Code    int            `json:"code"`
				Message string         `json:"message"`
				Data    map[string]any `json:"data"`
			} `json:"error"`
		} `json:"items"`
	}
	c.MustCall(t, "job.create_batch", map[string]any{"context_id": ctx1, "jobs": []any{
		sh(201, "true"),
		map[string]any{"id": 202, "script": "true", "script_type": "cobol"},
		sh(201, "true"),  // the same job again: found
		sh(201, "false"), // the same id, other content
		sh(203, "echo 3"),
	}}, &res)
	if len(res.Items) != 5 {
		t.Fatalf("%d items for 5 jobs: %+v", len(res.Items), res)
	}
	for i, want := range []string{"", "script_type", "", "script", ""} {
		it := res.Items[i]
		switch {
		case want == "" && (it.Error != nil || it.Job == nil):
			t.Errorf("item %d: %+v", i, it.Error)
		case want != "" && (it.Error == nil || it.Job != nil || !strings.Contains(it.Error.Message, want)):
			t.Errorf("item %d: got %+v, want an error naming %q", i, it.Error, want)
		}
	}
	if j := res.Items[4].Job; j == nil || j.ID != 203 || j.Status != "dispatched" {
		t.Fatalf("item 4: %+v", res.Items[4].Job)
	}
	if e := res.Items[1].Error; e == nil || e.Code != -32602 || e.Data["field"] == nil {
		t.Fatalf("item 1's error %+v: want invalid params (-32602) naming its field", e)
	}
	rdb := redisSrv.Client(t, int(ctx1))
	bg := context.Background()
	for id, stored := range map[uint32]bool{201: true, 202: false, 203: true} {
		if n := rdb.Exists(bg, keys.Job(1, id)).Val(); (n == 1) != stored {
			t.Errorf("job 1:%d stored: %v, want %v", id, n == 1, stored)
		}
	}
	if v := rdb.HGet(bg, keys.Job(1, 201), "script").Val(); v != "true" {
		t.Errorf("job 201's script %q: the conflicting create changed it", v)
	}
	if err := c.Call("job.create_batch", map[string]any{"context_id": ctx1, "jobs": []any{}}, nil); err == nil || !strings.Contains(err.Error(), "jobs") {
		t.Errorf("an empty list: %v, want invalid params naming jobs", err)
	}
	checkCreateJobsGRPC(t, c)
}

// checkCreateJobsGRPC: CreateJobs as job.create_batch, an item's error as its code
// name (job 201 exists, created by TestJobCreateBatchCall with script "true").
func checkCreateJobsGRPC(t *testing.T, c *harness.Client) {
	t.Helper()
	api := c.API(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := api.CreateJobs(ctx, &herov1.CreateJobsRequest{ContextId: ctx1, Jobs: []*herov1.Job{
		{Id: 204, Script: "true", ScriptType: "sh"},
		{Id: 205, Script: "true", ScriptType: "sh", Retries: 300},
		{Id: 201, Script: "true", ScriptType: "sh"},
	}})
	if err != nil || len(out.Items) != 3 {
		t.Fatalf("CreateJobs: %v, %v", out, err)
	}
	if it := out.Items[0]; it.Job == nil || it.Job.Id != 204 || it.Error != nil {
		t.Errorf("item 0: %v", it)
	}
	if it := out.Items[1]; it.Job != nil || it.Error == nil || it.Error.Code != "InvalidArgument" || it.Error.Field != "job.retries" {
		t.Errorf("item 1 (retries 300): %v, want InvalidArgument naming job.retries", it)
	}
	if it := out.Items[2]; it.Job == nil || it.Job.Id != 201 || it.Job.Script != "true" {
		t.Errorf("item 2 (found): %v", it)
	}
	if _, err := api.CreateJobs(ctx, &herov1.CreateJobsRequest{ContextId: 7, Jobs: []*herov1.Job{{Id: 1, Script: "true", ScriptType: "sh"}}}); status.Code(err) == codes.OK {
		t.Errorf("CreateJobs in a context that does not exist succeeded")
	}
}
