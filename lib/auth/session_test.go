package auth

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/hero-coordinator/hero/lib/tlsx"
)

// The canonical string is exactly four lines; a signature verifies for its actor,
// timestamp and exporter value only.
func TestSessionSignVerify(t *testing.T) {
	ekm := bytes.Repeat([]byte{0xab}, ExporterLen)
	want := "HERO-SESSION-ED25519-V1\n7\n1700000000\n" + strings.Repeat("ab", ExporterLen)
	if got := SessionCanonical(7, 1700000000, ekm); got != want {
		t.Fatalf("canonical %q, want %q", got, want)
	}
	pub, priv, _ := GenerateKey()
	otherPub, _, _ := GenerateKey()
	s := &Signer{Actor: 7, Key: priv, Now: func() time.Time { return time.Unix(1700000000, 0) }}
	c, err := s.SignSession(ekm)
	if err != nil {
		t.Fatal(err)
	}
	if c.Actor != "7" || c.Timestamp != "1700000000" || len(c.Signature) != 128 {
		t.Fatalf("credentials %+v", c)
	}
	p, err := ParseSession(c)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verify(pub, ekm) {
		t.Fatal("a session signature does not verify")
	}
	other := bytes.Repeat([]byte{0xac}, ExporterLen)
	if p.Verify(pub, other) {
		t.Fatal("a signature verifies for another connection's exporter value")
	}
	if p.Verify(otherPub, ekm) || p.Verify(nil, ekm) {
		t.Fatal("a signature verifies for another key (or none)")
	}
	moved := p
	moved.Timestamp++
	if moved.Verify(pub, ekm) {
		t.Fatal("a signature verifies for another timestamp")
	}
	moved = p
	moved.Actor = 8
	if moved.Verify(pub, ekm) {
		t.Fatal("a signature verifies for another actor")
	}
	// A per-request signature's scheme can never be taken for a session's.
	if strings.HasPrefix(Canonical(7, "x", 1, "n", [32]byte{}), SessionScheme) {
		t.Fatal("the schemes overlap")
	}
	if _, err := s.SignSession(ekm[:16]); err == nil {
		t.Fatal("signed a short exporter value")
	}
	for _, bad := range []struct {
		c    SessionCredentials
		want string
	}{
		{SessionCredentials{Timestamp: "1", Signature: c.Signature}, "missing hero-actor"},
		{SessionCredentials{Actor: "x", Timestamp: "1", Signature: c.Signature}, "hero-actor is not an actor id"},
		{SessionCredentials{Actor: "7", Timestamp: "-1", Signature: c.Signature}, "hero-timestamp is not"},
		{SessionCredentials{Actor: "7", Timestamp: "1", Signature: "zz"}, "hero-session is not the hex"},
		{SessionCredentials{Actor: "7", Timestamp: "+" + c.Timestamp, Signature: c.Signature}, "hero-timestamp must be the unix time in decimal digits"},
		{SessionCredentials{Actor: "07", Timestamp: c.Timestamp, Signature: c.Signature}, "hero-actor must be the actor id in decimal digits"},
		{SessionCredentials{Actor: "7", Timestamp: c.Timestamp, Signature: strings.ToUpper(c.Signature)}, "hero-session must be lowercase hex"},
	} {
		if _, err := ParseSession(bad.c); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want %q", bad.c, err, bad.want)
		}
	}
}

