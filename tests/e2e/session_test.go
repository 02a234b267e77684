package e2e

import (
	"context"
	"crypto/ed25519"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/redisacl"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// recorder is session credentials that remember the metadata they sent last.
type recorder struct {
	*auth.SessionAuth
	mu   sync.Mutex
	last map[string]string
}

func (r *recorder) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	md, err := r.SessionAuth.GetRequestMetadata(ctx, uri...)
	r.mu.Lock()
	r.last = md
	r.mu.Unlock()
	return md, err
}

// dialSession opens a TLS connection to the API whose calls carry the given per-call
// credentials (nil: none).
func dialSession(t *testing.T, addr string, pc credentials.PerRPCCredentials) herov1.CoordinatorClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(harness.APICredentials())}
	if pc != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(pc))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return herov1.NewCoordinatorClient(cc)
}

func listFlows(api herov1.CoordinatorClient, kv ...string) error {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), kv...), 10*time.Second)
	defer cancel()
	_, err := api.ListFlows(ctx, &herov1.ListFlowsRequest{ContextId: ctx1, Limit: 1})
	return err
}

// refusedAs checks that err is an Unauthenticated refusal whose message contains want.
func refusedAs(t *testing.T, what string, err error, want string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), want) {
		t.Errorf("%s: want Unauthenticated %q, got %v", what, want, err)
	}
}

