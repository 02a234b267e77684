package e2e

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/freeport"
	"github.com/hero-coordinator/hero/lib/testutil/myceliumemu"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// freeAddr: an address a node's service binds later (the others name it; a restarted
// service comes back on it).
func freeAddr(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// node is one Hero node: its Redis, its services and its gateway to Mycelium.
type node struct {
	t          testing.TB
	name       string
	redis      *redistest.Server
	mycelium   *myceliumemu.Node
	scheduler  *harness.Proc
	router     *harness.Proc
	runner     *harness.Proc
	api        *harness.Proc
	gateway    *harness.Proc
	routerAddr string
	gwAddr     string
	schedAddr  string
	runnerID   string
}

func (n *node) start(name string, args ...string) *harness.Proc {
	n.t.Helper()
	env := []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}
	var p *harness.Proc
	switch name {
	case "scheduler":
		p = harness.Start(n.t, binDir, name, n.redis.URL, harness.Options{Env: env, Args: append([]string{"--grpc-addr", n.schedAddr, "--retry-base", "100ms"}, args...)})
		n.scheduler = p
	case "router":
		p = harness.Start(n.t, binDir, name, n.redis.URL, harness.Options{Env: env, Args: append([]string{"--grpc-addr", n.routerAddr, "--scheduler-addr", n.schedAddr,
			"--gateway-addr", n.gwAddr, "--lease", "3s", "--router-id", "router-" + n.name}, args...)})
		n.router = p
	case "runner":
		p = harness.Start(n.t, binDir, name, n.redis.URL, harness.Options{Env: env, Args: append([]string{"--runner-id", n.runnerID, "--lease", "3s", "--heartbeat", "1s"}, args...)})
		n.runner = p
	case "supervisor-daemon":
		p = harness.Start(n.t, binDir, name, n.redis.URL, harness.Options{Env: env, Args: append([]string{"--scheduler-addr", n.schedAddr}, args...)})
		n.api = p
	case "mycelium-gateway":
		p = harness.Start(n.t, binDir, name, n.redis.URL, harness.Options{Env: env, Args: append([]string{"--grpc-addr", n.gwAddr, "--router-addr", n.routerAddr,
			"--mycelium-url", n.mycelium.URL()}, args...)}) // the default 10 s long poll, against the node's lock
		n.gateway = p
	}
	return p
}

func newNode(t testing.TB, name string, r *redistest.Server, m *myceliumemu.Node, runnerID string, routerArgs ...string) *node {
	n := &node{t: t, name: name, redis: r, mycelium: m, routerAddr: freeAddr(t), gwAddr: freeAddr(t), schedAddr: freeAddr(t), runnerID: runnerID}
	n.start("scheduler")
	n.start("router", routerArgs...)
	n.start("mycelium-gateway")
	n.start("runner")
	n.start("supervisor-daemon")
	return n
}

func (n *node) client(actor uint32) *harness.Client {
	return &harness.Client{URL: harness.APIURL(n.api), GRPCAddr: n.api.GRPCAddr, Actor: actor, Key: harness.ActorKey(actor)}
}

func (n *node) operator() *harness.Client {
	return &harness.Client{URL: harness.APIURL(n.api), GRPCAddr: n.api.GRPCAddr, Secret: harness.AdminSecret}
}

// twoNodes: node A (runner 1 local, runner 7 remote on B) and node B (runner 7 local),
// context 1 on both; B's context allows A's Mycelium key.
func twoNodes(t testing.TB, routerArgsA ...string) (*myceliumemu.Network, *node, *node, *harness.Client, *harness.Client) {
	t.Helper()
	return twoNodesWith(t, routerArgsA, nil)
}

// twoNodesWith is twoNodes with arguments for each node's router.
func twoNodesWith(t testing.TB, routerArgsA, routerArgsB []string) (*myceliumemu.Network, *node, *node, *harness.Client, *harness.Client) {
	t.Helper()
	var a, b *node
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range []*node{a, b} {
			if n == nil {
				continue
			}
			for _, p := range []*harness.Proc{n.router, n.gateway, n.runner} {
				for _, l := range strings.Split(p.Output(), "\n") {
					if !strings.Contains(l, `"level":"debug"`) || strings.Contains(l, "sent") {
						t.Logf("%s/%s: %s", n.name, p.Name, l)
					}
				}
			}
		}
	})
	redisSrv.Flush(t)
	net := myceliumemu.NewForTest(t, "a", "b")
	ma, mb := net.Node("a"), net.Node("b")
	a = newNode(t, "a", redisSrv, ma, "1", routerArgsA...)
	b = newNode(t, "b", redistest.Start(t), mb, "7", routerArgsB...)
	for _, n := range []*node{a, b} {
		n.operator().MustCall(t, "actor.create", map[string]any{"actor": map[string]any{"id": 1, "pubkey": harness.ActorPubkey(1)}}, nil)
	}
	a.operator().MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 1, "admins": []int{1}}}, nil)
	b.operator().MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 1, "admins": []int{1}, "allowed_sources": []string{ma.PK()}}}, nil)
	ca, cb := a.client(1), b.client(1)
	ca.MustCall(t, "runner.create", map[string]any{"context_id": 1, "runner": map[string]any{"id": 1, "script_types": []string{"sh", "python"}}}, nil)
	ca.MustCall(t, "runner.create", map[string]any{"context_id": 1, "runner": map[string]any{"id": 7, "local": false, "pubkey": mb.PK()}}, nil)
	cb.MustCall(t, "runner.create", map[string]any{"context_id": 1, "runner": map[string]any{"id": 7, "script_types": []string{"sh", "python"}}}, nil)
	return net, a, b, ca, cb
}

