// Package hero is the Go client of the Hero coordinator for producers: programs that
// create, submit, run, wait for and watch jobs and flows. It talks gRPC to
// supervisor-daemon and authenticates with the actor's Ed25519 key (docs/api.md): over
// TLS it signs each connection once (a session signature bound to the connection),
// without TLS or with Config.SignEachCall every call; or with an operator secret.
//
//	c, err := hero.Dial(hero.Config{Addr: "127.0.0.1:9653", Actor: 1, KeyFile: "actor-1.pem", Context: 1})
//	job, err := c.RunJob(ctx, &model.Job{ScriptType: model.ScriptSh, Script: "echo hi"}, time.Minute)
//
// Objects are lib/model's (model.Job, model.Flow, …): encoded with encoding/json they
// are the JSON-RPC API's objects. Errors are typed (ErrNotFound, ErrPermissionDenied,
// ErrInvalidArgument, …; see Error). Idempotent calls are retried on transient faults.
// docs/sdk-go.md is the guide.
package hero

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/auth"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Config says where the API is and who calls it.
type Config struct {
	// Addr is supervisor-daemon's gRPC address (host:port); default 127.0.0.1:9653.
	Addr string
	// APIURL is the JSON-RPC endpoint, for Call; default https://<Addr's host>:9652/
	// (http:// with Plaintext).
	APIURL string
	// Actor is the actor the client acts as; Key (or KeyFile, a PKCS#8 PEM file)
	// its private key: every call is signed with it.
	Actor   uint32
	Key     ed25519.PrivateKey
	KeyFile string
	// AdminSecret is an operator secret: used when there is no key (sent as a bearer
	// token, acting for Actor when it is set).
	AdminSecret string
	// Context is the context the client works in; default 1.
	Context uint32
	// TLS is the API's TLS configuration; nil means TLS against the system's roots.
	TLS *tls.Config
	// Plaintext talks to an API without TLS (a development stack only).
	Plaintext bool
	// SignEachCall signs every gRPC call (its method and message, with a nonce)
	// instead of the TLS connection once (a session signature, the default with a
	// key over TLS). Needed when a proxy terminates TLS between the client and
	// supervisor-daemon: the server's connection is then another than the client's.
	// Plaintext calls are always signed each.
	SignEachCall bool
	// CallTimeout bounds each call that has no deadline of its own; default 30s.
	// Waits (RunJob, WaitFlow, WaitJob, WatchFlow) are bounded by their own arguments.
	CallTimeout time.Duration
	// FailFastUnreachable: while the client has not reached the API yet, a call that
	// cannot reach it at all (nothing listens at the address: connection refused; its
	// host name does not resolve) fails at once instead of being retried until its
	// deadline. A command line's user learns at once that the daemon is not running;
	// once the API was reached, such a fault is retried as any other (a restart).
	// Default false: a program started with its API waits for it.
	FailFastUnreachable bool
	// SubmitWindow bounds the flights (batch messages) of Submit's stream that are
	// out at once, 1 to 64; default 4. With 1 a flight goes only when the last one's
	// answers came (the widest messages, one at a time); with more, the server
	// stores one flight while the next is on its way.
	SubmitWindow int
}

// Client is a connection to the coordinator. It is safe for concurrent use.
type Client struct {
	cfg    Config
	signer *auth.Signer
	cc     *grpc.ClientConn
	api    herov1.CoordinatorClient
	// httpClient sends Call's JSON-RPC requests.
	httpClient *http.Client
	// noCreateJobs: the server answered CreateJobs Unimplemented (it predates
	// job.create_batch); SubmitFlow creates one job a call.
	noCreateJobs atomic.Bool
	// streams carries Submit's submissions (nil: each is a call, as with a signature
	// per call).
	streams *submitStreams
	// reached: a call reached the API (an answer, or a fault other than
	// unreachable); see Config.FailFastUnreachable.
	reached atomic.Bool
}

