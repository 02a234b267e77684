package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hero-coordinator/hero/lib/auth"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// forged is one way of making a request's credentials; each returns the headers (or
// metadata) for the bytes that will be sent.
type forged struct {
	name   string
	reason string // the logged reason
	// sign returns the credentials, given the bytes to send and the target; sent
	// is what is really sent (nil: the same bytes).
	sign func(body []byte, target string) (cr auth.Credentials, sent []byte)
	// same: the client's answer must be the single "does not verify" message.
	same bool
	// msg: the answer contains this instead.
	msg string
}

func signAs(actor uint32, key ed25519.PrivateKey, now time.Time, body []byte, target string) auth.Credentials {
	s := &auth.Signer{Actor: actor, Key: key, Now: func() time.Time { return now }}
	cr, err := s.Sign(target, auth.Digest(body))
	if err != nil {
		panic(err)
	}
	return cr
}

func forgeries() []forged {
	now := time.Now
	return []forged{
		{name: "unsigned", reason: "missing_credentials", msg: "the request is not signed",
			sign: func([]byte, string) (auth.Credentials, []byte) { return auth.Credentials{}, nil }},
		{name: "bare actor header", reason: "missing_credentials", msg: "the request is not signed",
			sign: func([]byte, string) (auth.Credentials, []byte) { return auth.Credentials{Actor: "1"}, nil }},
		{name: "wrong key", reason: "bad_signature", same: true,
			sign: func(b []byte, tg string) (auth.Credentials, []byte) {
				return signAs(1, harness.ActorKey(5), now(), b, tg), nil
			}},
		{name: "bad signature", reason: "bad_signature", same: true,
			sign: func(b []byte, tg string) (auth.Credentials, []byte) {
				cr := signAs(1, harness.ActorKey(1), now(), b, tg)
				sig, _ := hex.DecodeString(cr.Signature)
				sig[10] ^= 0x40
				cr.Signature = hex.EncodeToString(sig)
				return cr, nil
			}},
		{name: "unknown actor", reason: "unknown_actor", same: true,
			sign: func(b []byte, tg string) (auth.Credentials, []byte) {
				return signAs(77, harness.ActorKey(77), now(), b, tg), nil
			}},
		{name: "actor without a key", reason: "no_key", same: true,
			sign: func(b []byte, tg string) (auth.Credentials, []byte) {
				return signAs(6, harness.ActorKey(6), now(), b, tg), nil
			}},
		{name: "stale timestamp", reason: "stale_timestamp", msg: "outside the accepted window",
			sign: func(b []byte, tg string) (auth.Credentials, []byte) {
				return signAs(1, harness.ActorKey(1), now().Add(-10*time.Minute), b, tg), nil
			}},
		{name: "future timestamp", reason: "stale_timestamp", msg: "outside the accepted window",
			sign: func(b []byte, tg string) (auth.Credentials, []byte) {
				return signAs(1, harness.ActorKey(1), now().Add(10*time.Minute), b, tg), nil
			}},
		{name: "body altered after signing", reason: "bad_signature", same: true,
			sign: func(b []byte, tg string) (auth.Credentials, []byte) {
				cr := signAs(1, harness.ActorKey(1), now(), b, tg)
				return cr, bytes.Replace(b, []byte("1"), []byte("2"), 1)
			}},
		{name: "malformed nonce", reason: "malformed", msg: "X-Hero-Nonce must be",
			sign: func(b []byte, tg string) (auth.Credentials, []byte) {
				cr := signAs(1, harness.ActorKey(1), now(), b, tg)
				cr.Nonce = "short"
				return cr, nil
			}},
	}
}

const notVerified = "the signature does not verify for this actor and request"

