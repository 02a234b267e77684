package console

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// backend is a Backend of one actor (7, its key), one operator secret and a record
// of the calls; the browser test (tests/e2e TestConsoleInTheBrowser) runs the real one.
type backend struct {
	mu      sync.Mutex
	pub     ed25519.PublicKey
	revoked bool
	nonces  map[string]bool
	calls   []string

	guards  []func()      // the open streams' checks, run by notice
	log     string        // job 1:5's log
	ended   bool          // job 1:5 ended
	marked  int           // MarkLog calls
	appends chan struct{} // LogAppends
	events  chan Event    // what Follow sends
}

const secret = "the-operator-secret-0123"

func (b *backend) Call(_ context.Context, id Identity, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, method)
	if method == "job.logs" {
		off := params.(map[string]any)["offset"].(int64)
		return json.Marshal(logChunk{Logs: b.log[off:], NextOffset: int64(len(b.log)), Complete: b.ended})
	}
	if !id.Operator && method == "flow.cancel" {
		return nil, &APIError{Code: CodePermission, Message: "actor 7 is a reader in context 1; flow.cancel needs executor"}
	}
	return json.RawMessage(`{"items":[],"next_cursor":""}`), nil
}

func (b *backend) ActorKey(_ context.Context, actor uint32) (ed25519.PublicKey, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if actor != 7 {
		return nil, nil
	}
	return b.pub, nil
}

func (b *backend) CheckSecret(_ context.Context, s string) (string, bool, error) {
	return "op_1", s == secret, nil
}

func (b *backend) SecretValid(context.Context, string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.revoked, nil
}

func (b *backend) UseNonce(_ context.Context, actor uint32, nonce string, _ time.Duration) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := string(rune(actor)) + nonce
	if b.nonces[k] {
		return false, nil
	}
	b.nonces[k] = true
	return true, nil
}

func (b *backend) Contexts(context.Context, Identity) ([]ContextRole, error) {
	return []ContextRole{{ID: 1, Role: "reader"}}, nil
}

func (b *backend) Follow(ctx context.Context, _ Identity, _ uint32, _ string, send func([]Event) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-b.events:
			if err := send([]Event{e}); err != nil {
				return err
			}
		}
	}
}

func (b *backend) Guard(ctx context.Context, _ Identity, _ uint32, _, _ string, check func(context.Context) error) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	b.mu.Lock()
	b.guards = append(b.guards, func() {
		if err := check(context.Background()); err != nil {
			cancel(err)
		}
	})
	b.mu.Unlock()
	return ctx, func() { cancel(nil) }
}

// notice checks the open streams again, as a notice of coord:authchanged does.
func (b *backend) notice() {
	b.mu.Lock()
	guards := b.guards
	b.mu.Unlock()
	for _, g := range guards {
		g()
	}
}

func (b *backend) MarkLog(context.Context, Identity, uint32, uint32, uint32, time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.marked++
	return nil
}

func (b *backend) Queues(context.Context, Identity, uint32) ([]QueueDepth, int64, error) {
	return []QueueDepth{{Queue: "queue:sh", Depth: 3}, {Queue: "msg_out", Depth: 0}}, 2, nil
}

func (b *backend) EventsSince(context.Context, Identity, uint32, time.Time, int) ([]StatEvent, error) {
	return nil, nil
}

func (b *backend) Has(string) bool { return false }

func (b *backend) LogAppends(uint32, uint32, uint32) (<-chan struct{}, func()) {
	return b.appends, func() {}
}

type fixture struct {
	t    *testing.T
	b    *backend
	key  ed25519.PrivateKey
	srv  *httptest.Server
	now  time.Time
	mu   sync.Mutex
	cons *Console
}

func newFixture(t *testing.T, readOnly bool) *fixture {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, b: &backend{pub: pub, nonces: map[string]bool{}, appends: make(chan struct{}, 1), events: make(chan Event, 1)}, key: key, now: time.Unix(1_800_000_000, 0)}
	f.cons, err = New(Options{Backend: f.b, Key: []byte("0123456789abcdef0123456789abcdef"), ReadOnly: readOnly, SessionTTL: time.Hour,
		Log: zerolog.Nop(), Now: func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewTLSServer(f.cons)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// do sends a request with a cookie and headers; it returns the status, the body and
// the session cookie set, if any.
func (f *fixture) do(method, path, body, cookie string, h map[string]string) (int, string, string) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: CookieName, Value: cookie})
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	set := ""
	for _, c := range resp.Cookies() {
		if c.Name == CookieName {
			set = c.Value
			if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode {
				f.t.Errorf("cookie %+v: want HttpOnly, Secure, SameSite=Strict", c)
			}
		}
	}
	return resp.StatusCode, string(b), set
}