// remoteFlow: 1 (A) → 2 (runner 7, on B) → 3 (A); results cross both ways.
func remoteFlow(t *testing.T, c *harness.Client, flowID uint32, middle string, retries int) {
	t.Helper()
	jobs := []map[string]any{
		{"id": flowID*10 + 1, "script_type": "sh", "script": `echo "X=21" > "$HERO_RESULT_FILE"; echo "on A: $GREETING"`},
		{"id": flowID*10 + 2, "script_type": "python", "runner_id": 7, "retries": retries, "depends": []uint32{flowID*10 + 1},
			"script": middle},
		{"id": flowID*10 + 3, "script_type": "sh", "depends": []uint32{flowID*10 + 2},
			"script": `echo "back on A: $HERO_DEP_` + fmtUint(flowID*10+2) + `_Y"`},
	}
	var ids []uint32
	for _, j := range jobs {
		c.MustCall(t, "job.create", map[string]any{"context_id": 1, "job": j}, nil)
		ids = append(ids, j["id"].(uint32))
	}
	c.MustCall(t, "flow.create", map[string]any{"context_id": 1, "flow": map[string]any{"id": flowID, "jobs": ids, "env_vars": map[string]string{"GREETING": "hi"}}}, nil)
	c.MustCall(t, "flow.start", map[string]any{"context_id": 1, "id": flowID}, nil)
}

func fmtUint(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}

const middleScript = `import os
x = os.environ["HERO_DEP_%d_X"]
print("on B:", x, os.environ["GREETING"], os.environ["HERO_CONTEXT_ID"])
open(os.environ["HERO_RESULT_FILE"], "w").write(f"Y={int(x) * 2}\n")`

func middle(flowID uint32) string {
	return strings.Replace(middleScript, "%d", fmtUint(flowID*10+1), 1)
}

func checkRemoteFlow(t *testing.T, ca *harness.Client, flowID uint32) harness.Flow {
	t.Helper()
	f := ca.WaitFlow(t, 1, flowID, 90*time.Second)
	if f.Status != "finished" {
		t.Fatalf("flow %d: %+v", flowID, f)
	}
	m := fmtUint(flowID*10 + 2)
	if f.Result[m+".Y"] != "42" || f.Result[m+".output"] != "on B: 21 hi 1\n" || f.Result[fmtUint(flowID*10+3)+".output"] != "back on A: 42\n" {
		t.Fatalf("results crossing the nodes: %v", f.Result)
	}
	return f
}

// Acceptance (gateway 1): a flow whose middle job runs on node B; results cross both
// ways; the flow finishes with the right result map.
func TestTwoNodeFlow(t *testing.T) {
	_, _, b, ca, cb := twoNodes(t)
	remoteFlow(t, ca, 1, middle(1), 0)
	checkRemoteFlow(t, ca, 1)
	// The job ran on B (its runner 7), in the context with the same id.
	var j harness.Job
	cb.MustCall(t, "job.load", map[string]any{"context_id": 1, "caller_id": 1, "id": 12}, &j)
	if j.Status != "finished" || j.Worker == "" || strings.HasPrefix(j.Worker, "remote:") || j.Result["Y"] != "42" {
		t.Fatalf("job on B: %+v", j)
	}
	var msg map[string]any
	ca.MustCall(t, "job.load", map[string]any{"context_id": 1, "caller_id": 1, "id": 12}, &msg)
	if !strings.HasPrefix(msg["worker"].(string), "remote:") {
		t.Errorf("A's record of the remote job: %v", msg["worker"])
	}
	_ = b
}

// Acceptance (gateway 3): a duplicated inbound message runs the job once.
func TestTwoNodeDuplicateRunsOnce(t *testing.T) {
	net, _, _, ca, cb := twoNodes(t)
	net.Duplicate(20) // every message for a while arrives twice
	remoteFlow(t, ca, 2, middle(2), 0)
	checkRemoteFlow(t, ca, 2)
	var ev struct {
		Events []map[string]any `json:"events"`
	}
	cb.MustCall(t, "events.read", map[string]any{"context_id": 1, "limit": 1000}, &ev)
	if n := countEvents(ev.Events, "job.started", 22); n != 1 {
		t.Fatalf("the remote job started %d times on B", n)
	}
	if net.Stats().Duplicated == 0 {
		t.Fatal("the emulator duplicated nothing")
	}
}

