package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// traced returns a client that sends a producer's traceparent with every request.
func traced(c *harness.Client, tp string) *harness.Client {
	cc := *c
	cc.Header = http.Header{"Traceparent": []string{tp}}
	return &cc
}

// checkAttemptTraces checks that every attempt (1..attempts) of a job continued the
// producer's trace: the executor's trace_context, the runner's log and job.load.
func checkAttemptTraces(t *testing.T, s *harness.Stack, c *harness.Client, id uint32, attempts int) {
	t.Helper()
	var j struct {
		TraceID    string          `json:"trace_id"`
		Attempt    int             `json:"attempt"`
		Status     string          `json:"status"`
		ResultJSON json.RawMessage `json:"result_json"`
	}
	c.MustCall(t, "job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": id}, &j)
	if j.Status != "finished" || j.Attempt != attempts || j.TraceID != producerTrace {
		t.Fatalf("job %d: status %s, attempt %d, trace_id %q (want finished, %d, %s)", id, j.Status, j.Attempt, j.TraceID, attempts, producerTrace)
	}
	var res struct {
		TraceContext map[string]string `json:"trace_context"`
	}
	if err := json.Unmarshal(j.ResultJSON, &res); err != nil || !strings.HasPrefix(res.TraceContext["traceparent"], "00-"+producerTrace+"-") {
		t.Errorf("job %d: the executor's trace_context %v (%v)", id, res.TraceContext, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spans := map[string]bool{}
	for a := 1; a <= attempts; a++ {
		// The executor saw the trace on every attempt of this job (its stderr is in the
		// runner's log)...
		line, err := s.Runner.WaitLog(ctx, "trace call", fmt.Sprintf("job_id=%d:1:%d attempt=%d", ctx1, id, a), "traceparent=00-"+producerTrace+"-")
		if err != nil {
			t.Fatalf("job %d attempt %d: %v", id, a, err)
		}
		spans[line[strings.Index(line, "traceparent=00-")+len("traceparent=00-")+33:][:16]] = true
		// ...and the runner logged the attempt's end under it.
		if _, err := s.Runner.WaitLog(ctx, fmt.Sprintf(`"job_id":%d`, id), fmt.Sprintf(`"attempt":%d`, a), `"trace_id":"`+producerTrace+`"`); err != nil {
			t.Errorf("job %d attempt %d in the runner's log: %v", id, a, err)
		}
	}
	if len(spans) != attempts {
		t.Errorf("job %d: span ids %v, want a new one per attempt", id, spans)
	}
	// The job's log marks each attempt that is to be told apart, under its trace: the
	// failed ones and the retries; a first attempt that succeeded writes none.
	var logs struct {
		Logs string `json:"logs"`
	}
	c.MustCall(t, "job.logs", map[string]any{"context_id": ctx1, "caller_id": 1, "id": id}, &logs)
	if attempts == 1 && logs.Logs != "" {
		t.Errorf("job %d succeeded at once, its log holds %q", id, logs.Logs)
	}
	for a := 1; a < attempts+1 && attempts > 1; a++ {
		if !strings.Contains(logs.Logs, fmt.Sprintf("--- attempt %d: go#", a)) || strings.Count(logs.Logs, "trace "+producerTrace+") ---") != attempts {
			t.Errorf("job %d: log %q, want a header for attempt %d of %d under the producer's trace", id, logs.Logs, a, attempts)
		}
	}
}

// Acceptance (issue 21, executors 4): a traceparent sent with job.run is the trace of
// every attempt.
func TestTraceparentJobRun(t *testing.T) {
	s, c := executorStack(t)
	tc := traced(c, "00-"+producerTrace+"-00f067aa0ba902b7-01")
	var j harness.Job
	tc.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "timeout": 60,
		"job": map[string]any{"id": 1, "function_name": "go#trace", "kwargs": map[string]any{"succeed_at": 2}, "retries": 1}}, &j)
	checkAttemptTraces(t, s, c, 1, 2)
}

// Acceptance (issue 21, executors 4): a traceparent sent with flow.start is the trace
// of every attempt of every job of the flow.
func TestTraceparentFlowStart(t *testing.T) {
	s, c := executorStack(t)
	createHandler(t, c, handlerSpec{id: 1, function: "go#trace", kwargs: map[string]any{"succeed_at": 1}})
	createHandler(t, c, handlerSpec{id: 2, function: "go#trace", kwargs: map[string]any{"succeed_at": 2}, retries: 1, deps: []uint32{1}})
	c.MustCall(t, "flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": 100, "jobs": []int{1, 2}}}, nil)
	traced(c, "00-"+producerTrace+"-00f067aa0ba902b7-01").MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 100}, nil)
	if f := c.WaitFlow(t, ctx1, 100, 90*time.Second); f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}
	checkAttemptTraces(t, s, c, 1, 1)
	checkAttemptTraces(t, s, c, 2, 2)
}

// A malformed traceparent is refused, naming the header, and nothing is stored.
func TestTraceparentMalformedRefused(t *testing.T) {
	_, c := executorStack(t)
	for _, bad := range []string{"00-" + producerTrace + "-0000000000000000-01", "01-" + producerTrace + "-00f067aa0ba902b7-01", "garbage"} {
		err := traced(c, bad).Call("job.run", map[string]any{"context_id": ctx1, "timeout": 10,
			"job": map[string]any{"id": 1, "function_name": "go#noop"}}, nil)
		if err == nil || !strings.Contains(err.Error(), "traceparent") {
			t.Errorf("traceparent %q: %v, want an error naming the header", bad, err)
		}
	}
	if err := c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, nil); err == nil {
		t.Errorf("a job was stored for a request with a malformed traceparent")
	}
}

// A traceparent in gRPC metadata is taken as the JSON-RPC header is: RunJob's job
// continues the producer's trace (its TRACEPARENT, its trace_id), and a malformed one
// is refused, naming the header, with nothing stored.
func TestTraceparentOverGRPC(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{})
	api := c.API(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tp := "00-" + producerTrace + "-00f067aa0ba902b7-01"
	res, err := api.RunJob(metadata.AppendToOutgoingContext(ctx, "traceparent", tp),
		&herov1.RunJobRequest{ContextId: ctx1, Job: &herov1.Job{ScriptType: "sh", Script: "echo \"tp=$TRACEPARENT\""}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.Status != "finished" || res.Job.TraceId != producerTrace || !strings.Contains(res.Job.Result["output"], "tp=00-"+producerTrace+"-") {
		t.Fatalf("job over gRPC with a traceparent: status %s, trace_id %q, output %q", res.Job.Status, res.Job.TraceId, res.Job.Result["output"])
	}
	_, err = api.RunJob(metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+producerTrace+"-bad"),
		&herov1.RunJobRequest{ContextId: ctx1, Job: &herov1.Job{ScriptType: "sh", Script: "echo never"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "traceparent") {
		t.Fatalf("a malformed traceparent over gRPC: %v", err)
	}
	var list struct {
		Items []harness.Job `json:"items"`
	}
	c.MustCall(t, "job.list", map[string]any{"context_id": ctx1}, &list)
	if len(list.Items) != 1 {
		t.Fatalf("jobs stored: %d, want only the first", len(list.Items))
	}
}
