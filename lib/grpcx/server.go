// Package grpcx wraps a gRPC server the same way for every service: health and
// reflection registered, metrics, logging and panic-recovery interceptors, TLS when
// configured, and ListenAndServe/Shutdown for the service's run group.
package grpcx

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/netx"
	"github.com/hero-coordinator/hero/lib/tlsx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// Server is a gRPC server bound to its address.
type Server struct {
	*grpc.Server
	ln     net.Listener
	health *health.Server
	log    zerolog.Logger
}

type metrics struct {
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// byMethod: full method name -> *methodSeries, the series of its successful
	// calls resolved once (a lookup by label values on every call was ~1% of an
	// API server's CPU).
	byMethod sync.Map
}

type methodSeries struct {
	ok       prometheus.Counter
	duration prometheus.Observer
}

// observe counts a call of fullMethod that ended with err after d.
func (m *metrics) observe(fullMethod string, err error, d time.Duration) {
	v, ok := m.byMethod.Load(fullMethod)
	if !ok {
		method := shortMethod(fullMethod)
		v, _ = m.byMethod.LoadOrStore(fullMethod, &methodSeries{ok: m.handled.WithLabelValues(method, codes.OK.String()), duration: m.duration.WithLabelValues(method)})
	}
	ms := v.(*methodSeries)
	if code := status.Code(err); code == codes.OK {
		ms.ok.Inc()
	} else {
		m.handled.WithLabelValues(shortMethod(fullMethod), code.String()).Inc()
	}
	ms.duration.Observe(d.Seconds())
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		handled: f.NewCounterVec(prometheus.CounterOpts{
			Name: "hero_grpc_server_handled_total",
			Help: "gRPC calls completed by the server, by method and status code.",
		}, []string{"method", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hero_grpc_server_handling_seconds",
			Help:    "Time the server took to handle gRPC calls, by method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"method"}),
	}
}

// Options are a server's transport settings and limits.
type Options struct {
	TLS *tls.Config // nil: plaintext
	// MaxConns caps open connections, MaxConnsPerSource those of one source address
	// (netx.Source): over either a new connection is closed at once while the
	// accepted ones are served (0: no cap).
	MaxConns          int
	MaxConnsPerSource int
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2 preface:
	// one that has not finished them by then is closed (0: 10 s).
	HandshakeTimeout time.Duration
	// MaxStreams caps concurrent calls per connection (0: 1000).
	MaxStreams uint32
	// Peers, with mutual TLS, are the services (named by their certificates,
	// tlsx.ServiceName) whose calls each method accepts, by full method name
	// ("/hero.v1.Scheduler/JobsDone"): a service has no reason to call the others. A
	// method not named accepts none; "operator" is accepted everywhere. Health and
	// reflection answer any verified peer. nil: no check.
	Peers map[string][]string
}

// Keepalive limits every server applies: clients may ping at most every 10 s (more
// often gets the connection closed), an idle connection is closed after 5 minutes, a
// silent one is probed each minute and dropped 20 s after an unanswered ping, and a
// connection must finish its handshake within Options.HandshakeTimeout (10 s).
const (
	keepaliveMinPing  = 10 * time.Second
	keepaliveMaxIdle  = 5 * time.Minute
	keepaliveProbe    = time.Minute
	keepaliveTimeout  = 20 * time.Second
	handshakeTimeout  = 10 * time.Second
	defaultMaxStreams = 1000
	// streamWorkers is the goroutines that run calls (grpc.NumStreamWorkers): a call
	// that finds them all busy runs on a new goroutine.
	streamWorkers = 128
)

// StreamWindow and ConnWindow are the HTTP/2 flow-control windows of every server
// and client of the stack (a stream's, a connection's): fixed, as large as gRPC's own
// estimate could grow them for these messages. Without them gRPC estimates the
// bandwidth-delay product, which costs a PING and a WINDOW_UPDATE from the receiving
// end, each a write of its own (a TLS record, a system call), for about every message
// of a stream of small ones (a SubmitJobStream's submissions and answers).
const (
	StreamWindow = 1 << 20
	ConnWindow   = 4 << 20
)

// WindowDialOptions are a client's flow-control windows (StreamWindow, ConnWindow).
func WindowDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(StreamWindow), grpc.WithInitialConnWindowSize(ConnWindow)}
}