// Session authentication on the real binaries over real TLS: a connection signed once
// carries every call, attributed to its actor, checked against Redis and the key once
// per --auth-session-recheck; its metadata replayed on another connection, a wrong
// key, an unknown actor and a stale timestamp are refused; an actor's changed key
// refuses its open connection within the recheck interval; per-request signatures
// still work beside sessions.
func TestSessionSignatures(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{APIArgs: []string{"--auth-session-recheck", "1s"}})
	verified := `hero_api_auth_session_checks_total{outcome="verified"}`
	cached := `hero_api_auth_session_checks_total{outcome="cached"}`

	// Accepted and attributed: the job's creation event names actor 1.
	rec := &recorder{SessionAuth: auth.NewSessionAuth(c.Signer(), time.Hour)}
	api := dialSession(t, s.API.GRPCAddr, rec)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := api.CreateJob(ctx, &herov1.CreateJobRequest{ContextId: ctx1, Job: &herov1.Job{Id: 4242, ScriptType: "sh", Script: "true"}}); err != nil {
		t.Fatalf("a call with a session signature: %v", err)
	}
	evs, err := api.ReadEvents(ctx, &herov1.ReadEventsRequest{ContextId: ctx1, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var actor string
	for _, ev := range evs.Events {
		if ev.Type == "job.created" && strings.HasSuffix(ev.Detail, ":4242") {
			actor = ev.Actor
		}
	}
	if actor != "1" {
		t.Fatalf("job 4242's creation is attributed to %q, want \"1\" (events %v)", actor, evs.Events)
	}
	// Later calls on the connection are taken from the cache (no verification).
	v0, c0 := metricValue(t, s.API.AdminAddr, verified), metricValue(t, s.API.AdminAddr, cached)
	const calls = 20
	start := time.Now()
	for i := 0; i < calls; i++ {
		if err := listFlows(api); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	dv, dc := metricValue(t, s.API.AdminAddr, verified)-v0, metricValue(t, s.API.AdminAddr, cached)-c0
	if dv+dc != calls || dv > 1+took.Seconds() {
		t.Fatalf("%d calls in %v: %v verified, %v cached", calls, took, dv, dc)
	}

	// The same metadata on another connection (another exporter value) is refused.
	rec.mu.Lock()
	replay := []string{auth.MetadataActor, rec.last[auth.MetadataActor], auth.MetadataTimestamp, rec.last[auth.MetadataTimestamp], auth.MetadataSession, rec.last[auth.MetadataSession]}
	rec.mu.Unlock()
	refusedAs(t, "a session replayed on another connection", listFlows(dialSession(t, s.API.GRPCAddr, nil), replay...), notVerified)
	// ...and so is it on its own connection beside a per-request signature.
	refusedAs(t, "a session beside a nonce", listFlows(api, auth.MetadataNonce, "0123456789abcdef0123"), "not both")

	// A wrong key and an unknown actor get the one answer; a stale timestamp is named.
	session := func(actor uint32, key ed25519.PrivateKey, now func() time.Time) herov1.CoordinatorClient {
		return dialSession(t, s.API.GRPCAddr, auth.NewSessionAuth(&auth.Signer{Actor: actor, Key: key, Now: now}, 0))
	}
	refusedAs(t, "a wrong key", listFlows(session(1, harness.ActorKey(5), nil)), notVerified)
	refusedAs(t, "an unknown actor", listFlows(session(77, harness.ActorKey(77), nil)), notVerified)
	refusedAs(t, "a stale timestamp", listFlows(session(1, harness.ActorKey(1), func() time.Time { return time.Now().Add(-10 * time.Minute) })), "outside the accepted window")

	// Actor 2's key changes: its open connection is refused within the recheck interval.
	s.CreateActor(t, 2)
	two := session(2, harness.ActorKey(2), nil)
	getSelf := func(api herov1.CoordinatorClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := api.GetActor(ctx, &herov1.GetActorRequest{Id: 2})
		return err
	}
	if err := getSelf(two); err != nil {
		t.Fatalf("actor 2's session: %v", err)
	}
	_, newKey, _ := auth.GenerateKey()
	s.Operator().MustCall(t, "actor.update", map[string]any{"id": 2, "pubkey": auth.PublicKeyHex(newKey.Public().(ed25519.PublicKey))}, nil)
	changed := time.Now()
	if !waitUntil(time.Minute, func() bool { err = getSelf(two); return err != nil }) {
		t.Fatal("actor 2's session with its old key is still served 20 s after the key changed (--auth-session-recheck 1s)")
	}
	refusedAs(t, "the old key's session after the key changed", err, notVerified)
	t.Logf("the old key's session was refused %v after the key changed", time.Since(changed).Round(time.Millisecond))
	if err := getSelf(session(2, newKey, nil)); err != nil {
		t.Fatalf("a session with actor 2's new key: %v", err)
	}

	// Per-request signatures keep working on gRPC.
	each := &harness.Client{GRPCAddr: s.API.GRPCAddr, Actor: 1, Key: harness.ActorKey(1), SignEachCall: true}
	cc, err := each.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	if err := listFlows(herov1.NewCoordinatorClient(cc)); err != nil {
		t.Fatalf("a call signed on its own: %v", err)
	}
	checkAuthMetrics(t, s.API.AdminAddr, map[string]bool{"grpc": true}, "not_verified", "stale_timestamp", "malformed")
}

// A session signature on a connection without TLS is refused, saying to sign each
// request; signed requests are served there.
func TestSessionWithoutTLS(t *testing.T) {
	s, _ := newStack(t, harness.StackOptions{})
	p, err := harness.PKI()
	if err != nil {
		t.Fatal(err)
	}
	f := p.Files("supervisor-daemon")
	// A second supervisor-daemon whose API is plaintext (its internal mTLS as usual).
	plain := harness.Start(t, binDir, "supervisor-daemon", redisSrv.URL, harness.Options{Plaintext: true, Env: []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret},
		Args: []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "--scheduler-addr", s.Scheduler.GRPCAddr,
			"--operator-secret-key-file", filepath.Join(p.Dir, redisacl.OperatorKeyFile)}})
	cc, err := grpc.NewClient(plain.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	api := herov1.NewCoordinatorClient(cc)
	sig := strings.Repeat("ab", ed25519.SignatureSize)
	err = listFlows(api, auth.MetadataActor, "1", auth.MetadataTimestamp, strconv.FormatInt(time.Now().Unix(), 10), auth.MetadataSession, sig)
	refusedAs(t, "a session without TLS", err, "not TLS: sign each request instead")
	series := `hero_api_auth_failures_total{reason="session_without_tls",transport="grpc"}`
	if v := metricValue(t, plain.AdminAddr, series); v != 1 {
		t.Errorf("%s = %v", series, v)
	}
	signed, err := grpc.NewClient(plain.GRPCAddr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		auth.DialOptions(&auth.Signer{Actor: 1, Key: harness.ActorKey(1)})...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = signed.Close() }()
	if err := listFlows(herov1.NewCoordinatorClient(signed)); err != nil {
		t.Fatalf("a signed request without TLS: %v", err)
	}
}