// Dial checks the configuration and opens a client (the connection itself is made at
// the first call).
func Dial(cfg Config) (*Client, error) {
	if cfg.Addr == "" {
		cfg.Addr = net.JoinHostPort("127.0.0.1", defaultGRPCPort)
	}
	if cfg.Context == 0 {
		cfg.Context = 1
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	c := &Client{cfg: cfg, httpClient: &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: cfg.TLS}}}
	if err := c.loadKey(); err != nil {
		return nil, err
	}
	if c.signer == nil && cfg.AdminSecret == "" {
		return nil, errors.New("hero: no credentials: set Config.Key or KeyFile (with Actor), or AdminSecret")
	}
	if cfg.Plaintext && cfg.TLS != nil {
		return nil, errors.New("hero: Plaintext and TLS exclude each other")
	}
	if cfg.SubmitWindow < 0 || cfg.SubmitWindow > 64 {
		return nil, fmt.Errorf("hero: Config.SubmitWindow %d is not between 1 and 64 (0: the default, %d)", cfg.SubmitWindow, submitWindow)
	}
	creds := credentials.NewTLS(cfg.TLS)
	if cfg.Plaintext {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		// Typed errors outermost, then retries; each attempt is signed anew (a new
		// nonce) or carries its connection's session signature.
		grpc.WithChainUnaryInterceptor(typedErrors, c.retryUnary),
		// Fixed flow-control windows, as the server's (lib/grpcx StreamWindow,
		// ConnWindow): gRPC's estimate of the bandwidth-delay product otherwise costs a
		// PING and a WINDOW_UPDATE, each a write of its own, for about every answer of
		// the submission stream.
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow)}
	switch {
	case c.signer != nil && !cfg.Plaintext && !cfg.SignEachCall:
		opts = append(opts, auth.SessionDialOptions(c.signer, creds)...)
	case c.signer != nil:
		opts = append(opts, auth.DialOptions(c.signer)...)
	default:
		opts = append(opts, bearer(cfg.AdminSecret, cfg.Actor)...)
	}
	cc, err := grpc.NewClient(cfg.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("hero: connect to %s: %w", cfg.Addr, err)
	}
	c.cc, c.api = cc, herov1.NewCoordinatorClient(cc)
	if c.signer == nil || !cfg.Plaintext && !cfg.SignEachCall { // not a signature per call
		c.streams = &submitStreams{cc: c.api, window: cfg.SubmitWindow}
	}
	return c, nil
}

// The client's HTTP/2 flow-control windows (a stream's, the connection's).
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

func (c *Client) loadKey() error {
	key := c.cfg.Key
	if key == nil && c.cfg.KeyFile != "" {
		k, err := auth.LoadPrivateKey(c.cfg.KeyFile)
		if err != nil {
			return fmt.Errorf("hero: actor %d's key: %w", c.cfg.Actor, err)
		}
		key = k
	}
	if key == nil {
		return nil
	}
	if c.cfg.Actor == 0 {
		return errors.New("hero: a key needs Config.Actor, the actor it belongs to")
	}
	c.signer = &auth.Signer{Actor: c.cfg.Actor, Key: key}
	return nil
}

// bearer sends an operator secret (and the actor acted for) with every call.
func bearer(secret string, actor uint32) []grpc.DialOption {
	md := []string{"authorization", "Bearer " + secret}
	if actor != 0 {
		md = append(md, auth.MetadataActor, strconv.FormatUint(uint64(actor), 10))
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return inv(metadata.AppendToOutgoingContext(ctx, md...), method, req, reply, cc, o...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, d *grpc.StreamDesc, cc *grpc.ClientConn, method string, st grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
			return st(metadata.AppendToOutgoingContext(ctx, md...), d, cc, method, o...)
		}),
	}
}

// Close closes the connections.
func (c *Client) Close() error {
	if c.streams != nil {
		c.streams.close()
	}
	c.httpClient.CloseIdleConnections()
	return c.cc.Close()
}

// Context is the context the client works in.
func (c *Client) Context() uint32 { return c.cfg.Context }

// Actor is the actor the client acts as (0 for an operator acting for nobody).
func (c *Client) Actor() uint32 { return c.cfg.Actor }

// API is the generated gRPC client on the same signed connection, for the calls this
// package does not wrap (actors, contexts, runners, the dead-letter queue, …).
func (c *Client) API() herov1.CoordinatorClient { return c.api }

