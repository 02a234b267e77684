package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hero-coordinator/hero/lib/tlsx"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// storeDown is supervisor-daemon's answer while its Redis cannot be reached.
const storeDown = "unavailable: the store (Redis) cannot be reached now; retry: dial tcp 10.0.0.9:6379: connect: connection refused"

// outageAPI answers every submission and read as supervisor-daemon does during a Redis
// outage: Unavailable, with a retry hint.
type outageAPI struct {
	herov1.UnimplementedCoordinatorServer
	calls atomic.Int64
}

func storeDownStatus() error {
	st, _ := status.New(codes.Unavailable, storeDown).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(1e9)})
	return st.Err()
}

func (o *outageAPI) SubmitJob(context.Context, *herov1.SubmitJobRequest) (*herov1.SubmitJobResponse, error) {
	o.calls.Add(1)
	return nil, storeDownStatus()
}

func (o *outageAPI) SubmitJobStream(st grpc.BidiStreamingServer[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse]) error {
	for {
		r, err := st.Recv()
		if err != nil {
			return nil
		}
		for _, item := range append([]*herov1.SubmitJobStreamRequest{r}, r.Batch...) {
			if item.Submit == nil {
				continue
			}
			o.calls.Add(1)
			if err := st.Send(&herov1.SubmitJobStreamResponse{Seq: item.Seq, Error: &herov1.StreamError{Code: uint32(codes.Unavailable), Message: storeDown, RetryAfterMs: 1000}}); err != nil {
				return err
			}
		}
	}
}

// serveGRPC serves a Coordinator on a local port until the test ends.
func serveGRPC(t *testing.T, api herov1.CoordinatorServer, opts ...grpc.ServerOption) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln}
	gs := grpc.NewServer(opts...)
	herov1.RegisterCoordinatorServer(gs, api)
	go func() { _ = gs.Serve(counted) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String(), &counted.n
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// clearHeroEnv unsets heroctl's environment for the test.
func clearHeroEnv(t *testing.T) {
	for _, k := range []string{"HERO_ADDR", "HERO_API_URL", "HERO_ACTOR", "HERO_CONTEXT", "HERO_ADMIN_SECRET", "HERO_ADMIN_SECRET_FILE", "HERO_KEY",
		"HERO_TLS_CA", "HERO_TLS_CERT", "HERO_TLS_KEY", "HERO_PLAINTEXT", "HERO_SIGN_EACH_CALL", "HERO_OUTPUT", "HERO_GRPC_PORT", "HERO_HTTP_PORT"} {
		t.Setenv(k, "")
	}
	t.Setenv("HERO_CONFIG_DIR", t.TempDir())
}

// During a Redis outage `heroctl job submit` says that the API answered, that its
// store is unavailable, and when to retry — not that supervisor-daemon cannot be
// reached. Over the submission stream and over SubmitJob alike.
func TestSubmitDuringStoreOutage(t *testing.T) {
	clearHeroEnv(t)
	api := &outageAPI{}
	addr, _ := serveGRPC(t, api)
	for _, each := range []string{"", "--sign-each-call"} {
		args := []string{"--addr", addr, "--plaintext", "--admin-secret", "s3cret-s3cret-s3cret"}
		if each != "" {
			args = []string{"--addr", addr, "--plaintext", "--actor", "5", "--key", writeKey(t), each}
		}
		_, errOut, code := heroctl(t, append(args, "job", "submit", "--type", "sh", "--script", "true")...)
		if code != 1 || strings.Contains(errOut, "cannot reach") || !strings.Contains(errOut, "answered") ||
			!strings.Contains(errOut, "store (Redis) cannot be reached") || !strings.Contains(errOut, "retry in 1s") {
			t.Errorf("job submit %v during a store outage: exit %d, %q", each, code, errOut)
		}
	}
	if api.calls.Load() != 2 {
		t.Errorf("the API got %d submissions, want 2 (a submission without a unique key is not retried)", api.calls.Load())
	}
}

// writeKey writes a new actor key and returns its file.
func writeKey(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "actor.pem")
	if _, _, code := heroctl(t, "key", "generate", "--out", path); code != 0 {
		t.Fatal("key generate failed")
	}
	return path
}

// jsonrpcAPI answers each JSON-RPC method with the next of its scripted answers
// (the last one repeats) and counts the requests.
type jsonrpcAPI struct {
	mu      sync.Mutex
	answers map[string][]string
	calls   map[string]int
}