// Over real TLS: every call carries the signature of its own connection's exporter
// value, which the server computes from its side of the connection; one connection's
// calls share one signature (signed once), another connection has another; the
// credential is never sent on a plaintext connection.
func TestSessionAuthOverTLS(t *testing.T) {
	pki := &tlsx.PKI{Dir: t.TempDir()}
	if _, err := pki.Init(); err != nil {
		t.Fatal(err)
	}
	scfg, err := tlsx.ServerConfig(pki.Files("api"), false, "api", nil)
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := tlsx.ClientConfig(tlsx.Files{CA: pki.Files("api").CA}, "", "api", nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := GenerateKey()
	var mu sync.Mutex
	var verdicts []string
	var sigs []string
	check := func(ctx context.Context) {
		verdict, sig := sessionVerdict(t, ctx, pub)
		mu.Lock()
		verdicts = append(verdicts, verdict)
		sigs = append(sigs, sig)
		mu.Unlock()
	}
	serve := func(creds credentials.TransportCredentials) string {
		srv := grpc.NewServer(grpc.Creds(creds),
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				check(ctx)
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				check(ss.Context())
				return h(srv, ss)
			}))
		return serveHealth(t, srv)
	}
	addr := serve(credentials.NewTLS(scfg))
	exporting := serve(ExportingTLS(credentials.NewTLS(scfg)))
	sa := NewSessionAuth(&Signer{Actor: 9, Key: priv}, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func(addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(sa))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	// Plain TLS credentials on both sides, then ExportingTLS on both, then on one
	// side each: every pair agrees on each connection's value.
	conns := []*grpc.ClientConn{dial(addr, credentials.NewTLS(ccfg)), dial(addr, credentials.NewTLS(ccfg)),
		dial(exporting, ExportingTLS(credentials.NewTLS(ccfg))), dial(exporting, ExportingTLS(credentials.NewTLS(ccfg))),
		dial(addr, ExportingTLS(credentials.NewTLS(ccfg))), dial(exporting, credentials.NewTLS(ccfg))}
	for c, cc := range conns {
		hc := healthpb.NewHealthClient(cc)
		for i := 0; i < 2; i++ {
			var pr peer.Peer
			if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "svc"}, grpc.Peer(&pr)); err != nil {
				t.Fatal(err)
			}
			// the client's side: derived at the handshake with ExportingTLS (2, 3, 4)
			if _, derived := pr.AuthInfo.(ExportedTLSInfo); derived != (c >= 2 && c <= 4) {
				t.Fatalf("connection %d: the client's AuthInfo is %T", c, pr.AuthInfo)
			}
		}
		st, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	// "+": the server's value was derived at the handshake (an ExportingTLS server).
	if want := "ok,ok,ok,ok,ok,ok,ok+,ok+,ok+,ok+,ok+,ok+,ok,ok,ok,ok+,ok+,ok+"; strings.Join(verdicts, ",") != want {
		t.Fatalf("verdicts %v", verdicts)
	}
	seen := map[string]int{}
	for c := range conns {
		if sigs[3*c] != sigs[3*c+1] || sigs[3*c+1] != sigs[3*c+2] {
			t.Fatalf("connection %d's calls carry different signatures: %v", c, sigs[3*c:3*c+3])
		}
		if d, dup := seen[sigs[3*c]]; dup {
			t.Fatalf("connections %d and %d share a signature", d, c)
		}
		seen[sigs[3*c]] = c
	}
	mu.Unlock()
	if n := sa.cached(); n != len(conns) {
		t.Fatalf("%d signatures cached, want %d", n, len(conns))
	}

	// A plaintext connection cannot carry the credential: the client refuses it.
	plain := serve(insecure.NewCredentials())
	if cc, err := grpc.NewClient(plain, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(sa)); err == nil {
		_ = cc.Close()
		t.Fatal("a session credential accepted on a plaintext connection")
	} else if !strings.Contains(err.Error(), "transport level security") {
		t.Fatalf("a session credential over plaintext: %v", err)
	}
}

// sessionVerdict is a server's verdict on a call's session signature ("ok", "+" when
// its connection's exporter value was derived at the handshake) and the signature.
func sessionVerdict(t *testing.T, ctx context.Context, pub ed25519.PublicKey) (verdict, sig string) {
	md, _ := metadata.FromIncomingContext(ctx)
	get := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	verdict = "ok"
	pr, _ := peer.FromContext(ctx)
	ti, _ := TLSInfoOf(pr.AuthInfo)
	ekm, err := Exporter(&ti.State)
	// What the server reads (derived at the handshake when its credentials are
	// ExportingTLS) is the connection's own value.
	if got, isTLS, cerr := ConnExporter(pr.AuthInfo); !isTLS || cerr != nil || string(got) != string(ekm) {
		t.Errorf("ConnExporter: %x, %v, %v; the connection's exporter value is %x", got, isTLS, cerr, ekm)
	}
	p, perr := ParseSession(SessionCredentials{Actor: get(MetadataActor), Timestamp: get(MetadataTimestamp), Signature: get(MetadataSession)})
	switch {
	case err != nil:
		verdict = err.Error()
	case perr != nil:
		verdict = perr.Error()
	case !p.Verify(pub, ekm):
		verdict = "bad signature"
	}
	if _, derived := pr.AuthInfo.(ExportedTLSInfo); derived {
		verdict += "+"
	}
	return verdict, get(MetadataSession)
}

// The client signs a connection again once its signature is older than the refresh
// interval, and keeps at most sessionCacheSize connections' signatures.
func TestSessionAuthRefreshAndBound(t *testing.T) {
	_, priv, _ := GenerateKey()
	now := time.Unix(1700000000, 0)
	sa := NewSessionAuth(&Signer{Actor: 3, Key: priv, Now: func() time.Time { return now }}, 5*time.Second)
	ekm := bytes.Repeat([]byte{1}, ExporterLen)
	first, err := sa.credentials(ekm)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(4 * time.Second)
	if c, _ := sa.credentials(ekm); c != first {
		t.Fatal("signed again before the refresh interval")
	}
	now = now.Add(time.Second)
	if c, _ := sa.credentials(ekm); c == first || c.Timestamp != "1700000005" {
		t.Fatalf("not signed again after the refresh interval: %+v", c)
	}
	for i := 0; i < 3*sessionCacheSize; i++ {
		e := bytes.Repeat([]byte{byte(i)}, ExporterLen)
		e[0] = byte(i >> 8)
		if _, err := sa.credentials(e); err != nil {
			t.Fatal(err)
		}
	}
	if n := sa.cached(); n > sessionCacheSize {
		t.Fatalf("%d signatures cached, more than %d", n, sessionCacheSize)
	}
	var nilSigner *Signer
	if _, err := nilSigner.SignSession(ekm); err == nil {
		t.Fatal("signed without a key")
	}
	// A connection state without a completed handshake has no exporter (and no panic).
	if _, err := Exporter(&tls.ConnectionState{}); err == nil {
		t.Fatal("an exporter from an unfinished handshake")
	}
}
