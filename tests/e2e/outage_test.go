package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (issue 17, 5): while Redis is down the API answers -32000 / Unavailable
// with a retry hint (never -32603), for signed and operator requests alike; and
// `heroctl flow submit --watch` rides through a 3 s Redis restart: it exits 0 once
// the flow finished.
func TestRedisOutageIsUnavailableAndHeroctlRidesThrough(t *testing.T) {
	rs := redistest.Start(t, aofAlways)
	s := harness.StartStack(t, binDir, rs.URL, harness.StackOptions{})
	c := s.Setup(t, ctx1)
	dir := t.TempDir()
	flowFile := filepath.Join(dir, "slow.yaml")
	if err := os.WriteFile(flowFile, []byte("jobs:\n  - {name: a, type: sh, script: 'sleep 2'}\n  - {name: b, type: sh, script: 'sleep 3', depends: [a]}\n  - {name: c, type: sh, script: 'echo done', depends: [b]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// heroctl in the background, as a user would run it.
	s.Heroctl(t, nil, "--help") // makes the config directory with the actors' keys
	p, err := harness.PKI()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "heroctl"), "flow", "submit", flowFile, "--watch")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HERO_ADDR=" + s.API.GRPCAddr, "HERO_CONFIG_DIR=" + s.ConfigDir,
		"HERO_TLS_CA=" + p.Files("api").CA, "HERO_ACTOR=1", "HERO_CONTEXT=1"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	if !c.WaitEventOf(t, ctx1, time.Minute, func(ev *herov1.Event) bool { return ev != nil && ev.Type == "job.started" }) {
		t.Fatalf("the flow's first job did not start:\n%s", out.String())
	}
	if err := rs.Down(redistest.DownShutdown); err != nil {
		t.Fatal(err)
	}
	downAt := time.Now()
	// While Redis is down: Unavailable, for an actor's signed request and for the operator.
	for name, cl := range map[string]*harness.Client{"actor": c, "operator": s.Operator()} {
		err := cl.Call("flow.list", map[string]any{"context_id": ctx1}, nil)
		re, ok := err.(*harness.RPCError)
		if !ok || re.Code != -32000 || re.Data["retry_after_ms"] == nil {
			t.Errorf("%s, JSON-RPC while Redis is down: %v (%+v)", name, err, re)
		}
	}
	cc, err := c.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_, err = herov1.NewCoordinatorClient(cc).ListFlows(ctx, &herov1.ListFlowsRequest{ContextId: ctx1})
	cancel()
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || len(st.Details()) == 0 {
		t.Errorf("gRPC while Redis is down: %v", err)
	}
	time.Sleep(3*time.Second - time.Since(downAt)) // the outage under test lasts 3 s
	if err := rs.Up(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "finished") {
			t.Fatalf("heroctl flow submit --watch across the Redis restart: %v\n%s", err, out.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("heroctl flow submit --watch did not end after Redis came back:\n%s", out.String())
	}
}