// NewServer binds addr at once (a port in use is an error at start) and returns a
// server with health and reflection registered.
func NewServer(addr string, reg prometheus.Registerer, log zerolog.Logger, o Options, extra ...grpc.ServerOption) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("grpc server: %w", err)
	}
	m := newMetrics(reg)
	refused, err := netx.Refused(reg, "grpc")
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("grpc server: %w", err)
	}
	ln = netx.Limit(ln, netx.Options{Max: o.MaxConns, PerSource: o.MaxConnsPerSource, OnReject: refused})
	if o.MaxStreams == 0 {
		o.MaxStreams = defaultMaxStreams
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = handshakeTimeout
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unaryInterceptor(m, log)),
		grpc.ChainStreamInterceptor(streamInterceptor(m, log)),
		// Calls run on reused goroutines (a new one only when all are busy): a new
		// goroutine per call, whose stack then grows, was a tenth of the scheduler's
		// CPU under a stream of JobsDone calls, and 8% of supervisor-daemon's under
		// job.submit from 32 producers, whose calls each wait on their group's
		// store call: as many workers as calls that wait so at once.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.MaxConcurrentStreams(o.MaxStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinPing, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: keepaliveMaxIdle, Time: keepaliveProbe, Timeout: keepaliveTimeout}),
		grpc.ConnectionTimeout(o.HandshakeTimeout),
		grpc.InitialWindowSize(StreamWindow),
		grpc.InitialConnWindowSize(ConnWindow),
	}
	if o.TLS != nil {
		// Each connection's TLS exporter value is derived at its handshake, for the
		// session signatures of the public API (auth.ExportingTLS).
		opts = append(opts, grpc.Creds(auth.ExportingTLS(credentials.NewTLS(o.TLS))))
	}
	if o.Peers != nil {
		check := peerCheck(o.Peers, log)
		opts = append(opts,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := check(ctx, info.FullMethod); err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if err := check(ss.Context(), info.FullMethod); err != nil {
					return err
				}
				return h(srv, ss)
			}))
	}
	s := grpc.NewServer(append(opts, extra...)...)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s, h)
	reflection.Register(s)
	return &Server{Server: s, ln: ln, health: h, log: log}, nil
}

// Addr returns the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SetServing flips the gRPC health status of the server ("") and the named services.
func (s *Server) SetServing(serving bool, services ...string) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range append([]string{""}, services...) {
		s.health.SetServingStatus(name, st)
	}
}

// ListenAndServe serves until Shutdown.
func (s *Server) ListenAndServe() error {
	s.log.Info().Str("addr", s.Addr()).Msg("grpc server listening")
	if err := s.Serve(s.ln); err != nil && err != grpc.ErrServerStopped {
		return fmt.Errorf("grpc server: %w", err)
	}
	return nil
}

// Shutdown reports NOT_SERVING, then stops gracefully, forcing after ctx ends.
func (s *Server) Shutdown(ctx context.Context) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.Stop()
	}
}

