package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Issue 21 (Mycelium): the nodes are v0.7.10-like (the emulator's lock held for a
// whole long poll, 2 MiB request bodies, whole-topic matching) and the gateways poll
// for the default 10 s.

// A job too large for one Mycelium message is refused with a clear error: at
// submission when it is pinned to a remote runner, at dispatch when it grows there
// (the flow's environment); never retried for a minute.
func TestTwoNodeOversizedJob(t *testing.T) {
	_, _, _, ca, _ := twoNodes(t)
	big := strings.Repeat("x", 3<<20)
	start := time.Now()
	err := ca.Call("job.create", map[string]any{"context_id": 1, "job": map[string]any{"id": 61, "script_type": "sh", "runner_id": 7,
		"script": "echo " + big}}, nil)
	if err == nil || !strings.Contains(err.Error(), "a Mycelium node takes at most") {
		t.Fatalf("a 3 MiB job for a remote runner: %v", err)
	}
	// Grown past the limit at dispatch: a script of just under the API's 1 MiB and a
	// flow environment of 600 KB (each under the API's limits, the job alone under
	// Mycelium's) make an envelope over 1.5 MiB.
	ca.MustCall(t, "job.create", map[string]any{"context_id": 1, "job": map[string]any{"id": 62, "script_type": "sh", "runner_id": 7,
		"script": "echo " + strings.Repeat("x", 1<<20-100)}}, nil)
	env := map[string]string{}
	for i := range 20 {
		env["V"+strconv.Itoa(i)] = strings.Repeat("y", 30000)
	}
	ca.MustCall(t, "flow.create", map[string]any{"context_id": 1, "flow": map[string]any{"id": 6, "jobs": []uint32{62}, "env_vars": env}}, nil)
	ca.MustCall(t, "flow.start", map[string]any{"context_id": 1, "id": 6}, nil)
	f := ca.WaitFlow(t, 1, 6, time.Minute)
	if f.Status != "error" {
		t.Fatalf("a 3 MiB job dispatched to a remote runner: %+v", f)
	}
	var j harness.Job
	ca.MustCall(t, "job.load", map[string]any{"context_id": 1, "caller_id": 1, "id": 62}, &j)
	if j.Status != "error" || !strings.Contains(j.Error, "limit") {
		t.Fatalf("job 62: %+v", j)
	}
	if el := time.Since(start); el > time.Minute {
		t.Fatalf("refusing the oversized job took %v", el)
	}
}

// A remote result that never arrives (the nodes are cut apart after the
// acknowledgement) ends its job with a timeout: its timeout plus the margin. (The job
// runs longer than B's --remote-ack-delay, 2 s: B acknowledges it.)
func TestTwoNodeResultNeverArrives(t *testing.T) {
	net, a, _, ca, _ := twoNodes(t, "--remote-result-margin", "1s")
	ca.MustCall(t, "job.create", map[string]any{"context_id": 1, "job": map[string]any{"id": 71, "script_type": "python", "runner_id": 7, "timeout": 6,
		"script": "import time\ntime.sleep(5)"}}, nil)
	ca.MustCall(t, "flow.create", map[string]any{"context_id": 1, "flow": map[string]any{"id": 7, "jobs": []uint32{71}}}, nil)
	ca.MustCall(t, "flow.start", map[string]any{"context_id": 1, "id": 7}, nil)
	// A's gateway says when it wrote the acknowledgement into A's request message.
	actx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.gateway.WaitLog(actx, `"message":"acknowledged"`); err != nil || remoteStatus(t) != "acknowledged" {
		t.Fatalf("the remote job was not acknowledged (status %q): %v", remoteStatus(t), err)
	}
	net.Partition(net.Node("a"), net.Node("b"))
	start := time.Now()
	f := ca.WaitFlow(t, 1, 7, time.Minute)
	var j harness.Job
	ca.MustCall(t, "job.load", map[string]any{"context_id": 1, "caller_id": 1, "id": 71}, &j)
	if f.Status != "error" || j.Status != "error" || !strings.Contains(j.Error, "no result from the remote runner") {
		t.Fatalf("flow %+v, job %+v", f, j)
	}
	// The bound is the safety net; without the margin's flag (default a minute) it
	// would be over it.
	if el := time.Since(start); el > time.Minute {
		t.Fatalf("the missing result ended its job after %v, want about the job's 6 s timeout plus 1 s", el)
	}
}

// remoteStatus is the status of A's (only) request message sent to a remote runner.
func remoteStatus(t *testing.T) string {
	c := redisSrv.Client(t, 1)
	for _, k := range redisSrv.Keys(t, 1) {
		if strings.HasPrefix(k, "message:") && c.HGet(context.Background(), k, "transport_id").Val() != "" {
			return c.HGet(context.Background(), k, "status").Val()
		}
	}
	return ""
}

// Garbage 200 answers (bodies that are not JSON) from both nodes are counted and
// passed over: the flow finishes and the gateways stay ready.
func TestTwoNodeGarbageAnswers(t *testing.T) {
	net, a, b, ca, _ := twoNodes(t)
	net.Node("a").GarbageNext(5)
	net.Node("b").GarbageNext(5)
	remoteFlow(t, ca, 8, middle(8), 0)
	checkRemoteFlow(t, ca, 8)
	for _, n := range []*node{a, b} {
		if !ca.WaitEvent(t, 1, time.Minute, func() bool {
			return metric(t, n.gateway, "hero_gateway_mycelium_not_json_total") == 5
		}) {
			t.Fatalf("%s: not-JSON answers counted %v, want 5", n.name, metric(t, n.gateway, "hero_gateway_mycelium_not_json_total"))
		}
		if _, err := n.gateway.WaitLog(context.Background(), "body that is not JSON; passed over"); err != nil {
			t.Fatalf("%s: not logged: %v", n.name, err)
		}
		if code := readyz(t, n.gateway); code != 200 {
			t.Fatalf("%s: /readyz %d after garbage answers", n.name, code)
		}
	}
}

// remoteHops returns, per remote job of A's context 1, the hop out (dispatched on A →
// started on B) and back (finished on B → result recorded on A), in ms.
func remoteHops(tb testing.TB, ca *harness.Client) (out, back []float64) {
	c := redisSrv.Client(tb, 1)
	ctx := context.Background()
	for _, k := range redisSrv.Keys(tb, 1) {
		if !strings.HasPrefix(k, "message:") {
			continue
		}
		h := c.HGetAll(ctx, k).Val()
		if h["dispatched_at_ms"] == "" || h["result_at_ms"] == "" {
			continue
		}
		var jobs []struct {
			ID uint32 `json:"id"`
		}
		if err := json.Unmarshal([]byte(h["job"]), &jobs); err != nil || len(jobs) != 1 {
			tb.Fatalf("%s: job %q: %v", k, h["job"], err)
		}
		var j harness.Job
		ca.MustCall(tb, "job.load", map[string]any{"context_id": 1, "caller_id": 1, "id": jobs[0].ID}, &j)
		dispatched, _ := strconv.ParseInt(h["dispatched_at_ms"], 10, 64)
		result, _ := strconv.ParseInt(h["result_at_ms"], 10, 64)
		out = append(out, float64(j.StartedAtMs-dispatched))
		back = append(back, float64(result-j.FinishedAtMs))
	}
	return out, back
}

func readyz(t *testing.T, p *harness.Proc) int {
	resp, err := http.Get("http://" + p.AdminAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