func (j *jsonrpcAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Method string `json:"method"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &req)
	j.mu.Lock()
	n := j.calls[req.Method]
	j.calls[req.Method]++
	as := j.answers[req.Method]
	j.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,`+as[min(n, len(as)-1)]+`}`)
}

// `heroctl api call` sends an idempotent method again after the API answered
// unavailable (-32000, with its hint), and any method refused before anything was
// done (-32029 with a hint); a creation answered unavailable is not sent again.
func TestAPICallRetries(t *testing.T) {
	clearHeroEnv(t)
	unavailable := `"error":{"code":-32000,"message":"` + storeDown + `","data":{"retry_after_ms":20}}`
	limited := `"error":{"code":-32029,"message":"too many requests: retry later","data":{"retry_after_ms":20}}`
	api := &jsonrpcAPI{calls: map[string]int{}, answers: map[string][]string{
		"flow.load":  {unavailable, unavailable, `"result":{"id":3,"status":"finished"}`},
		"job.create": {unavailable, `"result":{"id":9}`},
		"job.submit": {limited, `"result":{"job":{"id":9}}`},
	}}
	srv := &http.Server{Handler: api}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	call := func(method string) (string, string, int) {
		return heroctl(t, "--api-url", "http://"+ln.Addr().String()+"/", "--plaintext", "--admin-secret", "s3cret-s3cret-s3cret", "api", "call", method, `{"context_id":1,"id":3}`)
	}
	if out, errOut, code := call("flow.load"); code != 0 || !strings.Contains(out, `"finished"`) || api.calls["flow.load"] != 3 {
		t.Errorf("flow.load after two unavailable answers: exit %d, %q %q, %d requests (want 3)", code, out, errOut, api.calls["flow.load"])
	}
	if _, errOut, code := call("job.create"); code != 1 || !strings.Contains(errOut, "-32000") || api.calls["job.create"] != 1 {
		t.Errorf("job.create answered unavailable: exit %d, %q, %d requests (want 1: a creation is not sent twice)", code, errOut, api.calls["job.create"])
	}
	if out, errOut, code := call("job.submit"); code != 0 || !strings.Contains(out, `"id": 9`) || api.calls["job.submit"] != 2 {
		t.Errorf("job.submit refused by the rate limit: exit %d, %q %q, %d requests (want 2)", code, out, errOut, api.calls["job.submit"])
	}
}

// An API whose certificate comes from another CA than HERO_TLS_CA's: heroctl says
// the certificate is not trusted and what to set, at once (no retries: the same
// handshake fails the same way), over gRPC and JSON-RPC.
func TestUntrustedCertificate(t *testing.T) {
	clearHeroEnv(t)
	serverPKI, clientPKI := &tlsx.PKI{Dir: t.TempDir()}, &tlsx.PKI{Dir: t.TempDir()}
	for _, p := range []*tlsx.PKI{serverPKI, clientPKI} {
		if _, err := p.Init(); err != nil {
			t.Fatal(err)
		}
	}
	serverTLS, err := tlsx.ServerConfig(serverPKI.Files("api"), false, "api", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, accepted := serveGRPC(t, &outageAPI{}, grpc.Creds(credentials.NewTLS(serverTLS)))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverTLS)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: &jsonrpcAPI{calls: map[string]int{}, answers: map[string][]string{"actor.load": {`"result":{"id":1}`}}}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	args := []string{"--addr", addr, "--api-url", "https://" + ln.Addr().String() + "/", "--tls-ca", clientPKI.Files("api").CA,
		"--admin-secret", "s3cret-s3cret-s3cret", "--timeout", "20s"}
	for _, cmd := range [][]string{{"actor", "get", "1"}, {"api", "call", "actor.load", `{"id":1}`}} {
		_, errOut, code := heroctl(t, append(args, cmd...)...)
		if code != 1 || strings.Contains(errOut, "cannot reach") || !strings.Contains(errOut, "certificate is not trusted") ||
			!strings.Contains(errOut, "unknown authority") || !strings.Contains(errOut, "HERO_TLS_CA") {
			t.Errorf("heroctl %v against an API of another CA: exit %d, %q", cmd, code, errOut)
		}
	}
	if n := accepted.Load(); n > 2 {
		t.Errorf("heroctl connected %d times to an API whose certificate it cannot trust; want no retries", n)
	}
}