// Acceptance (Trust I 1): on the real binaries, JSON-RPC and gRPC each: a request
// without a signature, with a wrong key, a bad signature, a stale timestamp, a
// replayed nonce, and a body altered after signing are each refused; the answer does
// not tell an unknown actor from a bad signature; the log and the metric do; a
// correctly signed request succeeds.
func TestSignedRequests(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	s.Operator().MustCall(t, "actor.create", map[string]any{"actor": map[string]any{"id": 6}}, nil) // no key
	checkSignedJSONRPC(t, harness.APIURL(s.API))
	checkSignedGRPC(t, s)
	// A stream is signed over its opening message (the harness's client signs).
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return true }) {
		t.Fatal("a signed Watch was refused")
	}

	// The log names each reason (the first refusal of a source and interval on a line
	// of its own, the others counted by reason on a line at the interval's end).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.API.WaitLog(ctx, "more from this source"); err != nil {
		t.Fatalf("no count of the refusals after the first: %v", err)
	}
	out := s.API.Output()
	for _, reason := range []string{"missing_credentials", "bad_signature", "unknown_actor", "no_key", "stale_timestamp", "replayed_nonce", "malformed"} {
		if !strings.Contains(out, `"reason":"`+reason+`"`) && !strings.Contains(out, `"`+reason+`":`) {
			t.Errorf("the log does not name reason %s", reason)
		}
	}
	checkAuthMetrics(t, s.API.AdminAddr, map[string]bool{"jsonrpc": true, "grpc": true},
		"missing_credentials", "not_verified", "stale_timestamp", "replayed_nonce", "malformed")

	// A client that keeps failing is not a log line per request: 300 more refusals
	// from this address add at most a line of their own and a count.
	lines := func() int { return strings.Count(s.API.Output(), `"message":"authentication refused`) }
	before := lines()
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"flow.list","params":{"context_id":1}}`)
	for i := 0; i < 300; i++ {
		if out, _ := postSigned(t, harness.APIURL(s.API), signAs(77, harness.ActorKey(77), time.Now(), body, auth.JSONRPCTarget), body); out["error"] == nil {
			t.Fatal("an unknown actor was served")
		}
	}
	if added := lines() - before; added > 2 {
		t.Errorf("300 refused requests from one address added %d log lines", added)
	}
}

// checkAuthMetrics checks hero_api_auth_failures_total on a metrics page that anyone
// may read: each of want was counted for each transport, and no label tells an
// unknown actor, an actor without a key and a bad signature apart (one bad request
// per candidate id would enumerate the actors), nor a revoked secret from a wrong one.
func checkAuthMetrics(t *testing.T, adminAddr string, transports map[string]bool, want ...string) {
	t.Helper()
	for _, reason := range want {
		for tr := range transports {
			series := `hero_api_auth_failures_total{reason="` + reason + `",transport="` + tr + `"}`
			if v := metricValue(t, adminAddr, series); v < 1 {
				t.Errorf("%s = %v", series, v)
			}
		}
	}
	for _, line := range metricLines(t, adminAddr) {
		if !strings.HasPrefix(line, "hero_api_auth_failures_total{") {
			continue
		}
		for _, telling := range []string{"unknown_actor", "no_key", "bad_signature", "revoked_secret", "dev_unknown_actor"} {
			if strings.Contains(line, `"`+telling+`"`) {
				t.Errorf("the metrics page tells %s apart: %s", telling, line)
			}
		}
	}
}

// postSigned posts the JSON-RPC body b to url with the credentials (those set) and
// returns the decoded answer and its HTTP status.
func postSigned(t *testing.T, url string, cr auth.Credentials, b []byte) (map[string]any, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if cr.Actor != "" {
		req.Header.Set(auth.HeaderActor, cr.Actor)
	}
	if cr.Timestamp != "" {
		harness.SetCredentials(req.Header, cr)
	}
	resp, err := harness.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out, resp.StatusCode
}

// rpcErrOf is the code and message of a JSON-RPC answer's error (0, "": none).
func rpcErrOf(out map[string]any) (int, string) {
	e, _ := out["error"].(map[string]any)
	if e == nil {
		return 0, ""
	}
	return int(e["code"].(float64)), e["message"].(string)
}

// checkSignedJSONRPC: over JSON-RPC, every forgery is refused (those the verifier
// cannot tell apart with one message), a correctly signed request is served once
// (not replayed), and a batch is one signed request.
func checkSignedJSONRPC(t *testing.T, url string) {
	t.Helper()
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"flow.list","params":{"context_id":1}}`)
	verifyMsgs := map[string]bool{}
	for _, f := range forgeries() {
		cr, sent := f.sign(body, auth.JSONRPCTarget)
		if sent == nil {
			sent = body
		}
		out, _ := postSigned(t, url, cr, sent)
		code, msg := rpcErrOf(out)
		if code != -32001 {
			t.Errorf("jsonrpc %s: want -32001, got %v", f.name, out)
			continue
		}
		if f.same {
			verifyMsgs[msg] = true
			if !strings.Contains(msg, notVerified) {
				t.Errorf("jsonrpc %s: %q", f.name, msg)
			}
		} else if !strings.Contains(msg, f.msg) {
			t.Errorf("jsonrpc %s: %q lacks %q", f.name, msg, f.msg)
		}
	}
	if len(verifyMsgs) != 1 {
		t.Errorf("unknown actor, no key, wrong key and bad signature answer differently: %v", verifyMsgs)
	}
	good := signAs(1, harness.ActorKey(1), time.Now(), body, auth.JSONRPCTarget)
	if out, _ := postSigned(t, url, good, body); out["result"] == nil {
		t.Fatalf("a correctly signed request was refused: %v", out)
	}
	out, _ := postSigned(t, url, good, body) // the same request again: a replay
	if code, msg := rpcErrOf(out); code != -32001 || !strings.Contains(msg, "nonce was used already") {
		t.Fatalf("replayed request: %v", out)
	}
	// Only the canonical forms: a correctly signed request whose timestamp, actor or
	// signature is spelled otherwise, or whose body repeats a member (readers differ on
	// which one counts), is refused.
	for name, tc := range map[string]struct {
		mod  func(*auth.Credentials)
		body string
		code int
		want string
	}{
		"+timestamp":           {func(c *auth.Credentials) { c.Timestamp = "+" + c.Timestamp }, "", -32001, "X-Hero-Timestamp must be the unix time in decimal digits"},
		"actor 01":             {func(c *auth.Credentials) { c.Actor = "0" + c.Actor }, "", -32001, "X-Hero-Actor must be the actor id in decimal digits"},
		"upper-case signature": {func(c *auth.Credentials) { c.Signature = strings.ToUpper(c.Signature) }, "", -32001, "X-Hero-Signature must be lowercase hex"},
		"a repeated member": {func(*auth.Credentials) {}, `{"jsonrpc":"2.0","id":1,"method":"flow.list","params":{"context_id":1},"params":{"context_id":1}}`,
			-32600, `repeats the member "params"`},
	} {
		b := body
		if tc.body != "" {
			b = []byte(tc.body)
		}
		cr := signAs(1, harness.ActorKey(1), time.Now(), b, auth.JSONRPCTarget)
		tc.mod(&cr)
		out, _ := postSigned(t, url, cr, b)
		if code, msg := rpcErrOf(out); code != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("jsonrpc, %s: %v, want %d %q", name, out, tc.code, tc.want)
		}
	}
	// A batch is one signed request.
	batch := []byte(`[{"jsonrpc":"2.0","id":1,"method":"flow.list","params":{"context_id":1}},{"jsonrpc":"2.0","id":2,"method":"job.list","params":{"context_id":1}}]`)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(batch))
	harness.SetCredentials(req.Header, signAs(1, harness.ActorKey(1), time.Now(), batch, auth.JSONRPCTarget))
	resp, err := harness.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var results []map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&results)
	_ = resp.Body.Close()
	if len(results) != 2 || results[0]["result"] == nil || results[1]["result"] == nil {
		t.Fatalf("signed batch: %v", results)
	}
}