func (f *fixture) challenge() string {
	_, body, _ := f.do("GET", "/ui/api/challenge", "", "", nil)
	var c struct{ Challenge string }
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		f.t.Fatal(body)
	}
	return c.Challenge
}

func (f *fixture) signIn(ch string) (int, string, string) {
	sig := hex.EncodeToString(ed25519.Sign(f.key, []byte(ch)))
	return f.do("POST", "/ui/api/login", `{"actor":7,"challenge":"`+ch+`","signature":"`+sig+`"}`, "", nil)
}

func (f *fixture) csrf(cookie string) string {
	_, body, _ := f.do("GET", "/ui/api/me", "", cookie, nil)
	var me struct{ CSRF string }
	if err := json.Unmarshal([]byte(body), &me); err != nil || me.CSRF == "" {
		f.t.Fatalf("me: %s", body)
	}
	return me.CSRF
}

func TestConsoleServesThePage(t *testing.T) {
	f := newFixture(t, false)
	for _, p := range []string{"/ui/", "/ui/app.js", "/ui/app.css", "/ui/some/route"} {
		st, body, _ := f.do("GET", p, "", "", nil)
		if st != 200 || len(body) < 100 {
			t.Errorf("GET %s: %d %q", p, st, body)
		}
	}
	if st, _, _ := f.do("POST", "/ui/", "", "", nil); st != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d", st)
	}
	if st, body, _ := f.do("GET", "/ui/api/nothing", "", "", nil); st != 404 || !strings.Contains(body, "no such console endpoint") {
		t.Errorf("unknown endpoint: %d %s", st, body)
	}
}

func TestConsoleActorSignIn(t *testing.T) {
	f := newFixture(t, false)
	ch := f.challenge()
	st, body, cookie := f.signIn(ch)
	if st != 200 || cookie == "" {
		t.Fatalf("sign-in: %d %s", st, body)
	}
	if st, body, _ := f.signIn(ch); st != 401 || !strings.Contains(body, "used already") {
		t.Errorf("a replayed challenge: %d %s", st, body)
	}
	if st, body, _ := f.do("GET", "/ui/api/me", "", cookie, nil); st != 200 || !strings.Contains(body, `"actor":7`) {
		t.Errorf("me: %d %s", st, body)
	}
	// A signature by another key, a challenge not the server's, an expired one.
	_, other, _ := ed25519.GenerateKey(nil)
	ch2 := f.challenge()
	sig := hex.EncodeToString(ed25519.Sign(other, []byte(ch2)))
	if st, body, _ := f.do("POST", "/ui/api/login", `{"actor":7,"challenge":"`+ch2+`","signature":"`+sig+`"}`, "", nil); st != 401 || !strings.Contains(body, "does not verify") {
		t.Errorf("another key: %d %s", st, body)
	}
	forged := ch2[:len(ch2)-4] + "0000"
	if st, body, _ := f.signIn(forged); st != 401 || !strings.Contains(body, "not one this server made") {
		t.Errorf("a forged challenge: %d %s", st, body)
	}
	ch3 := f.challenge()
	f.advance(challengeTTL + time.Second)
	if st, body, _ := f.signIn(ch3); st != 401 || !strings.Contains(body, "expired") {
		t.Errorf("an expired challenge: %d %s", st, body)
	}
}

