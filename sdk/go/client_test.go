package hero

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/tlsx"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// flaky answers each call Unavailable until its count of failures is used up.
type flaky struct {
	herov1.UnimplementedCoordinatorServer
	mu    sync.Mutex
	fail  map[string]int // method → failures left
	calls map[string]int
	auth  []string
	how   []string // per call: "session", "each" (a per-call signature) or "none"
}

func (f *flaky) step(ctx context.Context, method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	md, _ := metadata.FromIncomingContext(ctx)
	f.auth = append(f.auth, md.Get("authorization")...)
	how := "none"
	switch {
	case len(md.Get(auth.MetadataSession)) > 0:
		how = "session"
	case len(md.Get(auth.MetadataNonce)) > 0:
		how = "each"
	}
	f.how = append(f.how, how)
	if f.fail[method] > 0 {
		f.fail[method]--
		return status.Error(codes.Unavailable, "redis is down")
	}
	return nil
}

func (f *flaky) GetJob(ctx context.Context, r *herov1.GetJobRequest) (*herov1.GetJobResponse, error) {
	if err := f.step(ctx, "GetJob"); err != nil {
		return nil, err
	}
	if r.Id == 404 {
		return nil, status.Error(codes.NotFound, "job 1:404 not found")
	}
	return &herov1.GetJobResponse{Job: &herov1.Job{Id: r.Id, CallerId: r.CallerId, Status: "finished"}}, nil
}

func (f *flaky) CreateJob(ctx context.Context, r *herov1.CreateJobRequest) (*herov1.CreateJobResponse, error) {
	if err := f.step(ctx, "CreateJob"); err != nil {
		return nil, err
	}
	return &herov1.CreateJobResponse{Job: r.Job}, nil
}

func (f *flaky) SubmitJob(ctx context.Context, r *herov1.SubmitJobRequest) (*herov1.SubmitJobResponse, error) {
	if err := f.step(ctx, "SubmitJob"); err != nil {
		return nil, err
	}
	return &herov1.SubmitJobResponse{Job: r.Job, Existing: true}, nil
}

