package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (issue 20, 5): two gateways for one Mycelium node (node B's): only the
// one that holds the lease polls the node's inbox — the emulated node counts the
// distinct clients with a pop in progress at once, and it is never more than one —
// while both serve the router's Send calls; kill -9 of the holder, and the standby
// takes over within the lease (10 s, the default); flows across the nodes finish
// throughout, none needing a retry.
func TestTwoNodeGatewayStandbyTakesOver(t *testing.T) {
	_, _, b, ca, cb := twoNodes(t)
	mb := b.mycelium
	first := b.gateway
	gw2 := freeAddr(t)
	second := harness.Start(t, binDir, "mycelium-gateway", b.redis.URL, harness.Options{Args: []string{"--grpc-addr", gw2,
		"--router-addr", b.routerAddr, "--mycelium-url", mb.URL()}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := second.WaitLog(ctx, "standby (pushes only"); err != nil {
		t.Fatal(err)
	}
	if _, err := first.WaitLog(ctx, "gateway lease acquired"); err != nil {
		t.Fatal(err)
	}
	// B's router sends through either gateway (round robin over the healthy ones).
	b.router.Kill()
	b.start("router", "--gateway-addr", b.gwAddr+","+gw2)
	active := func(p *harness.Proc) float64 {
		t.Helper()
		v, err := harness.Metric(p, "hero_gateway_active")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if active(first) != 1 || active(second) != 0 {
		t.Fatalf("hero_gateway_active: first %v, second %v; want 1 and 0", active(first), active(second))
	}

	remoteFlow(t, ca, 1, middle(1), 0)
	checkRemoteFlow(t, ca, 1)
	if by := mb.PollsBy(); len(by) != 1 {
		t.Fatalf("pop clients of node B with one holder: %v", by)
	}
	// (That a standby serves Send calls, without waiting behind the holder's long
	// poll, is TestOneGatewayPopsItsNodesInboxAtATime's: which replica B's router
	// picks for its few sends here is up to the round robin.)

	// kill -9 of the holder while a remote job runs on B.
	remoteFlow(t, ca, 2, strings.Replace(middle(2), "import os", "import os, time\ntime.sleep(2)", 1), 0)
	// B's job 22 running: the first holder took the request from the inbox (B's
	// events say when).
	if !cb.WaitEvent(t, 1, time.Minute, func() bool {
		var j harness.Job
		return cb.Call("job.load", map[string]any{"context_id": 1, "caller_id": 1, "id": 22}, &j) == nil && j.Status == "started"
	}) {
		t.Fatal("the remote job did not start on B")
	}
	first.Kill()
	killed := time.Now()
	if _, err := second.WaitLog(ctx, "gateway lease acquired"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(killed); took > time.Minute {
		t.Fatalf("the standby took over %v after the holder was killed, want about the 10 s lease", took)
	}
	t.Logf("the standby took over %v after kill -9 of the holder", time.Since(killed))
	checkRemoteFlow(t, ca, 2)
	remoteFlow(t, ca, 3, middle(3), 0)
	checkRemoteFlow(t, ca, 3)
	if active(second) != 1 {
		t.Fatal("hero_gateway_active of the new holder is not 1")
	}
	if by := mb.PollsBy(); len(by) != 2 {
		t.Fatalf("pop clients of node B: %v, want the first holder and then the second", by)
	}
	if n := mb.MaxPollClients(); n != 1 {
		t.Fatalf("%d gateways polled node B's inbox at the same time, want 1", n)
	}
	if evs := events(t, ca); countEvents(evs, "job.retried", 22) != 0 || countEvents(evs, "job.failed", 22) != 0 {
		t.Fatal("the remote job needed another attempt across the hand-over")
	}
}
