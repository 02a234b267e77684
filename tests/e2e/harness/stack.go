package harness

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/hero-coordinator/hero/lib/auth"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// AdminSecret is the operator secret stacks started by the harness use.
const AdminSecret = "e2e-operator-secret-0123456789"

// Stack is the four single-node services against one Redis.
type Stack struct {
	t         testing.TB
	BinDir    string
	RedisURL  string
	Scheduler *Proc
	Router    *Proc
	Runner    *Proc
	API       *Proc
	Args      map[string][]string // extra flags per service, reused on restart
	ConfigDir string              // heroctl's config directory (actor keys), made on first use

	runnerWrap []string // StackOptions.RunnerWrap, reused on restart
}

// StackOptions tweak the services.
type StackOptions struct {
	SchedulerArgs, RouterArgs, RunnerArgs, APIArgs []string
	// RunnerWrap is a command the runner is started under (its binary and arguments
	// follow), e.g. unshare to make it PID 1 of a PID namespace.
	RunnerWrap []string
}

// StartStack starts scheduler, router, runner and supervisor-daemon.
func StartStack(t testing.TB, binDir, redisURL string, opt StackOptions) *Stack {
	t.Helper()
	s := &Stack{t: t, BinDir: binDir, RedisURL: redisURL, runnerWrap: opt.RunnerWrap, Args: map[string][]string{
		"scheduler":         append([]string{"--retry-base", "100ms", "--retry-cap", "1s"}, opt.SchedulerArgs...),
		"router":            append([]string{"--lease", "3s"}, opt.RouterArgs...),
		"runner":            append([]string{"--lease", "3s", "--heartbeat", "1s", "--kill-grace", "200ms", "--state-dir", t.TempDir()}, opt.RunnerArgs...),
		"supervisor-daemon": opt.APIArgs,
	}}
	s.Scheduler = s.Start("scheduler")
	s.Router = s.Start("router")
	s.Runner = s.Start("runner")
	s.API = s.Start("supervisor-daemon")
	return s
}

// Start (re)starts one service of the stack and returns it.
func (s *Stack) Start(name string) *Proc {
	s.t.Helper()
	args := append([]string(nil), s.Args[name]...)
	switch name {
	case "router":
		args = append(args, "--scheduler-addr", s.Scheduler.GRPCAddr)
	case "supervisor-daemon":
		args = append(args, "--scheduler-addr", s.Scheduler.GRPCAddr)
	case "scheduler":
		if s.Scheduler != nil {
			// keep the address the others dial
			args = append(args, "--grpc-addr", s.Scheduler.GRPCAddr)
		}
	}
	env := []string{"HERO_ADMIN_SECRET=" + AdminSecret}
	if g := os.Getenv("HERO_TEST_GOGC"); g != "" {
		env = append(env, "GOGC="+g)
	}
	if g := os.Getenv("HERO_TEST_GOMAXPROCS"); g != "" {
		env = append(env, "GOMAXPROCS="+g)
	}
	o := Options{Args: args, Env: env}
	if name == "runner" {
		o.Wrap = s.runnerWrap
	}
	p := Start(s.t, s.BinDir, name, s.RedisURL, o)
	switch name {
	case "scheduler":
		s.Scheduler = p
	case "router":
		s.Router = p
	case "runner":
		s.Runner = p
	case "supervisor-daemon":
		s.API = p
	}
	return p
}

// RPCError is a JSON-RPC error answer.
type RPCError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Message) }

// Client calls the JSON-RPC API as an actor (signing each request with the actor's
// key) or as an operator (its secret, and the actor it acts for, if any).
type Client struct {
	URL      string
	GRPCAddr string
	Actor    uint32
	Key      ed25519.PrivateKey // the actor's key (ActorKey); signs unless Secret is set
	Secret   string
	Header   http.Header // more headers on every JSON-RPC request (e.g. traceparent)
	// SignEachCall makes Dial sign every gRPC call (a nonce each) instead of the TLS
	// connection once (a session signature, the default).
	SignEachCall bool
}

// ActorKey is the deterministic test key of an actor: every stack registers actors
// with it (ActorPubkey), so a Client of any actor can sign.
func ActorKey(id uint32) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(fmt.Sprintf("hero e2e actor %d", id)))
	return ed25519.NewKeyFromSeed(seed[:])
}

// ActorPubkey is the hex pubkey of ActorKey(id), as actor.create takes it.
func ActorPubkey(id uint32) string {
	return auth.PublicKeyHex(ActorKey(id).Public().(ed25519.PublicKey))
}

// Client returns a JSON-RPC client for the stack's API acting as an actor (0: none).
func (s *Stack) Client(actor uint32) *Client {
	c := &Client{URL: APIURL(s.API), GRPCAddr: s.API.GRPCAddr, Actor: actor}
	if actor != 0 {
		c.Key = ActorKey(actor)
	}
	return c
}

// Operator returns a client holding the operator secret.
func (s *Stack) Operator() *Client {
	return &Client{URL: APIURL(s.API), GRPCAddr: s.API.GRPCAddr, Secret: AdminSecret}
}

