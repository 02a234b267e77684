package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
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

// Acceptance (Trust I 4, Trust II 4): with a Redis password on every command line and secrets
// in the environment and a file, no captured log, /metrics, /debug/pprof/cmdline or
// --help holds any of them (the harness also checks every log of every test for the
// operator secrets: harness.GuardSecret).
func TestSecretsStayOut(t *testing.T) {
	const redisPassword = "redis-pass-e2e-0d9f8a7b6c5d"
	harness.GuardSecret(redisPassword)
	fileSecret := "file-secret-e2e-5e4d3c2b1a09"
	harness.GuardSecret(fileSecret)
	secretFile := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(secretFile, []byte("# operator secrets\n"+fileSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t, redistest.Options{Password: redisPassword})
	urlArg := []string{"--redis-url", rs.URL}
	withPprof := append([]string{"--pprof"}, urlArg...) // its command line must stay hidden
	s := harness.StartStack(t, binDir, rs.URL, harness.StackOptions{
		SchedulerArgs: withPprof, RouterArgs: withPprof, RunnerArgs: withPprof,
		APIArgs: append([]string{"--admin-secret-file", secretFile}, withPprof...),
	})
	c := s.Setup(t, ctx1)
	// Work that logs: a flow, an API-created secret, refusals.
	createFlow(t, c, 5, nil, jobSpec{id: 1, typ: "sh", script: "echo hi"})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 5}, nil)
	c.WaitFlow(t, ctx1, 5, time.Minute)
	var created struct {
		Secret string `json:"secret"`
	}
	fileOp := &harness.Client{URL: c.URL, GRPCAddr: c.GRPCAddr, Secret: fileSecret}
	fileOp.MustCall(t, "secret.create", map[string]any{}, &created)
	harness.GuardSecret(created.Secret)
	_ = (&harness.Client{URL: c.URL, Secret: created.Secret + "x"}).Call("secret.list", map[string]any{}, nil)
	_ = (&harness.Client{URL: c.URL, Secret: "wrong-" + redisPassword}).Call("secret.list", map[string]any{}, nil)

	for _, p := range []*harness.Proc{s.Scheduler, s.Router, s.Runner, s.API} {
		for _, path := range []string{"/metrics", "/debug/pprof/cmdline"} {
			resp, err := http.Get("http://" + p.AdminAddr + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if leaked := harness.LeakedSecrets(string(b)); len(leaked) > 0 {
				t.Errorf("%s %s shows secrets: %v", p.Name, path, leaked)
			}
			if path == "/debug/pprof/cmdline" && strings.Contains(string(b), "--redis-url") {
				t.Errorf("%s %s shows the command line: %q", p.Name, path, b)
			}
		}
		if leaked := harness.LeakedSecrets(p.Output()); len(leaked) > 0 {
			t.Errorf("%s logged secrets: %v", p.Name, leaked)
		}
		cmd := exec.Command(filepath.Join(binDir, p.Name), "--help")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "REDIS_URL=" + rs.URL, "HERO_ADMIN_SECRET=" + harness.AdminSecret}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v", p.Name, err)
		}
		if leaked := harness.LeakedSecrets(string(out)); len(leaked) > 0 {
			t.Errorf("%s --help shows secrets: %v", p.Name, leaked)
		}
	}
	// Without --pprof there is no debug endpoint at all.
	plain, _ := newStack(t, harness.StackOptions{})
	for _, p := range []*harness.Proc{plain.Scheduler, plain.Router, plain.Runner, plain.API} {
		resp, err := http.Get("http://" + p.AdminAddr + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: /debug/pprof/ without --pprof answers %d", p.Name, resp.StatusCode)
		}
	}
	// heroctl's help, with every secret in its environment.
	cmd := exec.Command(filepath.Join(binDir, "heroctl"), "--help")
	cmd.Env = []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}
	out, _ := cmd.CombinedOutput()
	if leaked := harness.LeakedSecrets(string(out)); len(leaked) > 0 {
		t.Errorf("heroctl --help shows secrets: %v", leaked)
	}
}