func TestConsoleSessionRefusals(t *testing.T) {
	f := newFixture(t, false)
	_, _, cookie := f.signIn(f.challenge())
	tok := f.csrf(cookie)
	cancel := `{"method":"flow.cancel","params":{"context_id":1,"id":1}}`
	// Forged cookies: a changed payload, a changed MAC, garbage.
	parts := strings.Split(cookie, ".")
	for name, c := range map[string]string{
		"payload": parts[0] + "." + parts[1] + "x." + parts[2],
		"mac":     parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2])),
		"garbage": "hello",
	} {
		if st, body, _ := f.do("GET", "/ui/api/me", "", c, nil); st != 401 || !strings.Contains(body, "not one this server made") {
			t.Errorf("forged %s: %d %s", name, st, body)
		}
	}
	// No CSRF token, a wrong one, another site.
	if st, body, _ := f.do("POST", "/ui/api/call", cancel, cookie, nil); st != 403 || !strings.Contains(body, "CSRF") {
		t.Errorf("no CSRF token: %d %s", st, body)
	}
	if st, body, _ := f.do("POST", "/ui/api/call", cancel, cookie, map[string]string{"X-CSRF-Token": tok + "x"}); st != 403 || !strings.Contains(body, "CSRF") {
		t.Errorf("a wrong CSRF token: %d %s", st, body)
	}
	if st, body, _ := f.do("POST", "/ui/api/call", cancel, cookie, map[string]string{"X-CSRF-Token": tok, "Sec-Fetch-Site": "cross-site"}); st != 403 || !strings.Contains(body, "cross-site") {
		t.Errorf("cross-site: %d %s", st, body)
	}
	if st, body, _ := f.do("POST", "/ui/api/call", cancel, cookie, map[string]string{"X-CSRF-Token": tok, "Origin": "https://evil.example"}); st != 403 || !strings.Contains(body, "cross-site") {
		t.Errorf("another origin: %d %s", st, body)
	}
	// The API's own refusal passes through as 403.
	if st, body, _ := f.do("POST", "/ui/api/call", cancel, cookie, map[string]string{"X-CSRF-Token": tok}); st != 403 || !strings.Contains(body, "needs executor") {
		t.Errorf("the API's refusal: %d %s", st, body)
	}
	if st, body, _ := f.do("POST", "/ui/api/call", `{"method":"actor.create","params":{}}`, cookie, map[string]string{"X-CSRF-Token": tok}); st != 400 || !strings.Contains(body, "not one the console calls") {
		t.Errorf("a method beyond the console: %d %s", st, body)
	}
	// A new key for the actor ends the session.
	pub, _, _ := ed25519.GenerateKey(nil)
	f.b.mu.Lock()
	f.b.pub = pub
	f.b.mu.Unlock()
	if st, body, _ := f.do("GET", "/ui/api/me", "", cookie, nil); st != 401 || !strings.Contains(body, "revoked") {
		t.Errorf("after a new key: %d %s", st, body)
	}
	for _, c := range f.b.calls {
		if c != "flow.cancel" {
			t.Errorf("call %s reached the API", c)
		}
	}
	if len(f.b.calls) != 1 {
		t.Errorf("%d calls reached the API, want the one the API refused", len(f.b.calls))
	}
}

func TestConsoleSessionExpiresAndOperatorRevoked(t *testing.T) {
	f := newFixture(t, false)
	st, body, cookie := f.do("POST", "/ui/api/login", `{"secret":"`+secret+`"}`, "", nil)
	if st != 200 {
		t.Fatalf("operator sign-in: %d %s", st, body)
	}
	if st, body, _ := f.do("POST", "/ui/api/login", `{"secret":"wrong-secret-wrong-secret"}`, "", nil); st != 401 {
		t.Errorf("a wrong secret: %d %s", st, body)
	}
	if st, _, _ := f.do("GET", "/ui/api/me", "", cookie, nil); st != 200 {
		t.Fatalf("me: %d", st)
	}
	f.b.mu.Lock()
	f.b.revoked = true
	f.b.mu.Unlock()
	if st, body, _ := f.do("GET", "/ui/api/me", "", cookie, nil); st != 401 || !strings.Contains(body, "revoked") {
		t.Errorf("a revoked secret: %d %s", st, body)
	}
	f.b.mu.Lock()
	f.b.revoked = false
	f.b.mu.Unlock()
	f.advance(time.Hour)
	if st, body, _ := f.do("GET", "/ui/api/me", "", cookie, nil); st != 401 || !strings.Contains(body, "expired") {
		t.Errorf("an expired session: %d %s", st, body)
	}
}