// CreateActor registers an actor with its test key (operator).
func (s *Stack) CreateActor(t testing.TB, id uint32) {
	t.Helper()
	s.Operator().MustCall(t, "actor.create", map[string]any{"actor": map[string]any{"id": id, "pubkey": ActorPubkey(id)}}, nil)
}

// Signer returns the client's request signer (nil for an operator or no actor).
func (c *Client) Signer() *auth.Signer {
	if c.Secret != "" || c.Actor == 0 || c.Key == nil {
		return nil
	}
	return &auth.Signer{Actor: c.Actor, Key: c.Key}
}

// NewRequest builds a POST of body to the API with the client's credentials: the
// operator secret, or the actor's signature over body.
func (c *Client) NewRequest(body []byte) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if c.Secret != "" {
		req.Header.Set("Authorization", "Bearer "+c.Secret)
		if c.Actor != 0 {
			req.Header.Set(auth.HeaderActor, strconv.FormatUint(uint64(c.Actor), 10))
		}
		return req, nil
	}
	if sg := c.Signer(); sg != nil {
		cr, err := sg.Sign(auth.JSONRPCTarget, auth.Digest(body))
		if err != nil {
			return nil, err
		}
		SetCredentials(req.Header, cr)
	}
	return req, nil
}

// SetCredentials puts signed credentials into HTTP headers.
func SetCredentials(h http.Header, cr auth.Credentials) {
	h.Set(auth.HeaderActor, cr.Actor)
	h.Set(auth.HeaderTimestamp, cr.Timestamp)
	h.Set(auth.HeaderNonce, cr.Nonce)
	h.Set(auth.HeaderSignature, cr.Signature)
}

// Raw posts a body and returns the decoded response object.
func (c *Client) Raw(body string) (map[string]any, error) {
	req, err := c.NewRequest([]byte(body))
	if err != nil {
		return nil, err
	}
	resp, err := HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("response %q: %v", b, err)
	}
	return out, nil
}

// Call calls a method; result is decoded into out (if not nil).
func (c *Client) Call(method string, params any, out any) error {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, err := c.NewRequest(body)
	if err != nil {
		return err
	}
	resp, err := HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var r struct {
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return err
	}
	if r.Error != nil {
		return r.Error
	}
	if out != nil {
		return json.Unmarshal(r.Result, out)
	}
	return nil
}

// API dials the API (Dial) for a test and returns its Coordinator client; the
// connection is closed when the test ends.
func (c *Client) API(tb testing.TB) herov1.CoordinatorClient {
	tb.Helper()
	cc, err := c.Dial()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cc.Close() })
	return herov1.NewCoordinatorClient(cc)
}

// Dial opens a gRPC connection to the API with the client's credentials: the actor's
// session signature of the TLS connection (SignEachCall: every call signed), or the
// operator secret (and the actor acted for).
func (c *Client) Dial() (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(APICredentials())}
	if sg := c.Signer(); sg != nil && c.SignEachCall {
		opts = append(opts, auth.DialOptions(sg)...)
	} else if sg != nil {
		opts = append(opts, auth.SessionDialOptions(sg, APICredentials())...)
	} else if c.Secret != "" {
		md := []string{"authorization", "Bearer " + c.Secret}
		if c.Actor != 0 {
			md = append(md, auth.MetadataActor, strconv.FormatUint(uint64(c.Actor), 10))
		}
		opts = append(opts, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return inv(metadata.AppendToOutgoingContext(ctx, md...), method, req, reply, cc, o...)
		}), grpc.WithChainStreamInterceptor(func(ctx context.Context, d *grpc.StreamDesc, cc *grpc.ClientConn, method string, st grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
			return st(metadata.AppendToOutgoingContext(ctx, md...), d, cc, method, o...)
		}))
	}
	return grpc.NewClient(c.GRPCAddr, opts...)
}

// MustCall is Call that fails the test on error.
func (c *Client) MustCall(t testing.TB, method string, params any, out any) {
	t.Helper()
	if err := c.Call(method, params, out); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
}

// Setup creates actor 1 (admin), context ctxID and runner 1 serving the defaults.
func (s *Stack) Setup(t testing.TB, ctxID uint32) *Client {
	t.Helper()
	op := s.Operator()
	s.CreateActor(t, 1)
	op.MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": ctxID, "admins": []int{1}}}, nil)
	c := s.Client(1)
	c.MustCall(t, "runner.create", map[string]any{"context_id": ctxID, "runner": map[string]any{"id": 1, "script_types": []string{"python", "sh", "bash"}}}, nil)
	return c
}