// With no secret configured, the first start generates one into --admin-secret-file
// (mode 0600; the log names only its fingerprint and the file); a configured secret
// then replaces it.
func TestGeneratedOperatorSecret(t *testing.T) {
	rs := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "admin-secret")
	sched := harness.Start(t, binDir, "scheduler", rs.URL, harness.Options{})
	start := func(env []string, args ...string) (*harness.Proc, error) {
		return harness.StartProc(binDir, "supervisor-daemon", rs.URL, harness.Options{Args: append([]string{"--scheduler-addr", sched.GRPCAddr}, args...), Env: env})
	}
	if p, err := start(nil); err == nil || !strings.Contains(err.Error(), "no operator secret") {
		if p != nil {
			p.Kill()
		}
		t.Fatalf("started with no secret and no file: %v", err)
	}
	api, err := start(nil, "--admin-secret-file", file)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Kill()
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("generated secret file mode %v", st.Mode().Perm())
	}
	b, _ := os.ReadFile(file)
	secret := strings.TrimSpace(string(b))
	harness.GuardSecret(secret)
	if !strings.HasPrefix(secret, "hero_") || strings.Contains(api.Output(), secret) {
		t.Fatalf("generated secret %q…; log:\n%s", secret[:8], api.Output())
	}
	if !strings.Contains(api.Output(), "generated an operator secret") || !strings.Contains(api.Output(), `"fingerprint":"op_`) {
		t.Fatalf("the log does not name the generated secret's fingerprint:\n%s", api.Output())
	}
	gen := &harness.Client{URL: harness.APIURL(api), Secret: secret}
	gen.MustCall(t, "secret.list", map[string]any{}, nil)
	api.Kill()
	// A configured secret replaces the generated one.
	api, err = start([]string{"HERO_ADMIN_SECRET=" + harness.AdminSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Kill()
	gen.URL = harness.APIURL(api)
	if err := gen.Call("secret.list", map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), "-32001") {
		t.Fatalf("the generated secret works beside a configured one: %v", err)
	}
	(&harness.Client{URL: gen.URL, Secret: harness.AdminSecret}).MustCall(t, "secret.list", map[string]any{}, nil)
	if leaked := harness.LeakedSecrets(api.Output()); len(leaked) > 0 {
		t.Fatalf("logged secrets: %v", leaked)
	}
}

// Acceptance (Trust I 5): a connection flood over a small cap, an oversized batch and
// a rate-limited actor each get their documented outcome, while other clients are
// served and /readyz stays ready.
func TestLimitsAtTheDoor(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{APIArgs: []string{"--max-connections", "16", "--max-batch", "10",
		"--rate-limit", "5", "--rate-burst", "10", "--max-waits-per-caller", "1"}})
	s.CreateActor(t, 3)
	flooder := s.Client(3)

	// An oversized batch: refused whole, naming the limit.
	var batch []map[string]any
	for i := 0; i < 11; i++ {
		batch = append(batch, map[string]any{"jsonrpc": "2.0", "id": i, "method": "actor.load", "params": map[string]any{"id": 1}})
	}
	body, _ := json.Marshal(batch)
	out, err := flooder.Raw(string(body))
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := out["error"].(map[string]any); e == nil || e["code"].(float64) != -32600 || !strings.Contains(e["message"].(string), "more than the 10 accepted (--max-batch)") {
		t.Fatalf("batch of 11: %v", out)
	}

	s.CreateActor(t, 4)
	checkStreamItemsRateLimited(t, s.Client(4))
	checkRateLimited(t, flooder)
	c.MustCall(t, "actor.load", map[string]any{"id": 1}, nil) // another actor is served
	checkOneWaitPerCaller(t, s, c)
	checkHTTPConnectionFlood(t, s, c)
	checkGRPCConnectionFlood(t, s)
}

