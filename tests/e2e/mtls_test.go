package e2e

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/testutil/myceliumemu"
	"github.com/hero-coordinator/hero/lib/tlsx"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (Trust II 1): each internal gRPC service refuses a plaintext client, a
// TLS client without a certificate and a certificate from another CA; a certificate
// of the stack's CA that names a service not allowed to call the method is refused too
// (the forged calls of the issue: JobsDone, CancelFlow, StopJob, Deliver, Send) —
// per method (Trust IV): the router may report results to the scheduler but not
// cancel a flow, supervisor-daemon the reverse, and no service stops a job through a
// runner's RunnerControl (the services stop jobs through Redis; it is the
// operator's); those allowed are served.
func TestInternalServicesRequireMutualTLS(t *testing.T) {
	s, _ := newStack(t, harness.StackOptions{})
	mnet := myceliumemu.NewForTest(t, "n")
	gw := harness.Start(t, binDir, "mycelium-gateway", redisSrv.URL, harness.Options{Args: []string{"--mycelium-url", mnet.Node("n").URL(), "--router-addr", s.Router.GRPCAddr}})
	other := &tlsx.PKI{Dir: t.TempDir()}
	if _, err := other.Init(); err != nil {
		t.Fatal(err)
	}
	ours, err := harness.PKI()
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		service, addr string
		call          func(cc *grpc.ClientConn) error // an internal method
		allowed       string                          // a service that may call it
		forbidden     string                          // one that may not
	}
	ctx := context.Background()
	targets := []target{
		{"scheduler", s.Scheduler.GRPCAddr, func(cc *grpc.ClientConn) error {
			_, err := herov1.NewSchedulerClient(cc).JobsDone(ctx, &herov1.JobsDoneRequest{Ends: []*herov1.JobDoneRequest{{ContextId: 1, CallerId: 1, JobId: 999}}})
			return err
		}, "router", "supervisor-daemon"},
		{"scheduler", s.Scheduler.GRPCAddr, func(cc *grpc.ClientConn) error {
			_, err := herov1.NewSchedulerClient(cc).CancelFlow(ctx, &herov1.SchedulerCancelFlowRequest{ContextId: 1, FlowId: 999, Actor: "mallory"})
			return err
		}, "supervisor-daemon", "router"},
		{"runner", s.Runner.GRPCAddr, func(cc *grpc.ClientConn) error {
			_, err := herov1.NewRunnerControlClient(cc).StopJob(ctx, &herov1.RunnerStopJobRequest{ContextId: 2, CallerId: 1, JobId: 1})
			return err
		}, "operator", "scheduler"},
		{"router", s.Router.GRPCAddr, func(cc *grpc.ClientConn) error {
			_, err := herov1.NewRouterClient(cc).Deliver(ctx, &herov1.DeliverRequest{ContextId: 1, Source: "mallory"})
			return err
		}, "mycelium-gateway", "runner"},
		{"mycelium-gateway", gw.GRPCAddr, func(cc *grpc.ClientConn) error {
			_, err := herov1.NewGatewayClient(cc).Send(ctx, &herov1.GatewaySendRequest{DestinationPk: "00"})
			return err
		}, "router", "scheduler"},
	}
	dial := func(addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	health := func(cc *grpc.ClientConn) error {
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := healthpb.NewHealthClient(cc).Check(c, &healthpb.HealthCheckRequest{})
		return err
	}
	for _, tg := range targets {
		serverName := tlsx.ServiceName(tg.service)
		caPool, _ := tlsx.LoadPool(ours.Files("ca").CA)
		foreign, err := tlsx.ClientConfig(tlsx.Files{CA: ours.Files("ca").CA, Cert: other.Files(tg.allowed).Cert, Key: other.Files(tg.allowed).Key}, serverName, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		refusals := map[string]credentials.TransportCredentials{
			"plaintext":            insecure.NewCredentials(),
			"tls without a cert":   credentials.NewTLS(&tls.Config{RootCAs: caPool, ServerName: serverName, MinVersion: tls.VersionTLS12}),
			"a cert of another CA": credentials.NewTLS(foreign),
		}
		for name, creds := range refusals {
			if err := health(dial(tg.addr, creds)); status.Code(err) != codes.Unavailable {
				t.Errorf("%s, %s: the health check answered %v, want the connection refused", tg.service, name, err)
			}
			if err := tg.call(dial(tg.addr, creds)); status.Code(err) != codes.Unavailable {
				t.Errorf("%s, %s: an internal call answered %v, want the connection refused", tg.service, name, err)
			}
		}
		cc, err := harness.DialInternal(tg.addr, tg.service, tg.forbidden)
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.call(cc); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s called by %s (not allowed): %v, want PermissionDenied", tg.service, tg.forbidden, err)
		}
		if err := health(cc); err != nil {
			t.Errorf("%s: health for a verified peer: %v", tg.service, err)
		}
		_ = cc.Close()
		cc, err = harness.DialInternal(tg.addr, tg.service, tg.allowed)
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.call(cc); status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.Unavailable {
			t.Errorf("%s called by %s (allowed): %v", tg.service, tg.allowed, err)
		}
		_ = cc.Close()
	}
	// A server must prove it is the service the client dials: the router's address
	// dialled as "scheduler" fails the handshake.
	cc, err := harness.DialInternal(s.Router.GRPCAddr, "scheduler", "supervisor-daemon")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	if err := health(cc); status.Code(err) != codes.Unavailable {
		t.Errorf("the router accepted as the scheduler: %v", err)
	}
}

// Acceptance (Trust II 3): the router itself refuses an inbound job whose source the
// context does not allow, whichever service hands it over (here a direct Deliver
// with the gateway's own certificate): nothing is stored or run.
func TestRouterChecksAllowedSources(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	const allowed = "abababababababababababababababababababababababababababababababab"
	c.MustCall(t, "context.update", map[string]any{"id": ctx1, "allowed_sources": []string{allowed}}, nil)
	cc, err := harness.DialInternal(s.Router.GRPCAddr, "router", "mycelium-gateway")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	deliver := func(source string, jobID uint32) error {
		msg := &herov1.Message{Id: jobID, CallerId: 1, ContextId: ctx1, Kind: "job_request", Job: []*herov1.Job{{
			Id: jobID, CallerId: 1, ContextId: ctx1, Script: "echo injected", ScriptType: "sh",
			Origin: `{"pk":"` + source + `","context_id":1,"msg_key":"message:1:77"}`,
		}}}
		_, err := herov1.NewRouterClient(cc).Deliver(context.Background(), &herov1.DeliverRequest{ContextId: ctx1, Message: msg, Source: source})
		return err
	}
	for _, src := range []string{"", "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"} {
		if err := deliver(src, 900); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a job from source %q: %v, want PermissionDenied", src, err)
		}
	}
	if err := c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 900}, nil); err == nil {
		t.Fatal("a refused inbound job was stored")
	}
	// The allowed source is taken.
	if err := deliver(allowed, 901); err != nil {
		t.Fatalf("a job from an allowed source: %v", err)
	}
}