// serve runs srv on a local port and dials it (plaintext, an operator secret).
func serve(t testing.TB, srv herov1.CoordinatorServer) *Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	herov1.RegisterCoordinatorServer(gs, srv)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	c, err := Dial(Config{Addr: ln.Addr().String(), AdminSecret: "s3cret", Actor: 7, Plaintext: true, CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Idempotent calls ride through transient faults; a creation is not sent twice, but a
// unique submission is.
func TestRetries(t *testing.T) {
	f := &flaky{fail: map[string]int{"GetJob": 2, "CreateJob": 1, "SubmitJob": 1}, calls: map[string]int{}}
	c := serve(t, f)
	ctx := context.Background()
	j, err := c.GetJob(ctx, 0, 5)
	if err != nil || j.ID != 5 || j.CallerID != 7 || f.calls["GetJob"] != 3 {
		t.Errorf("GetJob: %+v %v after %d calls", j, err, f.calls["GetJob"])
	}
	if _, err := c.CreateJob(ctx, &model.Job{ScriptType: model.ScriptSh, Script: "true"}); !errors.Is(err, ErrUnavailable) || f.calls["CreateJob"] != 1 {
		t.Errorf("CreateJob: %v after %d calls; want one call and ErrUnavailable", err, f.calls["CreateJob"])
	}
	s, err := c.Submit(ctx, &model.Job{ScriptType: model.ScriptSh, Script: "true"}, SubmitOptions{UniqueKey: "k", UniqueTTL: time.Minute})
	if err != nil || !s.Existing || f.calls["SubmitJob"] != 2 {
		t.Errorf("Submit with a unique key: %+v %v after %d calls", s, err, f.calls["SubmitJob"])
	}
	for _, a := range f.auth {
		if a != "Bearer s3cret" {
			t.Fatalf("a call without the operator secret: %q", a)
		}
	}
}

// Errors carry their kind, the gRPC code and the API's message.
func TestTypedErrors(t *testing.T) {
	c := serve(t, &flaky{fail: map[string]int{}, calls: map[string]int{}})
	_, err := c.GetJob(context.Background(), 1, 404)
	var e *Error
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &e) || e.Code != codes.NotFound || e.Message != "job 1:404 not found" ||
		status.Code(err) != codes.NotFound || err.Error() != "not found: job 1:404 not found" {
		t.Errorf("not found: %v (%T)", err, err)
	}
	for code, kind := range map[codes.Code]error{codes.PermissionDenied: ErrPermissionDenied, codes.InvalidArgument: ErrInvalidArgument,
		codes.FailedPrecondition: ErrConflict, codes.ResourceExhausted: ErrRateLimited, codes.Unknown: ErrInternal} {
		if err := wrap(status.Error(code, "x")); !errors.Is(err, kind) {
			t.Errorf("%v: %v", code, err)
		}
	}
	if wrap(nil) != nil {
		t.Error("wrap(nil) is not nil")
	}
}

func TestFlowSpecOrder(t *testing.T) {
	job := func(name string, deps ...string) FlowJob { return FlowJob{Name: name, Depends: deps} }
	order, err := (&FlowSpec{Jobs: []FlowJob{job("d", "b", "c"), job("b", "a"), job("c", "a"), job("a")}}).Order()
	if err != nil || len(order) != 4 || order[0] != 3 || order[3] != 0 {
		t.Errorf("diamond: %v %v", order, err)
	}
	for want, spec := range map[string]FlowSpec{
		"at least one job":              {},
		"job 1 has no name":             {Jobs: []FlowJob{job("")}},
		`job name "a" used twice`:       {Jobs: []FlowJob{job("a"), job("a")}},
		`depends on "z", which is not`:  {Jobs: []FlowJob{job("a", "z")}},
		"dependency cycle among jobs a": {Jobs: []FlowJob{job("a", "b"), job("b", "a"), job("c")}},
	} {
		if _, err := spec.Order(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v", want, err)
		}
	}
}

// With a key over TLS the client signs its connection once (hero-session) unless
// told to sign each call; without TLS it signs each call.
func TestSessionByDefaultOverTLS(t *testing.T) {
	pki := &tlsx.PKI{Dir: t.TempDir()}
	if _, err := pki.Init(); err != nil {
		t.Fatal(err)
	}
	scfg, err := tlsx.ServerConfig(pki.Files("api"), false, "api", nil)
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := TLSConfig(pki.Files("api").CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := auth.GenerateKey()
	for _, tc := range []struct {
		name      string
		tls, each bool
		want      string
	}{{"tls", true, false, "session"}, {"tls, SignEachCall", true, true, "each"}, {"plaintext", false, false, "each"}} {
		f := &flaky{fail: map[string]int{}, calls: map[string]int{}}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var opts []grpc.ServerOption
		cfg := Config{Addr: ln.Addr().String(), Actor: 7, Key: key, SignEachCall: tc.each, CallTimeout: 10 * time.Second}
		if tc.tls {
			opts = append(opts, grpc.Creds(credentials.NewTLS(scfg)))
			cfg.TLS = ccfg
		} else {
			cfg.Plaintext = true
		}
		gs := grpc.NewServer(opts...)
		herov1.RegisterCoordinatorServer(gs, f)
		go func() { _ = gs.Serve(ln) }()
		c, err := Dial(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if _, err := c.GetJob(context.Background(), 7, 1); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		_ = c.Close()
		gs.Stop()
		if strings.Join(f.how, ",") != tc.want+","+tc.want {
			t.Errorf("%s: calls authenticated by %v, want %s", tc.name, f.how, tc.want)
		}
	}
}

// Config.SubmitWindow outside 0 (the default) to 64 is refused by Dial, naming it.
func TestDialRefusesSubmitWindow(t *testing.T) {
	for _, w := range []int{-1, 65} {
		c, err := Dial(Config{Addr: "127.0.0.1:1", AdminSecret: "secret", Plaintext: true, SubmitWindow: w})
		if err == nil {
			_ = c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "SubmitWindow") {
			t.Errorf("SubmitWindow %d: %v; want a refusal naming SubmitWindow", w, err)
		}
	}
	c, err := Dial(Config{Addr: "127.0.0.1:1", AdminSecret: "secret", Plaintext: true, SubmitWindow: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if c.streams == nil || c.streams.window != 2 {
		t.Errorf("SubmitWindow 2: the stream's window is %+v; want 2", c.streams)
	}
}
