package e2e

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// mailKwargs are the kwargs of a mailer#send_email job (sdk/python/examples/mailer_executor.py).
func mailKwargs(to, subject, text string) map[string]any {
	return map[string]any{"to": to, "subject": subject, "text": text}
}

// Acceptance (issue 43): a flow of handler jobs without script_type, of an executor
// named after no script type ("mailer"), runs through the API: flow.create and
// flow.start take it, each job goes to its executor, and the results pass on — a
// script's to a handler, and a handler's to the handler that depends on it.
func TestHandlerFlowWithoutScriptType(t *testing.T) {
	s, c := executorStack(t)
	c.MustCall(t, "job.create", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 1, "script_type": "sh",
		"script": `echo "SIZE=42" > "$HERO_RESULT_FILE"`}}, nil)
	createHandler(t, c, handlerSpec{id: 2, function: "mailer#send_email", kwargs: mailKwargs("ops@example.com", "disk", ""), deps: []uint32{1}})
	createHandler(t, c, handlerSpec{id: 3, function: "mailer#send_email", kwargs: mailKwargs("audit@example.com", "copy", "forwarded"), deps: []uint32{2}})
	f := runFlow(t, c, 100, 1, 2, 3)
	if f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}
	if got := f.Result["2.body"]; got != "SIZE: 42" {
		t.Errorf("the first mail's body %q: want the script's result", got)
	}
	if got, want := f.Result["3.body"], "forwarded\nbody: SIZE: 42\nsubject: disk\nto: ops@example.com"; got != want {
		t.Errorf("the second mail's body %q: want the first mail's result %q", got, want)
	}
	var j map[string]any
	c.MustCall(t, "job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 3}, &j)
	if j["script_type"] != "" || j["function_name"] != "mailer#send_email" || j["status"] != "finished" {
		t.Errorf("job 3: script_type %q, function_name %q, status %q", j["script_type"], j["function_name"], j["status"])
	}
	var dag struct {
		Nodes []struct {
			ID           uint32 `json:"id"`
			FunctionName string `json:"function_name"`
		} `json:"nodes"`
	}
	c.MustCall(t, "flow.dag", map[string]any{"context_id": ctx1, "id": 100}, &dag)
	if len(dag.Nodes) != 3 || dag.Nodes[1].FunctionName != "mailer#send_email" {
		t.Errorf("flow.dag nodes: %+v", dag.Nodes)
	}
	// The runner's counters label a job without a script type by its executor, as its
	// queue is named: no series with an empty script_type.
	runner := s.Runner.AdminAddr
	if n := metricValue(t, runner, `hero_jobs_finished_total{script_type="exec:mailer"}`); n != 2 {
		t.Errorf(`hero_jobs_finished_total{script_type="exec:mailer"} = %v, want 2`, n)
	}
	for _, l := range metricLines(t, runner) {
		if strings.Contains(l, `script_type=""`) {
			t.Errorf("a series with an empty script_type: %s", l)
		}
	}
	checkJobCheckBatch(t, c)
}

// checkJobCheckBatch: job.check_batch answers each job as job.create_batch would —
// the job, or its refusal — and stores nothing.
func checkJobCheckBatch(t *testing.T, c *harness.Client) {
	t.Helper()
	before := countItems(t, c, "job.list")
	var r struct {
		Items []struct {
			Job *struct {
				FunctionName string `json:"function_name"`
			} `json:"job"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"items"`
	}
	c.MustCall(t, "job.check_batch", map[string]any{"context_id": ctx1, "jobs": []any{
		map[string]any{"function_name": "mailer#send_email", "kwargs": mailKwargs("ops@example.com", "", "")},
		map[string]any{"function_name": "nosuch#send_email"},
		map[string]any{"script": "true", "script_type": "pyhton"},
	}}, &r)
	if len(r.Items) != 3 || r.Items[0].Job == nil || r.Items[0].Job.FunctionName != "mailer#send_email" ||
		r.Items[1].Error == nil || !strings.Contains(r.Items[1].Error.Message, `no runner in context 1 has executor "nosuch"`) ||
		r.Items[2].Error == nil || !strings.Contains(r.Items[2].Error.Message, `"pyhton" is not a known script type`) {
		t.Errorf("job.check_batch: %+v", r.Items)
	}
	if n := countItems(t, c, "job.list"); n != before {
		t.Errorf("job.check_batch stored jobs: %d, was %d", n, before)
	}
}

const mailFlow = `jobs:
  - name: measure
    type: sh
    script: echo "SIZE=42" >> "$HERO_RESULT_FILE"
  - name: notify
    function: %s#send_email
    depends: [measure]
    kwargs: {to: ops@example.com, subject: disk}
  - name: audit
    function: mailer#send_email
    depends: [notify]
    kwargs: {to: audit@example.com}
`

// Acceptance (issue 43): heroctl flow submit runs a flow file of handler jobs without
// a type; a flow file naming an executor no runner of the context announced is
// refused before anything is stored, naming the job and the executor.
func TestHeroctlFlowSubmitHandlerJobsWithoutType(t *testing.T) {
	s, c := executorStack(t)
	x := ctl{t: t, s: s}
	out, errOut := x.ok(meEnv, "flow", "submit", writeTemp(t, "mail.yaml", strings.Replace(mailFlow, "%s", "mailer", 1)), "--wait", "--max-wait", "90")
	if !regexp.MustCompile(`status\s+finished`).MatchString(out) || !strings.Contains(out, "body: SIZE: 42") {
		t.Fatalf("the flow did not finish with the mails' results:\n%s", out)
	}
	if dag := x.out(meEnv, "flow", "dag", flowID(t, errOut)); strings.Count(dag, "mailer#send_email") != 2 {
		t.Errorf("flow dag does not show the handler jobs' functions:\n%s", dag)
	}
	jobs, flows := countItems(t, c, "job.list"), countItems(t, c, "flow.list")

	bad := writeTemp(t, "bad.yaml", strings.Replace(mailFlow, "%s", "nosuch", 1))
	out, errOut, code := s.Heroctl(t, meEnv, "flow", "submit", bad)
	if j, f := countItems(t, c, "job.list"), countItems(t, c, "flow.list"); j != jobs || f != flows {
		t.Errorf("the refused flow stored something: %d jobs (was %d), %d flows (was %d)", j, jobs, f, flows)
	}
	if code != 1 || !strings.Contains(errOut, `job "notify" of the flow`) || !strings.Contains(errOut, `no runner in context 1 has executor "nosuch"`) {
		t.Fatalf("a flow naming an executor no runner has: exit %d, stderr %q, stdout %q", code, errOut, out)
	}
}

// countItems is how many items a list method (job.list, flow.list) gives in context 1
// (up to 1000).
func countItems(t *testing.T, c *harness.Client, method string) int {
	t.Helper()
	var r struct {
		Items []json.RawMessage `json:"items"`
	}
	c.MustCall(t, method, map[string]any{"context_id": ctx1, "limit": 1000}, &r)
	return len(r.Items)
}