// peerCheck admits a call when its peer's verified certificate names a service the
// method allows (or the operator); every refusal is logged with the peer and the
// method.
func peerCheck(allowed map[string][]string, log zerolog.Logger) func(ctx context.Context, full string) error {
	ok := map[string]map[string]bool{}
	for method, services := range allowed {
		ok[method] = map[string]bool{}
		for _, s := range services {
			ok[method][s] = true
		}
	}
	return func(ctx context.Context, full string) error {
		p, _ := peer.FromContext(ctx)
		var svc string
		if p != nil {
			if ti, isTLS := auth.TLSInfoOf(p.AuthInfo); isTLS {
				svc = tlsx.PeerService(ti.State)
			}
		}
		if svc != "" && (svc == "operator" || ok[full][svc] || strings.HasPrefix(full, "/grpc.health.v1.") || strings.HasPrefix(full, "/grpc.reflection.")) {
			return nil
		}
		addr := ""
		if p != nil && p.Addr != nil {
			addr = p.Addr.String()
		}
		log.Warn().Str("peer", addr).Str("peer_service", svc).Str("method", full).Msg("internal call refused: the caller's certificate names no service allowed to call this method")
		if svc == "" {
			return status.Error(codes.Unauthenticated, "the client certificate names no service of the stack")
		}
		return status.Errorf(codes.PermissionDenied, "%s may not call %s", svc, full)
	}
}

func shortMethod(full string) string {
	if i := strings.LastIndex(full, "/"); i >= 0 {
		return full[i+1:]
	}
	return full
}

func unaryInterceptor(m *metrics, log zerolog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		start := time.Now()
		defer func() {
			if r := recover(); r != nil {
				log.Error().Str("method", info.FullMethod).Interface("panic", r).Str("stack", string(debug.Stack())).Msg("grpc handler panicked")
				err = status.Error(codes.Internal, "internal error")
			}
			m.observe(info.FullMethod, err, time.Since(start))
			if err != nil && status.Code(err) == codes.Internal {
				log.Error().Str("method", info.FullMethod).Err(err).Msg("grpc call failed")
			}
		}()
		return handler(ctx, req)
	}
}

func streamInterceptor(m *metrics, log zerolog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		start := time.Now()
		defer func() {
			if r := recover(); r != nil {
				log.Error().Str("method", info.FullMethod).Interface("panic", r).Str("stack", string(debug.Stack())).Msg("grpc stream handler panicked")
				err = status.Error(codes.Internal, "internal error")
			}
			m.observe(info.FullMethod, err, time.Since(start))
		}()
		return handler(srv, ss)
	}
}

// serviceConfig spreads calls over every address of a target (round_robin) and
// sends them only to addresses whose server reports SERVING on the standard health
// service (grpc.health.v1, the server as a whole: ""): a replica that is shutting
// down, or not up yet, gets none, and one that died is left out as soon as its
// connection breaks.
const serviceConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`

// listScheme names the resolver of a comma-separated list of addresses.
const listScheme = "hero-list"

// Dial returns a client connection (lazy: it connects on first use and reconnects)
// to every replica a target names: "host:port" (every address the name resolves to),
// "dns:///host:port" (the same, spelled out: a headless Service's name gives each
// ready pod) or "a:1,b:2,…" (these addresses). Calls go round robin to the replicas
// that are healthy (serviceConfig); a replica that dies is skipped at once.
func Dial(target string, tlsConf *tls.Config) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if tlsConf != nil {
		creds = credentials.NewTLS(tlsConf)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(serviceConfig),
		// A replica whose machine vanished (no FIN, no RST) is found out by a ping
		// within 15 s, not by the kernel's TCP timeout; servers allow a ping every
		// 10 s (keepaliveMinPing).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveMinPing, Timeout: 5 * time.Second, PermitWithoutStream: true}),
	}
	opts = append(opts, WindowDialOptions()...)
	dialTarget := target
	if strings.Contains(target, ",") {
		var addrs []resolver.Address
		for _, a := range strings.Split(target, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, resolver.Address{Addr: a})
			}
		}
		r := manual.NewBuilderWithScheme(listScheme)
		r.InitialState(resolver.State{Addresses: addrs})
		opts = append(opts, grpc.WithResolvers(r))
		dialTarget = listScheme + ":///" + addrs[0].Addr
	}
	cc, err := grpc.NewClient(dialTarget, opts...)
	if err != nil {
		return nil, fmt.Errorf("grpc client for %s: %w", target, err)
	}
	return cc, nil
}