// Dispatcher is the Hero Dispatcher API (operator secret) on the same connection.
func (c *Client) Dispatcher() herov1.DispatcherClient { return herov1.NewDispatcherClient(c.cc) }

// callCtx bounds a call by the configured timeout unless ctx has a deadline.
func (c *Client) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.CallTimeout)
}

// idempotentCalls may be sent again after a transient fault: reads, waits, and
// changes that a second time leave as the first did.
var idempotentCalls = map[string]bool{
	"GetActor": true, "GetContext": true, "GetRunner": true, "ListRunners": true, "GetJob": true, "ListJobs": true,
	"GetJobLogs": true, "GetFlow": true, "ListFlows": true, "GetFlowDag": true, "WaitFlow": true, "StartFlow": true,
	"CancelFlow": true, "ListDLQ": true, "ShowDLQ": true, "GetMessage": true, "ReadEvents": true, "ListOperatorSecrets": true,
	"JobStatus": true, "JobLogs": true, "CheckJobs": true,
}

// Retryable says whether a call that failed with err may be sent again: the server (or
// its Redis) was briefly unavailable, or the caller was rate limited — over gRPC or
// JSON-RPC (Call). A TLS handshake that failed for good (ErrTLS) is not.
func Retryable(err error) bool {
	if tlsRefused(err) {
		return false
	}
	var re *RPCError
	if errors.As(err, &re) {
		return re.Code == rpcUnavailable || re.Code == rpcTooMany
	}
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.ResourceExhausted
}

// retryUnary retries an idempotent call on a transient fault, and any call the
// server refused before doing anything (rate limited: ResourceExhausted with a retry
// hint), with backoff from 100 ms to 2 s (or the server's retry hint), until the call's
// deadline.
func (c *Client) retryUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	again := idempotentCalls[path.Base(method)] || ctx.Value(retryableKey{}) != nil
	return c.retrying(ctx, again, func() error { return invoker(ctx, method, req, reply, cc, opts...) })
}

// retrying makes call until it succeeds or fails for good: again says it may be sent
// again after a transient fault; a refusal with a retry hint is always sent again.
// With Config.FailFastUnreachable, an API that was never reached and cannot be
// (Unreachable) is not tried again.
func (c *Client) retrying(ctx context.Context, again bool, call func() error) error {
	return c.retryingUntil(ctx, time.Time{}, again, call)
}

// retryingUntil is retrying with a deadline besides ctx's (until; zero: none): no try
// starts, and no wait for one, beyond it.
func (c *Client) retryingUntil(ctx context.Context, until time.Time, again bool, call func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := call()
		unreachable := Unreachable(err)
		if !unreachable {
			c.reached.Store(true)
		}
		if err == nil || !(again && Retryable(err) || refusedUntil(err)) {
			return err
		}
		if unreachable && c.cfg.FailFastUnreachable && !c.reached.Load() {
			return err
		}
		wait := retryDelay(err, backoff)
		dl, ok := ctx.Deadline()
		if !until.IsZero() && (!ok || until.Before(dl)) {
			dl, ok = until, true
		}
		if ok && time.Until(dl) < wait {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// refusedUntil says whether the server refused the call before doing anything and
// said when to try again (its rate limit: ResourceExhausted with a RetryInfo, or
// JSON-RPC's -32029 with data.retry_after_ms): safe to send again whatever the call, a
// creation too.
func refusedUntil(err error) bool {
	var re *RPCError
	if errors.As(err, &re) {
		_, hinted := re.retryAfter()
		return re.Code == rpcTooMany && hinted
	}
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted {
		return false
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// retryDelay is the server's retry hint, else the backoff.
func retryDelay(err error, backoff time.Duration) time.Duration {
	var re *RPCError
	if errors.As(err, &re) {
		if d, ok := re.retryAfter(); ok {
			return d
		}
		return backoff
	}
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			return ri.RetryDelay.AsDuration()
		}
	}
	return backoff
}

// typedErrors turns a call's gRPC status into an *Error.
func typedErrors(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return wrap(invoker(ctx, method, req, reply, cc, opts...))
}