func TestConsoleReadOnly(t *testing.T) {
	f := newFixture(t, true)
	_, _, cookie := f.do("POST", "/ui/api/login", `{"secret":"`+secret+`"}`, "", nil)
	tok := f.csrf(cookie)
	h := map[string]string{"X-CSRF-Token": tok}
	if st, body, _ := f.do("POST", "/ui/api/call", `{"method":"flow.cancel","params":{}}`, cookie, h); st != 403 || !strings.Contains(body, "read-only") {
		t.Errorf("an action: %d %s", st, body)
	}
	if st, body, _ := f.do("POST", "/ui/api/bulk", `{"action":"flow.cancel","context_id":1}`, cookie, h); st != 403 || !strings.Contains(body, "read-only") {
		t.Errorf("a bulk action: %d %s", st, body)
	}
	if st, body, _ := f.do("POST", "/ui/api/call", `{"method":"flow.list","params":{"context_id":1}}`, cookie, h); st != 200 {
		t.Errorf("a read: %d %s", st, body)
	}
	if len(f.b.calls) != 1 || f.b.calls[0] != "flow.list" {
		t.Errorf("calls %v, want the read only", f.b.calls)
	}
}

func TestFlowFileParse(t *testing.T) {
	for src, want := range map[string]string{
		"jobs: []":                         "no jobs",
		"jobs:\n - name: a\n   type: sh\n": `needs type: and script:`,
		"jobs:\n - name: a\n   type: sh\n   script: x\n   depends: [b]\n": `depends on "b"`,
		"jobs:\n - name: a\n   type: sh\n   script: x\n   depends: [a]\n": "cycle",
		"jobs:\n - name: a\n   typo: sh\n":                                "field typo not found",
	} {
		if _, _, err := parseFlowFile(src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
	f, order, err := parseFlowFile("jobs:\n - name: d\n   type: sh\n   script: x\n   depends: [b, c]\n - name: b\n   type: sh\n   script: x\n   depends: [a]\n - name: c\n   type: sh\n   script: x\n   depends: [a]\n - name: a\n   type: sh\n   script: x\n")
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, k := range order {
		pos[f.Jobs[k].Name] = i
	}
	if !(pos["a"] < pos["b"] && pos["a"] < pos["c"] && pos["b"] < pos["d"] && pos["c"] < pos["d"]) {
		t.Errorf("order %v", pos)
	}
}

func TestDAGCollapsesFanOuts(t *testing.T) {
	nodes := []dagNode{{ID: 1, Dependents: []uint32{}}, {ID: 1000, Dependents: []uint32{}}}
	for i := uint32(2); i < 1000; i++ {
		nodes[0].Dependents = append(nodes[0].Dependents, i)
		nodes[1].Depends = append(nodes[1].Depends, i)
		nodes = append(nodes, dagNode{ID: i, Depends: []uint32{1}, Dependents: []uint32{1000}, NodeStatus: "running"})
	}
	grp := groups(nodes)
	if len(grp) != 1 || len(grp["g2"]) != 998 {
		t.Fatalf("groups %d", len(grp))
	}
	src, view := dot(nodes, grp)
	if strings.Count(src, "->") != 2 || view[500].Group != "g2" {
		t.Errorf("dot has %d edges; node 500 in %q", strings.Count(src, "->"), view[500].Group)
	}
	c := &Console{}
	svg, err := c.render(context.Background(), src)
	if err != nil || !strings.Contains(string(svg), `id="n&#45;g2"`) || !strings.Contains(string(svg), `id="n&#45;j1"`) {
		t.Fatalf("render: %v %.300s", err, svg)
	}
}

func TestDAGBandsALongChain(t *testing.T) {
	var nodes []dagNode
	for i := uint32(1); i <= 10000; i++ {
		n := dagNode{ID: i, NodeStatus: "pending"}
		if i > 1 {
			n.Depends = []uint32{i - 1}
		}
		nodes = append(nodes, n)
	}
	grp := groups(nodes)
	if len(grp) > maxLayoutNodes || len(grp) < maxLayoutNodes/2 {
		t.Fatalf("%d bands for a chain of 10000, want at most %d", len(grp), maxLayoutNodes)
	}
	total := 0
	for _, ids := range grp {
		total += len(ids)
	}
	src, _ := dot(nodes, grp)
	if total != 10000 || strings.Count(src, "->") != len(grp)-1 {
		t.Fatalf("%d jobs in bands, %d edges between %d bands", total, strings.Count(src, "->"), len(grp))
	}
	c := &Console{}
	if _, err := c.render(context.Background(), src); err != nil {
		t.Fatal(err)
	}
}