// Job is the part of a job the tests read.
type Job struct {
	ID           uint32            `json:"id"`
	CallerID     uint32            `json:"caller_id"`
	Status       string            `json:"status"`
	Error        string            `json:"error"`
	ExitCode     int               `json:"exit_code"`
	Attempt      uint32            `json:"attempt"`
	Result       map[string]string `json:"result"`
	Worker       string            `json:"worker"`
	StartedAt    int64             `json:"started_at"`
	FinishedAt   int64             `json:"finished_at"`
	CreatedAt    int64             `json:"created_at"`
	StartedAtMs  int64             `json:"started_at_ms"`
	FinishedAtMs int64             `json:"finished_at_ms"`
	ReadyAtMs    int64             `json:"ready_at_ms"`
	StartedAtUs  int64             `json:"started_at_us"`
	FinishedAtUs int64             `json:"finished_at_us"`
	FlowID       uint32            `json:"flow_id"`
	Limits       map[string]any    `json:"limits"`
}

// Flow is the part of a flow the tests read.
type Flow struct {
	ID         uint32            `json:"id"`
	Status     string            `json:"status"`
	Error      string            `json:"error"`
	FailedJob  uint32            `json:"failed_job"`
	Result     map[string]string `json:"result"`
	Jobs       []uint32          `json:"jobs"`
	CreatedAt  int64             `json:"created_at"`
	StartedAt  int64             `json:"started_at"`
	FinishedAt int64             `json:"finished_at"`
}

// WaitFlow waits until a flow ends (status finished or error), or fails the test.
// It follows the context's event stream over gRPC (Watch), so it wakes on the
// flow's events instead of on a timer.
func (c *Client) WaitFlow(t testing.TB, ctxID, flowID uint32, timeout time.Duration) Flow {
	t.Helper()
	// flow.wait: one notification per flow end, nothing per job (a watch of the event
	// stream would have the server read every job's events).
	deadline := time.Now().Add(timeout)
	for {
		secs := int(math.Ceil(time.Until(deadline).Seconds()))
		var f Flow
		err := c.Call("flow.wait", map[string]any{"context_id": ctxID, "id": flowID, "timeout": min(max(secs, 1), 3600)}, &f)
		if err == nil {
			return f
		}
		if re, ok := err.(*RPCError); ok && re.Code == -32008 && time.Now().Before(deadline) {
			continue // the server's wait ended first (its cap is an hour)
		}
		t.Fatalf("flow %d did not end within %v: %v", flowID, timeout, err)
	}
}

// WaitEvent re-checks cond after each event of the context until it holds (true) or
// the timeout passes (false).
func (c *Client) WaitEvent(t testing.TB, ctxID uint32, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	return c.WaitEventOf(t, ctxID, timeout, func(*herov1.Event) bool { return cond() })
}

// WaitEventOf is WaitEvent with the event that woke it (nil for the first check).
func (c *Client) WaitEventOf(t testing.TB, ctxID uint32, timeout time.Duration, cond func(ev *herov1.Event) bool) bool {
	t.Helper()
	return c.watchEvents(t, ctxID, 0, nil, timeout, cond)
}

// watchEvents is WaitEventOf over the events of one flow (flowID ≠ 0) or all, and of
// the given type prefixes (none: all types).
func (c *Client) watchEvents(t testing.TB, ctxID, flowID uint32, types []string, timeout time.Duration, cond func(ev *herov1.Event) bool) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cc, err := c.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	wctx := ctx
	// Start from a definite event id, taken before cond is first checked: an event
	// after it is delivered by the stream, so no change can slip between the two.
	var pos struct {
		Next string `json:"next"`
	}
	c.MustCall(t, "events.read", map[string]any{"context_id": ctxID, "after": "$"}, &pos)
	after := pos.Next
	for {
		stream, err := herov1.NewCoordinatorClient(cc).Watch(wctx, &herov1.WatchRequest{ContextId: ctxID, AfterId: after, FlowId: flowID, TypePrefixes: types})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if cond(nil) {
			return true
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return cond(nil)
				}
				break // reconnect and resume after the last event
			}
			after = ev.Event.Id
			if cond(ev.Event) {
				return true
			}
		}
	}
}

// Heroctl runs the CLI with the stack's address and returns stdout, stderr, exit code.
func (s *Stack) Heroctl(t testing.TB, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := s.HeroctlCmd(t, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		t.Fatalf("heroctl %v did not end", args)
	}
	return "", "", -1
}

// HeroctlCmd is the command Heroctl runs (not started): the CLI with the stack's
// address, its CA and the test actors' keys.
func (s *Stack) HeroctlCmd(t testing.TB, env []string, args ...string) *exec.Cmd {
	t.Helper()
	if s.ConfigDir == "" {
		// heroctl keeps actor keys there (HERO_CONFIG_DIR): the test keys of the
		// actors the tests register (ActorKey), as `heroctl key generate` would.
		s.ConfigDir = t.TempDir()
		for id := uint32(1); id <= 9; id++ {
			path := filepath.Join(s.ConfigDir, "keys", fmt.Sprintf("actor-%d.pem", id))
			if err := auth.WritePrivateKey(path, ActorKey(id), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(filepath.Join(s.BinDir, "heroctl"), args...)
	p, err := PKI()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HERO_ADDR=" + s.API.GRPCAddr, "HERO_API_URL=" + APIURL(s.API),
		"HERO_CONFIG_DIR=" + s.ConfigDir, "HERO_TLS_CA=" + p.Files("api").CA}, env...)
	return cmd
}
