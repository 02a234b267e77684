package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/mycelium"
	"github.com/hero-coordinator/hero/lib/remote"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/myceliumemu"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

var srv *redistest.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// A Mycelium node that answers a message whose payload is not base64: the gateway
// refuses it with a reason, counts it, stays connected, and takes the next message.
func TestMalformedInboundIsRefusedAndServingGoesOn(t *testing.T) {
	var pops atomic.Int32
	third := make(chan struct{}) // closed at the third message: both bad ones were handled
	var thirdOnce sync.Once
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/admin":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"nodeSubnet":"400::/64","nodePubkey":"` + pk + `"}`))
		case "/api/v1/messages":
			w.Header().Set("Content-Type", "application/json")
			// A peek shows the head again; a pop moves on.
			n := pops.Load() + 1
			if r.URL.Query().Get("peek") != "true" {
				n = pops.Add(1)
			}
			if n == 3 {
				thirdOnce.Do(func() { close(third) })
			}
			switch n {
			case 1: // not base64
				_, _ = w.Write([]byte(`{"id":"0123456789abcdef","srcIp":"400::1","srcPk":"` + pk + `","dstIp":"400::2","dstPk":"` + pk + `","topic":"cnVubmVyNw==","payload":"!!! not base64 !!!"}`))
			case 2: // base64, not JSON
				_, _ = w.Write([]byte(`{"id":"0123456789abcdee","srcIp":"400::1","srcPk":"` + pk + `","dstIp":"400::2","dstPk":"` + pk + `","topic":"cnVubmVyNw==","payload":"bm90IGpzb24="}`))
			default:
				w.WriteHeader(http.StatusNoContent)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer node.Close()
	srv.Flush(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, store.Options{URL: srv.URL, ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mc, err := mycelium.New(mycelium.Config{BaseURL: node.URL})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var logs syncBuffer
	g := newGateway(gatewayParams{store: st, log: zerolog.New(&logs), reg: reg, mycelium: mc, pollTimeout: time.Second})
	done := make(chan error, 1)
	go func() { done <- g.run(ctx) }()
	select {
	case <-third:
	case <-time.After(time.Minute):
		t.Fatal("the gateway stopped popping after a malformed message")
	}
	if n := testutil.ToFloat64(g.m.refused.WithLabelValues("malformed")); n != 2 {
		t.Fatalf("malformed refusals counted: %v, want 2", n)
	}
	// Each refusal is logged with its reason and what was wrong.
	out := logs.String()
	if strings.Count(out, `"reason":"malformed"`) != 2 || !strings.Contains(out, "base64") || !strings.Contains(out, `"message":"inbound message refused"`) {
		t.Fatalf("refusals logged:\n%s", out)
	}
	if err := g.check(ctx); err != nil {
		t.Fatalf("a malformed message must not count as a lost node: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log sink that the gateway's goroutine and the test share.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed (and replaced) at each write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	return s.b.Write(p)
}

// next is the text so far and a channel closed at the next write.
func (s *syncBuffer) next() (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written == nil {
		s.written = make(chan struct{})
	}
	return s.b.String(), s.written
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// routerStub answers Deliver with the errors queued in errs, then with success.
type routerStub struct {
	calls atomic.Int32
	errs  []error
}

func (r *routerStub) Deliver(context.Context, *herov1.DeliverRequest, ...grpc.CallOption) (*herov1.DeliverResponse, error) {
	n := int(r.calls.Add(1))
	if n <= len(r.errs) {
		return nil, r.errs[n-1]
	}
	return &herov1.DeliverResponse{}, nil
}

// An inbound message has left the Mycelium node already: a router that is down or
// restarting is retried until it answers; a refusal by a working router is final; a
// router that stays down past --router-wait gets the message refused.
func TestDeliverRetriesAnUnavailableRouter(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "connection refused")
	for _, tc := range []struct {
		name    string
		errs    []error
		wait    time.Duration
		calls   int32
		wantErr codes.Code
	}{
		{"router back after restarts", []error{unavailable, unavailable, status.Error(codes.DeadlineExceeded, "slow")}, time.Minute, 4, codes.OK},
		{"router refuses", []error{status.Error(codes.FailedPrecondition, "job conflicts")}, time.Minute, 1, codes.FailedPrecondition},
		{"router down for good", []error{unavailable, unavailable, unavailable, unavailable, unavailable, unavailable, unavailable, unavailable}, 250 * time.Millisecond, 0, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := &routerStub{errs: tc.errs}
			g := newGateway(gatewayParams{log: zerolog.Nop(), reg: prometheus.NewRegistry(), router: rs, routerWait: tc.wait})
			_, err := g.deliver(context.Background(), &herov1.DeliverRequest{ContextId: 1}, zerolog.Nop())
			if status.Code(err) != tc.wantErr {
				t.Fatalf("error %v, want code %v", err, tc.wantErr)
			}
			if tc.calls != 0 && rs.calls.Load() != tc.calls {
				t.Fatalf("%d calls, want %d", rs.calls.Load(), tc.calls)
			}
			if tc.calls == 0 && (rs.calls.Load() < 2 || int(rs.calls.Load()) > len(tc.errs)) {
				t.Fatalf("%d calls before giving up", rs.calls.Load())
			}
			if want := float64(max(rs.calls.Load()-1, 0)); tc.wantErr != codes.FailedPrecondition && testutil.ToFloat64(g.m.routerRetries) != want {
				t.Fatalf("retries counted: %v, want %v", testutil.ToFloat64(g.m.routerRetries), want)
			}
		})
	}
}

// blockingRouter holds every delivery until the caller gives up (the gateway dies
// mid-hand-over), or answers at once when open.
type blockingRouter struct {
	open      bool
	delivered chan *herov1.DeliverRequest
	started   chan struct{}
	once      sync.Once
}

func (r *blockingRouter) Deliver(ctx context.Context, req *herov1.DeliverRequest, _ ...grpc.CallOption) (*herov1.DeliverResponse, error) {
	if !r.open {
		r.once.Do(func() { close(r.started) })
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	r.delivered <- req
	return &herov1.DeliverResponse{}, nil
}

// A gateway that dies between taking a message from its Mycelium node and handing it
// to the router loses nothing: it peeks, hands over, and only then pops, so the next
// gateway finds the message and delivers it (once), and the inbox ends empty.
func TestMessageSurvivesAGatewayDyingMidDelivery(t *testing.T) {
	srv.Flush(t)
	nw := myceliumemu.NewForTest(t, "a", "b")
	ma, mb := nw.Node("a"), nw.Node("b")
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{URL: srv.URL, ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, _, err := st.CreateActor(ctx, &model.Actor{ID: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateContext(ctx, &model.Context{ID: 1, Admins: []uint32{1}, AllowedSources: []string{ma.PK()}}, "operator"); err != nil {
		t.Fatal(err)
	}
	env := &remote.Envelope{Kind: remote.KindJobRequest, ContextID: 1, MsgKey: "message:1:5", Origin: ma.PK(),
		Message: &model.Message{ID: 5, CallerID: 1, ContextID: 1, Kind: model.KindJobRequest,
			Job: []model.Job{{ID: 50, CallerID: 1, ContextID: 1, Script: "echo hi", ScriptType: "sh", RunnerID: 7}}}}
	payload, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := mycelium.New(mycelium.Config{BaseURL: ma.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Push(ctx, mycelium.Destination{PK: mb.PK()}, []byte("runner7"), payload, nil); err != nil {
		t.Fatal(err)
	}
	mc, err := mycelium.New(mycelium.Config{BaseURL: mb.URL()})
	if err != nil {
		t.Fatal(err)
	}
	start := func(r *blockingRouter) (context.CancelFunc, chan error) {
		gctx, cancel := context.WithCancel(ctx)
		g := newGateway(gatewayParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), mycelium: mc,
			router: r, pollTimeout: time.Second, routerWait: time.Minute})
		done := make(chan error, 1)
		go func() { done <- g.run(gctx) }()
		return cancel, done
	}

	// The first gateway takes the message and dies while the router holds it.
	first := &blockingRouter{started: make(chan struct{})}
	cancel, done := start(first)
	select {
	case <-first.started:
	case <-time.After(time.Minute):
		t.Fatal("the first gateway never handed the message over")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := mb.InboxLen(); n != 1 {
		t.Fatalf("inbox holds %d messages after the gateway died mid-delivery, want 1", n)
	}

	// The next gateway delivers it and removes it.
	second := &blockingRouter{open: true, delivered: make(chan *herov1.DeliverRequest, 4)}
	cancel, done = start(second)
	defer func() { cancel(); <-done }()
	select {
	case req := <-second.delivered:
		if req.ContextId != 1 || len(req.Message.GetJob()) != 1 || req.Message.GetJob()[0].GetId() != 50 || req.Source != ma.PK() {
			t.Fatalf("delivered %v", req)
		}
	case <-time.After(time.Minute):
		t.Fatal("the message was lost with the first gateway")
	}
	if err := nw.WaitUntil(ctx, func() bool { return mb.InboxLen() == 0 }); err != nil {
		t.Fatalf("the delivered message stayed in the inbox: %v", err)
	}
	select {
	case req := <-second.delivered:
		t.Fatalf("delivered twice: %v", req)
	default:
	}
}

const pk = "ce4095f05bd112dfb3f613d7fa5cc94d3da886b7561ac7ef012c9a1fc7311630"

// A message naming a context beyond the Redis server's databases (context 99 on a
// server of 64), taken by a gateway whose Redis user may not read CONFIG (so the store
// cannot check the bound beforehand), is refused with a reason that names the
// context, not with Redis's "ERR DB index is out of range": a job request and an ack.
func TestContextBeyondTheDatabasesIsRefusedByName(t *testing.T) {
	srv.Flush(t)
	ctx := context.Background()
	if err := srv.Client(t, 0).Do(ctx, "ACL", "SETUSER", "gw-noconfig", "on", ">gw-pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Client(t, 0).Do(ctx, "ACL", "DELUSER", "gw-noconfig").Err() })
	st, err := store.Open(ctx, store.Options{URL: "redis://gw-noconfig:gw-pw@" + srv.Addr + "/0", ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	nw := myceliumemu.NewForTest(t, "a", "b")
	ma, mb := nw.Node("a"), nw.Node("b")
	mc, err := mycelium.New(mycelium.Config{BaseURL: mb.URL()})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	g := newGateway(gatewayParams{store: st, log: zerolog.New(logs), reg: prometheus.NewRegistry(), mycelium: mc,
		router: &routerStub{}, pollTimeout: 10 * time.Second, routerWait: time.Minute})
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.run(gctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	ca, err := mycelium.New(mycelium.Config{BaseURL: ma.URL()})
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []*remote.Envelope{
		{Kind: remote.KindJobRequest, ContextID: 99, MsgKey: "message:1:5", Message: &model.Message{ID: 5, CallerID: 1, ContextID: 99, Kind: model.KindJobRequest,
			Job: []model.Job{{ID: 50, CallerID: 1, ContextID: 99, Script: "echo hi", ScriptType: "sh", RunnerID: 7}}}},
		{Kind: remote.KindAck, ContextID: 99, MsgKey: "message:1:5"},
	} {
		payload, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ca.Push(ctx, mycelium.Destination{PK: mb.PK()}, []byte("runner7"), payload, nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		out, written := logs.next()
		if strings.Count(out, `"reason":"unknown_context"`) == 2 {
			if strings.Count(out, "context_id 99 is beyond the databases") != 2 || strings.Contains(out, "DB index is out of range") {
				t.Fatalf("the refusals do not name the context:\n%s", out)
			}
			break
		}
		select {
		case <-written:
		case <-deadline.C:
			t.Fatalf("no refusals for context 99 within a minute:\n%s", out)
		}
	}
	if n := testutil.ToFloat64(g.m.refused.WithLabelValues("unknown_context")); n != 2 {
		t.Fatalf("unknown_context refusals counted: %v, want 2", n)
	}
}
