package auth

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
)

// The client's signature covers the bytes the server received: a unary call and a
// stream's opening message each verify with the digest the server codec recorded,
// and every call carries a new nonce.
func TestGRPCSignedCallsVerifyOnTheServer(t *testing.T) {
	pub, priv, _ := GenerateKey()
	codec := NewDigestCodec("grpc.health.v1")
	var mu sync.Mutex
	var checked []string // method + verdict
	var nonces []string
	verify := func(ctx context.Context, method string, msg any) {
		d, ok := codec.TakeDigest(msg)
		md, _ := metadata.FromIncomingContext(ctx)
		get := func(k string) string {
			if v := md.Get(k); len(v) > 0 {
				return v[0]
			}
			return ""
		}
		p, err := Parse(Credentials{Actor: get(MetadataActor), Timestamp: get(MetadataTimestamp), Nonce: get(MetadataNonce), Signature: get(MetadataSignature)})
		verdict := "ok"
		switch {
		case !ok:
			verdict = "no digest"
		case err != nil:
			verdict = err.Error()
		case !p.Verify(pub, method, d):
			verdict = "bad signature"
		}
		mu.Lock()
		checked = append(checked, method+" "+verdict)
		nonces = append(nonces, p.Nonce)
		mu.Unlock()
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(codec),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			verify(ctx, info.FullMethod, req)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, &recvHook{ServerStream: ss, fn: func(m any) { verify(ss.Context(), info.FullMethod, m) }})
		}))
	addr := serveHealth(t, srv)

	signer := &Signer{Actor: 9, Key: priv}
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, DialOptions(signer)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	for i := 0; i < 2; i++ {
		if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "svc"}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("check: %v %v", r, err)
		}
	}
	stream, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/grpc.health.v1.Health/Check ok", "/grpc.health.v1.Health/Check ok", "/grpc.health.v1.Health/Watch ok"}
	if len(checked) != len(want) {
		t.Fatalf("checked %v, want %v", checked, want)
	}
	for i := range want {
		if checked[i] != want[i] {
			t.Fatalf("checked %v, want %v", checked, want)
		}
	}
	if nonces[0] == nonces[1] {
		t.Fatal("two calls share a nonce")
	}
}

type recvHook struct {
	grpc.ServerStream
	fn func(any)
}

func (r *recvHook) RecvMsg(m any) error {
	if err := r.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	r.fn(m)
	return nil
}

// serveHealth registers a health service ("svc" serving) on srv, serves it on a
// loopback port until the test ends, and returns the address.
func serveHealth(t *testing.T, srv *grpc.Server) string {
	t.Helper()
	hs := health.NewServer()
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// wireMsg is a WireMessage that keeps the bytes it was handed.
type wireMsg struct {
	digested bool
	got      string
}

func (w *wireMsg) DecodeWire(s string) error { w.got = s; return nil }
func (w *wireMsg) Digested() bool            { return w.digested }

// A WireMessage is handed the bytes as received (in one piece, however many buffers
// they came in), and has the digest of those same bytes recorded when it asks for it
// (a stream's opening message) and none when it does not (a later one: the
// authentication, which looks for it, refuses a call without it).
func TestDigestCodecWireMessage(t *testing.T) {
	codec := NewDigestCodec("hero.v1")
	data := mem.BufferSlice{mem.SliceBuffer("the opening "), mem.SliceBuffer("message")}
	opening := &wireMsg{digested: true}
	if err := codec.Unmarshal(data, opening); err != nil {
		t.Fatal(err)
	}
	if opening.got != "the opening message" {
		t.Fatalf("decoded %q", opening.got)
	}
	d, ok := codec.TakeDigest(opening)
	if !ok || d != Digest([]byte("the opening message")) {
		t.Fatalf("digest %x, %v; want the SHA-256 of the bytes", d, ok)
	}
	later := &wireMsg{}
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer("later")}, later); err != nil {
		t.Fatal(err)
	}
	if later.got != "later" {
		t.Fatalf("decoded %q", later.got)
	}
	if _, ok := codec.TakeDigest(later); ok {
		t.Fatal("a message that did not ask for its digest has one")
	}
}
