package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Issue 43: remote abandonment travels, and what a remote job costs the nodes.

// oneJobFlow starts flow id with one job pinned to runner 7 (on node B).
func oneJobFlow(t *testing.T, ca *harness.Client, flowID, jobID uint32, script string) {
	t.Helper()
	ca.MustCall(t, "job.create", map[string]any{"context_id": 1, "job": map[string]any{"id": jobID, "script_type": "sh", "runner_id": 7, "script": script}}, nil)
	ca.MustCall(t, "flow.create", map[string]any{"context_id": 1, "flow": map[string]any{"id": flowID, "jobs": []uint32{jobID}}}, nil)
	ca.MustCall(t, "flow.start", map[string]any{"context_id": 1, "id": flowID}, nil)
}

// waitAnyLog waits, with a deadline, until p logs a line containing one of alts, and
// returns which.
func waitAnyLog(t *testing.T, p *harness.Proc, within time.Duration, alts ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	found := make(chan string, len(alts))
	for _, s := range alts {
		go func() {
			if _, err := p.WaitLog(ctx, s); err == nil {
				found <- s
			}
		}()
	}
	select {
	case s := <-found:
		return s
	case <-ctx.Done():
		t.Fatalf("%s logged none of %q within %v", p.Name, alts, within)
		return ""
	}
}

// A remote job whose sender gave up on it (no acknowledgement: the nodes were cut
// apart) is not run when the remote node can be reached again: Mycelium still
// delivers the request (it retries for 5 minutes), but it carries its take-by time and
// node B drops it. Before, B ran it, after A had failed it (or retried it: twice).
func TestTwoNodeAbandonedRequestIsNotRunLate(t *testing.T) {
	nw, _, b, ca, cb := twoNodes(t, "--remote-ack-timeout", "2s")
	nw.Partition(nw.Node("a"), nw.Node("b"))
	oneJobFlow(t, ca, 8, 81, `echo ran`)
	f := ca.WaitFlow(t, 1, 8, time.Minute)
	var j harness.Job
	ca.MustCall(t, "job.load", map[string]any{"context_id": 1, "caller_id": 1, "id": 81}, &j)
	if f.Status != "error" || !strings.Contains(j.Error, "no acknowledgement") {
		t.Fatalf("flow %+v, job %+v: want it failed for want of an acknowledgement", f, j)
	}
	nw.Heal() // the request, held by the partition, now reaches B
	got := waitAnyLog(t, b.router, time.Minute, "late job request dropped", "job from another node queued")
	if got != "late job request dropped" {
		t.Fatalf("node B took the request its sender gave up on:\n%s", b.router.Output())
	}
	if _, err := b.router.WaitLog(context.Background(), "came", "after its take-by time", "dropped, not run"); err != nil {
		t.Fatal(err)
	}
	if err := cb.Call("job.load", map[string]any{"context_id": 1, "caller_id": 1, "id": 81}, &j); err == nil {
		t.Fatalf("the dropped job exists on B: %+v", j)
	}
	if n := countEvents(events(t, cb), "job.started", 81); n != 0 {
		t.Fatalf("the abandoned job started %d times on B", n)
	}
	if n := metric(t, b.router, `hero_router_messages_total{kind="job_request",outcome="too_late"}`); n != 1 {
		t.Fatalf("late requests counted: %v", n)
	}
	// B still takes requests in time.
	oneJobFlow(t, ca, 9, 91, `echo ok`)
	if f := ca.WaitFlow(t, 1, 9, time.Minute); f.Status != "finished" {
		t.Fatalf("a later remote flow: %+v", f)
	}
}

// The node messages a remote job costs (each one a task ticking on both nodes for 10
// minutes on a v0.7.10 node): two on the success path — its request and its result —
// when it ends within the runner node's --remote-ack-delay; one that runs longer is
// acknowledged in between (three), so that its origin does not give up on it.
func TestTwoNodeRemoteJobCostsTwoMessages(t *testing.T) {
	nw, _, b, ca, _ := twoNodesWith(t, nil, []string{"--remote-ack-delay", "5s"})
	sent := nw.Stats().Sent
	oneJobFlow(t, ca, 10, 101, `true`)
	if f := ca.WaitFlow(t, 1, 10, time.Minute); f.Status != "finished" {
		t.Fatalf("flow %+v", f)
	}
	// Once B has recorded the result as returned, no acknowledgement is due there any
	// more: none can follow.
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.router.WaitLog(wctx, "result returned to the origin node"); err != nil {
		t.Fatal(err)
	}
	if due := b.redis.Client(t, 0).ZRange(context.Background(), keys.RemoteDue, 0, -1).Val(); len(due) != 0 {
		t.Fatalf("B still has remote work due: %v", due)
	}
	if n := nw.Stats().Sent - sent; n != 2 {
		t.Fatalf("a quick remote job cost %d node messages, want 2 (its request and its result)", n)
	}
	if metric(t, b.router, `hero_router_messages_total{kind="ack"`) != 0 {
		t.Fatal("B acknowledged a job whose result followed at once")
	}

	sent = nw.Stats().Sent
	oneJobFlow(t, ca, 11, 111, `sleep 7`)
	if f := ca.WaitFlow(t, 1, 11, time.Minute); f.Status != "finished" {
		t.Fatalf("flow %+v", f)
	}
	if n := nw.Stats().Sent - sent; n != 3 {
		t.Fatalf("a remote job running past the ack delay cost %d node messages, want 3 (request, acknowledgement, result)", n)
	}
	if metric(t, b.router, `hero_router_messages_total{kind="ack",outcome="sent_remote"}`) != 1 {
		t.Fatal("B did not acknowledge the long job")
	}
}