// checkRateLimited: the rate limit: the actor spends its burst of 10, then is told
// to wait — over JSON-RPC with data.retry_after_ms and Retry-After, over gRPC with
// RetryInfo.
func checkRateLimited(t *testing.T, flooder *harness.Client) {
	t.Helper()
	var limited *harness.RPCError
	for i := 0; i < 20 && limited == nil; i++ {
		if err := flooder.Call("actor.load", map[string]any{"id": 1}, nil); err != nil {
			limited, _ = err.(*harness.RPCError)
			if limited == nil || limited.Code != -32029 {
				t.Fatalf("call %d: %v", i, err)
			}
		}
	}
	if limited == nil || !strings.Contains(limited.Message, "too many requests") || limited.Data["retry_after_ms"] == nil {
		t.Fatalf("actor 3 was not rate limited: %+v", limited)
	}
	// The bucket refills at 5/s, so on a slow machine a token may come back between
	// these calls: each check sends until one is limited (a burst of 10 at most).
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "actor.load", "params": map[string]any{"id": 1}})
	retryAfter := ""
	for i := 0; i < 20 && retryAfter == ""; i++ {
		req, _ := flooder.NewRequest(b)
		resp, err := harness.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		retryAfter = resp.Header.Get("Retry-After")
	}
	if retryAfter == "" {
		t.Fatal("no rate-limited JSON-RPC answer of 20 has a Retry-After header")
	}
	cc, err := flooder.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	for i := 0; i < 20 && err == nil; i++ {
		_, err = herov1.NewCoordinatorClient(cc).GetActor(context.Background(), &herov1.GetActorRequest{Id: 1})
	}
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || len(st.Details()) == 0 {
		t.Fatalf("gRPC when rate limited: %v (details %v)", err, st.Details())
	}
}

// checkStreamItemsRateLimited: each submission of a SubmitJobStream counts against
// the caller's rate as a call does: of 20 sent at once (a burst of 10), those over the
// limit are answered ResourceExhausted with a retry delay and the stream goes on to
// answer every one.
func checkStreamItemsRateLimited(t *testing.T, streamer *harness.Client) {
	t.Helper()
	var items []*herov1.SubmitJobStreamRequest
	for i := range 20 {
		items = append(items, &herov1.SubmitJobStreamRequest{Seq: uint64(i + 1), Submit: &herov1.SubmitJobRequest{ContextId: ctx1,
			Job: &herov1.Job{ScriptType: "sh", Script: "true"}}})
	}
	got := streamSubmissions(t, streamer, items, false)
	answered, limited := len(got), 0
	for _, r := range got {
		if e := r.Error; e != nil && codes.Code(e.Code) == codes.ResourceExhausted {
			limited++
			if e.RetryAfterMs == 0 || !strings.Contains(e.Message, "too many requests") {
				t.Errorf("item %d: %v", r.Seq, e)
			}
		}
	}
	if answered != 20 || limited < 5 {
		t.Fatalf("%d of 20 items answered, %d rate limited; want all answered and at least 5 (over the burst of 10 at 5/s) limited", answered, limited)
	}
}

// checkOneWaitPerCaller: one waiting call at a time per caller
// (--max-waits-per-caller 1).
func checkOneWaitPerCaller(t *testing.T, s *harness.Stack, c *harness.Client) {
	t.Helper()
	createFlow(t, c, 7, nil, jobSpec{id: 1, typ: "sh", script: "sleep 30"})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 7}, nil)
	waitDone := make(chan error, 1)
	go func() {
		waitDone <- c.Call("flow.wait", map[string]any{"context_id": ctx1, "id": 7, "timeout": 60}, nil)
	}()
	// Once the first wait holds the slot, a second one is refused.
	if !waitUntil(time.Minute, func() bool { return metricValue(t, s.API.AdminAddr, "hero_api_waiting_calls") == 1 }) {
		t.Fatal("the first flow.wait is not counted in hero_api_waiting_calls")
	}
	if err := c.Call("flow.wait", map[string]any{"context_id": ctx1, "id": 7, "timeout": 1}, nil); err == nil || !strings.Contains(err.Error(), "-32029") || !strings.Contains(err.Error(), "waiting calls") {
		t.Fatalf("a second waiting call of the same actor: %v", err)
	}
	c.MustCall(t, "flow.cancel", map[string]any{"context_id": ctx1, "id": 7}, nil)
	if err := <-waitDone; err != nil {
		t.Fatalf("the first waiting call: %v", err)
	}
}

// floodConn opens a TCP connection to addr, kept open until the test ends.
func floodConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	fc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fc.Close() })
	return fc
}

