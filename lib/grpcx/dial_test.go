package grpcx

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// countingServer is a real server on 127.0.0.1 that counts the calls it handled.
type countingServer struct {
	*Server
	calls atomic.Int64
}

func startCounting(t *testing.T) *countingServer {
	t.Helper()
	cs := &countingServer{}
	count := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		cs.calls.Add(1)
		return h(ctx, req)
	})
	s, err := NewServer("127.0.0.1:0", prometheus.NewRegistry(), zerolog.Nop(), Options{}, count)
	if err != nil {
		t.Fatal(err)
	}
	cs.Server = s
	go func() { _ = s.ListenAndServe() }()
	t.Cleanup(s.Stop)
	s.SetServing(true)
	return cs
}

// Issue 20: a client of several replicas (a comma-separated list) spreads its calls
// over all of them, sends none to a replica that reports NOT_SERVING, and carries on
// with the others when one dies. Before, the client picked the first address and
// stuck to it.
func TestDialReplicas(t *testing.T) {
	a, b := startCounting(t), startCounting(t)
	cc, err := Dial(a.Addr()+", "+b.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func() error {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	}
	// Both serve: both get calls (round robin over the ready ones).
	for i := 0; i < 40; i++ {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	if a.calls.Load() == 0 || b.calls.Load() == 0 {
		t.Fatalf("calls: %d and %d, want both replicas used", a.calls.Load(), b.calls.Load())
	}

	// b reports NOT_SERVING (shutting down): once the client heard it, b gets nothing.
	b.SetServing(false)
	for n := 0; n < 20; {
		before := b.calls.Load()
		if err := call(); err != nil {
			t.Fatal(err)
		}
		if b.calls.Load() == before {
			n++ // a run of calls that all went to a
		} else {
			n = 0
		}
		if ctx.Err() != nil {
			t.Fatal("calls still reach the replica that is not serving")
		}
	}

	// b serves again (the client hears it: b gets calls) and a dies: a call already
	// on its way to a may fail (Unavailable: the caller retries it), the others go to b.
	b.SetServing(true)
	for before := b.calls.Load(); b.calls.Load() == before; {
		if err := call(); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the replica serving again gets no calls")
		}
	}
	a.Stop()
	before, failed := b.calls.Load(), 0
	for ok := 0; ok < 20; {
		if err := call(); err != nil {
			if failed++; failed > 1 {
				t.Fatalf("calls after a replica died: %v", err)
			}
			continue
		}
		ok++
	}
	if got := b.calls.Load() - before; got < 20 {
		t.Fatalf("the surviving replica handled %d of 20 calls", got)
	}
}

// A dns:/// target (a headless Service's name) reaches the server.
func TestDialDNS(t *testing.T) {
	a := startCounting(t)
	cc, err := Dial("dns:///"+a.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	if a.calls.Load() != 1 {
		t.Fatalf("calls: %d", a.calls.Load())
	}
}