// Acceptance (gateway 3): a partition longer than timeout_ack: the node's job is
// retried per its policy with the reason recorded; after the partition heals the flow
// carries on and finishes.
func TestTwoNodePartition(t *testing.T) {
	net, _, _, ca, _ := twoNodes(t, "--remote-ack-timeout", "2s")
	net.Partition(net.Node("a"), net.Node("b"))
	remoteFlow(t, ca, 3, middle(3), 2)
	// The first attempt times out waiting for the acknowledgement.
	if !ca.WaitEvent(t, 1, time.Minute, func() bool {
		for _, e := range events(t, ca) {
			if e["type"] == "job.retried" && evJob(e) == 32 && strings.Contains(e["detail"].(string), "no acknowledgement") {
				return true
			}
		}
		return false
	}) {
		t.Fatal("no retry after the acknowledgement timeout")
	}
	net.Heal()
	checkRemoteFlow(t, ca, 3)
}

// Acceptance (gateway 3): kill -9 of either gateway mid-flow; the flow still finishes.
func TestTwoNodeGatewayKill(t *testing.T) {
	for _, which := range []string{"a", "b"} {
		t.Run(which, func(t *testing.T) {
			_, a, b, ca, _ := twoNodes(t)
			n := a
			if which == "b" {
				n = b
			}
			// No retries: a message the kill lost would fail the flow, not hide behind a retry.
			remoteFlow(t, ca, 4, strings.Replace(middle(4), "import os", "import os, time\ntime.sleep(2)", 1), 0)
			// The request's transport id is written when the gateway took it: no event
			// announces it, so this waits on Redis with a deadline.
			deadline := time.Now().Add(time.Minute)
			for !remoteSent(t, ca) {
				if time.Now().After(deadline) {
					t.Fatal("the remote job was not sent")
				}
				time.Sleep(20 * time.Millisecond)
			}
			n.gateway.Kill()
			n.start("mycelium-gateway")
			checkRemoteFlow(t, ca, 4)
			if evs := events(t, ca); countEvents(evs, "job.retried", 42) != 0 || countEvents(evs, "job.failed", 42) != 0 {
				t.Fatal("the remote job needed another attempt: a message was lost with the gateway")
			}
		})
	}
}

// remoteSent reports whether node A sent a job request over the gateway.
func remoteSent(t *testing.T, ca *harness.Client) bool {
	c := redisSrv.Client(t, 1)
	for _, k := range redisSrv.Keys(t, 1) {
		if strings.HasPrefix(k, "message:") && c.HGet(context.Background(), k, "transport_id").Val() != "" {
			return true
		}
	}
	return false
}

// Acceptance (gateway 4): a message from a source the target context does not allow is
// refused and counted; malformed payloads are refused with a reason; the gateway keeps
// serving.
func TestTwoNodeRefusals(t *testing.T) {
	net, _, b, ca, _ := twoNodes(t)
	ma, mb := net.Node("a"), net.Node("b")
	// A third node that B's context does not allow.
	mc, err := net.AddNode("c")
	if err != nil {
		t.Fatal(err)
	}
	pushRaw := func(from *myceliumemu.Node, topic, payload string) {
		t.Helper()
		body := `{"dst":{"pk":"` + mb.PK() + `"},"topic":"` + b64(topic) + `","payload":"` + b64(payload) + `"}`
		resp, err := httpPost(from.URL()+"/api/v1/messages", body)
		if err != nil || resp != 201 {
			t.Fatalf("push: %d %v", resp, err)
		}
	}
	req := `{"v":1,"kind":"job_request","context_id":1,"msg_key":"message:1:999","message":{"caller_id":1,"context_id":1,"kind":"job_request","job":[{"id":900,"caller_id":1,"context_id":1,"script":"echo x","script_type":"sh","runner_id":7}]}}`
	pushRaw(mc, "runner7", req)                                                         // a source context 1 does not allow
	pushRaw(ma, "runner7", "this is not JSON")                                          // not JSON
	pushRaw(ma, "runner7", strings.Replace(req, `"context_id":1`, `"context_id":9`, 1)) // unknown context
	want := map[string]float64{"source_not_allowed": 1, "malformed": 1, "unknown_context": 1}
	if !ca.WaitEvent(t, 1, time.Minute, func() bool {
		for reason, n := range want {
			if metric(t, b.gateway, `hero_gateway_refused_total{reason="`+reason+`"}`) < n {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("refusals not counted: %s", b.gateway.Output())
	}
	for _, reason := range []string{"source_not_allowed", "malformed", "unknown_context"} {
		if _, err := b.gateway.WaitLog(context.Background(), `"reason":"`+reason+`"`, "inbound message refused"); err != nil {
			t.Errorf("no logged reason %s", reason)
		}
	}
	if n := len(redisSrv.Keys(t, 1)); n == 0 {
		t.Fatal("A's keys vanished")
	}
	// Still serving: a real flow goes through.
	remoteFlow(t, ca, 5, middle(5), 0)
	checkRemoteFlow(t, ca, 5)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func httpPost(url, body string) (int, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