// signedListFlows calls ListFlows with the credentials (those set) as metadata.
func signedListFlows(api herov1.CoordinatorClient, cr auth.Credentials, m *herov1.ListFlowsRequest) error {
	var kv []string
	for _, p := range [][2]string{{auth.MetadataActor, cr.Actor}, {auth.MetadataTimestamp, cr.Timestamp}, {auth.MetadataNonce, cr.Nonce}, {auth.MetadataSignature, cr.Signature}} {
		if p[1] != "" {
			kv = append(kv, p[0], p[1])
		}
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), kv...), 10*time.Second)
	defer cancel()
	_, err := api.ListFlows(ctx, m)
	return err
}

// checkSignedGRPC: over gRPC, the same forgeries over the request message as sent
// are refused; a message signed for one method is refused by another; a correctly
// signed call is served once.
func checkSignedGRPC(t *testing.T, s *harness.Stack) {
	t.Helper()
	cc, err := grpc.NewClient(s.API.GRPCAddr, grpc.WithTransportCredentials(harness.APICredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	api := herov1.NewCoordinatorClient(cc)
	const target = "/hero.v1.Coordinator/ListFlows"
	msg := &herov1.ListFlowsRequest{ContextId: 1, Limit: 10}
	raw, _ := proto.Marshal(msg)
	verifyMsgs := map[string]bool{}
	for _, f := range forgeries() {
		cr, sent := f.sign(raw, target)
		m := msg
		if sent != nil {
			m = &herov1.ListFlowsRequest{ContextId: 1, Limit: 20} // other bytes than signed
		}
		err := signedListFlows(api, cr, m)
		st, _ := status.FromError(err)
		if st.Code() != codes.Unauthenticated {
			t.Errorf("grpc %s: want Unauthenticated, got %v", f.name, err)
			continue
		}
		if f.same {
			verifyMsgs[st.Message()] = true
		} else if !strings.Contains(st.Message(), f.msg) {
			t.Errorf("grpc %s: %q lacks %q", f.name, st.Message(), f.msg)
		}
	}
	if len(verifyMsgs) != 1 || !strings.Contains(fmt.Sprint(verifyMsgs), notVerified) {
		t.Errorf("grpc: unknown actor, no key, wrong key and bad signature answer differently: %v", verifyMsgs)
	}
	// A message signed for one method is refused by another of the same shape.
	gcr := signAs(1, harness.ActorKey(1), time.Now(), raw, "/hero.v1.Coordinator/ListJobs")
	if status.Code(signedListFlows(api, gcr, msg)) != codes.Unauthenticated {
		t.Fatal("a signature for ListJobs was accepted by ListFlows")
	}
	gcr = signAs(1, harness.ActorKey(1), time.Now(), raw, target)
	if err := signedListFlows(api, gcr, msg); err != nil {
		t.Fatalf("a correctly signed gRPC call was refused: %v", err)
	}
	if err := signedListFlows(api, gcr, msg); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "nonce was used already") {
		t.Fatalf("replayed gRPC call: %v", err)
	}
}

// metricLines reads a service's /metrics, line by line.
func metricLines(t *testing.T, adminAddr string) []string {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return strings.Split(string(b), "\n")
}

// metricValue reads one series from a service's /metrics (0 when absent).
func metricValue(t *testing.T, adminAddr, series string) float64 {
	t.Helper()
	for _, line := range metricLines(t, adminAddr) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// Acceptance (Trust I 3): after actor.update the old key is refused and the new one
// works (the actor rotates its own key, signing with the current one); after an
// operator secret is revoked it is refused, by every call and after a restart.
func TestKeyRotationAndSecretRevocation(t *testing.T) {
	s, _ := newStack(t, harness.StackOptions{})
	s.CreateActor(t, 2)
	old := s.Client(2)
	old.MustCall(t, "actor.load", map[string]any{"id": 2}, nil)
	_, newKey, _ := auth.GenerateKey()
	newPub := auth.PublicKeyHex(newKey.Public().(ed25519.PublicKey))
	// Another actor cannot change actor 2's key.
	if err := s.Client(1).Call("actor.update", map[string]any{"id": 2, "pubkey": newPub}, nil); err == nil || !strings.Contains(err.Error(), "-32003") {
		t.Fatalf("actor 1 changed actor 2's key: %v", err)
	}
	old.MustCall(t, "actor.update", map[string]any{"id": 2, "pubkey": newPub}, nil)
	if err := old.Call("actor.load", map[string]any{"id": 2}, nil); err == nil || !strings.Contains(err.Error(), "-32001") {
		t.Fatalf("the old key still works after actor.update: %v", err)
	}
	rotated := &harness.Client{URL: old.URL, GRPCAddr: old.GRPCAddr, Actor: 2, Key: newKey}
	rotated.MustCall(t, "actor.load", map[string]any{"id": 2}, nil)
	// The operator resets a key, too; a malformed key is refused naming the field.
	if err := s.Operator().Call("actor.update", map[string]any{"id": 2, "pubkey": "pk-2"}, nil); err == nil || !strings.Contains(err.Error(), "pubkey") {
		t.Fatalf("a malformed pubkey: %v", err)
	}
	s.Operator().MustCall(t, "actor.update", map[string]any{"id": 2, "pubkey": harness.ActorPubkey(2)}, nil)
	old.MustCall(t, "actor.load", map[string]any{"id": 2}, nil)

	// Operator secrets: create one, use it, revoke it.
	op := s.Operator()
	var created struct {
		Fingerprint string `json:"fingerprint"`
		Secret      string `json:"secret"`
	}
	op.MustCall(t, "secret.create", map[string]any{}, &created)
	harness.GuardSecret(created.Secret)
	second := &harness.Client{URL: op.URL, GRPCAddr: op.GRPCAddr, Secret: created.Secret}
	var list struct {
		Items []struct {
			Fingerprint string `json:"fingerprint"`
			Source      string `json:"source"`
			RevokedAtMs int64  `json:"revoked_at_ms"`
			Current     bool   `json:"current"`
		} `json:"items"`
	}
	second.MustCall(t, "secret.list", map[string]any{}, &list)
	var configuredFP string
	for _, it := range list.Items {
		if it.Source == "configured" {
			configuredFP = it.Fingerprint
		}
		if it.Fingerprint == created.Fingerprint && (!it.Current || it.Source != "api") {
			t.Fatalf("the new secret is listed as %+v", it)
		}
	}
	if configuredFP == "" || len(list.Items) != 2 {
		t.Fatalf("secret.list: %+v", list.Items)
	}
	op.MustCall(t, "secret.revoke", map[string]any{"fingerprint": created.Fingerprint}, nil)
	if err := second.Call("secret.list", map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), "-32001") {
		t.Fatalf("a revoked secret still works: %v", err)
	}
	// The configured secret can be revoked too (by another one), and the last cannot.
	if err := op.Call("secret.revoke", map[string]any{"fingerprint": configuredFP}, nil); err == nil || !strings.Contains(err.Error(), "last accepted operator secret") {
		t.Fatalf("revoking the last secret: %v", err)
	}
	op.MustCall(t, "secret.create", map[string]any{}, &created)
	harness.GuardSecret(created.Secret)
	third := &harness.Client{URL: op.URL, GRPCAddr: op.GRPCAddr, Secret: created.Secret}
	third.MustCall(t, "secret.revoke", map[string]any{"fingerprint": configuredFP}, nil)
	if err := op.Call("secret.list", map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), "-32001") {
		t.Fatalf("the revoked configured secret still works: %v", err)
	}
	// gRPC refuses it too, and so does a restarted supervisor-daemon still configured with it.
	cc, err := op.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	if _, err := herov1.NewCoordinatorClient(cc).ListOperatorSecrets(context.Background(), &herov1.ListOperatorSecretsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC with the revoked secret: %v", err)
	}
	s.API.Kill()
	s.Start("supervisor-daemon")
	op = s.Operator()
	if err := op.Call("secret.list", map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), "-32001") {
		t.Fatalf("the revoked configured secret works again after a restart: %v", err)
	}
	if !strings.Contains(s.API.Output(), "a configured operator secret is revoked") {
		t.Error("the restart did not warn about the revoked configured secret")
	}
	third.URL = op.URL
	third.MustCall(t, "secret.list", map[string]any{}, nil)
}
