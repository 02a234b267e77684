package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// loadedMessage is the part of a Message (message.load) this test reads.
type loadedMessage struct {
	Kind string `json:"kind"`
	Job  []struct {
		harness.Job
		Script     string `json:"script"`
		ScriptType string `json:"script_type"`
		ContextID  uint32 `json:"context_id"`
	} `json:"job"`
	Nodes []struct {
		ID         uint32 `json:"id"`
		NodeStatus string `json:"node_status"`
	} `json:"nodes"`
}

// A standalone job's request and result messages name the job in Redis (ids, the
// result's end; stored short when the job runs here), and message.load returns them
// as the seed's Message: with the full job, the request with its node.
func TestMessageLoadHoldsFullJobs(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{})
	var sub submitted
	c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"script": "echo named", "script_type": "sh"}}, &sub)
	id, caller := sub.Job.ID, sub.Job.CallerID
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, id).Status == "finished" }) {
		t.Fatalf("job %d did not finish: %+v", id, loadJob(t, c, id))
	}
	rdb := redisOf(ctx1).Client(t, ctx1)
	ctx := context.Background()
	ns := strings.Fields(rdb.HGet(ctx, "job:1:"+strconv.FormatUint(uint64(id), 10), "msgs").Val()) // its messages, by number
	if len(ns) != 2 {
		t.Fatalf("job %d's messages: %v", id, ns)
	}
	kinds := map[string]bool{}
	for _, n := range ns {
		// stored short (routed here, its end applied here: lib/store expandShort): one
		// field, "<ms> <job id>" or "<ms> <the run's end, naming the job>"
		sid := strconv.FormatUint(uint64(id), 10)
		if raw := rdb.HGetAll(ctx, "message:1:"+n).Val(); len(raw) != 1 || strings.Contains(fmt.Sprint(raw), "script") ||
			!(strings.HasSuffix(raw["req"], " "+sid) || strings.Contains(raw["res"], ` {"id":`+sid+`,`)) {
			t.Fatalf("message:1:%s stores %v", n, raw)
		}
		var m loadedMessage
		mid, _ := strconv.Atoi(n)
		c.MustCall(t, "message.load", map[string]any{"context_id": ctx1, "caller_id": caller, "id": mid}, &m)
		if len(m.Job) != 1 || m.Job[0].ID != id || m.Job[0].ScriptType != "sh" || m.Job[0].ContextID != ctx1 {
			t.Fatalf("message.load %s: %+v", n, m)
		}
		j := m.Job[0]
		switch m.Kind {
		case "job_request":
			if j.Script != "echo named" || len(m.Nodes) != 1 || m.Nodes[0].ID != id || m.Nodes[0].NodeStatus != "dispatched" {
				t.Fatalf("request as loaded: %+v", m)
			}
		case "job_result":
			if j.Status != "finished" || j.Attempt != 1 || j.Result["output"] != "named\n" || j.Script != "" || j.FinishedAtMs == 0 {
				t.Fatalf("result as loaded: %+v", m)
			}
		}
		kinds[m.Kind] = true
	}
	if !kinds["job_request"] || !kinds["job_result"] {
		t.Fatalf("message kinds %v", kinds)
	}
}