// checkHTTPConnectionFlood: a connection flood: a client connected before it keeps
// being served; new connections over the cap are answered 503 at once; /readyz
// stays ready.
func checkHTTPConnectionFlood(t *testing.T, s *harness.Stack, c *harness.Client) {
	t.Helper()
	keep := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, TLSClientConfig: harness.APITLS()}}
	call := func() error {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "actor.load", "params": map[string]any{"id": 1}})
		req, _ := c.NewRequest(b)
		resp, err := keep.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		var r map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r["result"] == nil {
			return err
		}
		return nil
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := 0; i < 40; i++ {
		fc := floodConn(t, s.API.HTTPAddr)
		// Over TLS a refused connection is closed at once (a plaintext 503 would be
		// noise to a TLS client); in plaintext it gets "HTTP/1.1 503".
		_ = fc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		line, err := bufio.NewReader(fc).ReadString('\n')
		if err == io.EOF || strings.HasPrefix(line, "HTTP/1.1 503") {
			refused++
		}
	}
	if refused < 40-16 {
		t.Fatalf("%d of 40 flood connections were refused at once, want at least %d", refused, 40-16)
	}
	if err := call(); err != nil {
		t.Fatalf("a client connected before the flood was not served during it: %v", err)
	}
	resp, err := http.Get("http://" + s.API.AdminAddr + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz during the flood: %v %v", resp, err)
	}
	_ = resp.Body.Close()
	if v := metricValue(t, s.API.AdminAddr, `hero_listener_connections_refused_total{cause="max_connections",listener="jsonrpc"}`); v < float64(40-16) {
		t.Fatalf("hero_listener_connections_refused_total{jsonrpc, max_connections} = %v", v)
	}
}

// checkGRPCConnectionFlood: the same on the gRPC listener: over the cap a
// connection is closed at once, and a client connected before is served.
func checkGRPCConnectionFlood(t *testing.T, s *harness.Stack) {
	t.Helper()
	op, err := s.Operator().Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = op.Close() }()
	if _, err := herov1.NewCoordinatorClient(op).GetActor(context.Background(), &herov1.GetActorRequest{Id: 1}); err != nil {
		t.Fatal(err)
	}
	closed := 0
	for i := 0; i < 40; i++ {
		fc := floodConn(t, s.API.GRPCAddr)
		_ = fc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := fc.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed < 40-16 {
		t.Fatalf("%d of 40 gRPC flood connections were closed at once, want at least %d", closed, 40-16)
	}
	if _, err := herov1.NewCoordinatorClient(op).GetActor(context.Background(), &herov1.GetActorRequest{Id: 1}); err != nil {
		t.Fatalf("a gRPC client connected before the flood: %v", err)
	}
	if v := metricValue(t, s.API.AdminAddr, `hero_listener_connections_refused_total{cause="max_connections",listener="grpc"}`); v < float64(40-16) {
		t.Fatalf("hero_listener_connections_refused_total{grpc, max_connections} = %v", v)
	}
}

// waitUntil re-checks cond until it holds or the deadline passes: for state of
// another process that no event announces (a gauge of the API, a runner's
// announcement in a new context). Processes and jobs are waited on by events
// (lib/testutil/proctest).
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // the re-check pace
	}
}

// The development mode trusts a bare X-Hero-Actor, and says so at every start.
func TestAuthDevMode(t *testing.T) {
	s, _ := newStack(t, harness.StackOptions{APIArgs: []string{"--auth-dev-trust-actor-header"}})
	req, _ := http.NewRequest(http.MethodPost, harness.APIURL(s.API), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"flow.list","params":{"context_id":1}}`))
	req.Header.Set("X-Hero-Actor", "1")
	resp, err := harness.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	_ = resp.Body.Close()
	if out["result"] == nil {
		t.Fatalf("dev mode: a bare actor header was refused: %v", out)
	}
	if !strings.Contains(s.API.Output(), "DEVELOPMENT MODE") {
		t.Fatal("dev mode was not announced in the log")
	}
	if v := metricValue(t, s.API.AdminAddr, "hero_api_auth_dev_mode"); v != 1 {
		t.Fatalf("hero_api_auth_dev_mode = %v", v)
	}
}
