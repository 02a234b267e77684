package main

import (
	"context"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The gRPC side: authentication of every call (interceptors) and the coordinator
// server the API areas add their methods to.

type principalKey struct{}

// waitingCalls are the gRPC methods that wait (each holds one of the caller's waiting
// slots while it runs).
var waitingCalls = map[string]bool{
	"/hero.v1.Coordinator/RunJob": true, "/hero.v1.Coordinator/WaitFlow": true, "/hero.v1.Coordinator/Watch": true,
	"/hero.v1.Dispatcher/RunJob": true,
}

// authInterceptors authenticate every call of the public services (hero.v1) from its
// metadata and the digest of its request message as received (codec): the same check
// the JSON-RPC side makes, or a session signature of the call's TLS connection
// (hero-session). A stream is authenticated with its opening message.
func authInterceptors(a *authenticator, l *callerLimits, codec *auth.DigestCodec, m *apiMetrics) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	api := func(full string) bool { return strings.HasPrefix(full, "/hero.v1.") }
	check := func(ctx context.Context, full string, msg any) (context.Context, func(), credentials, error) {
		digest, ok := codec.TakeDigest(msg)
		if !ok {
			return nil, nil, credentials{}, status.Error(codes.Internal, "authentication: the request's digest is missing")
		}
		md, _ := metadata.FromIncomingContext(ctx)
		get := func(k string) string {
			if v := md.Get(k); len(v) > 0 {
				return v[0]
			}
			return ""
		}
		c := credentials{transport: "grpc", target: full, digest: digest, authorization: get("authorization"), session: get(auth.MetadataSession),
			signed: auth.Credentials{Actor: get(auth.MetadataActor), Timestamp: get(auth.MetadataTimestamp), Nonce: get(auth.MetadataNonce), Signature: get(auth.MetadataSignature)}}
		pr, _ := peer.FromContext(ctx)
		if pr != nil && pr.Addr != nil {
			c.peer = pr.Addr.String()
		}
		if c.session != "" {
			c.binding = bindingOf(pr)
		}
		p, err := a.authenticate(ctx, c)
		if err != nil {
			return nil, nil, c, grpcError(err)
		}
		ctx, tperr := withTraceparent(ctx, md.Get(model.TraceparentHeader))
		if tperr != nil {
			return nil, nil, c, grpcError(tperr)
		}
		if err := l.allow(p.key(), 1); err != nil {
			return nil, nil, c, grpcError(err)
		}
		release := func() {}
		if waitingCalls[full] {
			if release, err = l.wait(p.key()); err != nil {
				return nil, nil, c, grpcError(err)
			}
		}
		return context.WithValue(ctx, principalKey{}, p), release, c, nil
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		if !api(info.FullMethod) {
			codec.Forget(req)
			return handler(ctx, req)
		}
		start := time.Now()
		defer func() { m.observe("grpc", path.Base(info.FullMethod), status.Code(err).String(), start) }()
		ctx, release, _, err := check(ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		if !api(info.FullMethod) {
			return handler(srv, ss)
		}
		if !itemStreams[info.FullMethod] { // those observe each item instead
			start := time.Now()
			defer func() { m.observe("grpc", path.Base(info.FullMethod), status.Code(err).String(), start) }()
		}
		ws := &authStream{ServerStream: ss, codec: codec, open: func(ctx context.Context, msg any) (context.Context, func(), error) {
			return openAuthStream(ctx, a, info.FullMethod, msg, check)
		}}
		ws.ctx.Store(ss.Context())
		defer ws.release()
		return handler(srv, ws)
	}
	return unary, stream
}

// openAuthStream authenticates a stream's opening message (check) and registers the
// stream with the authenticator, which ends its context when its caller's rights
// change (revoke.go).
func openAuthStream(ctx context.Context, a *authenticator, full string, msg any,
	check func(ctx context.Context, full string, msg any) (context.Context, func(), credentials, error)) (context.Context, func(), error) {
	seen := a.streams.changes.Load()
	ctx, release, c, err := check(ctx, full, msg)
	if err != nil {
		return nil, nil, err
	}
	ctx, s, remove := a.streams.add(ctx, principal(ctx), c)
	if a.streams.changes.Load() != seen {
		// A change was told while the stream was being authenticated: it may have
		// been checked against what the change replaced.
		a.recheck("a change during the stream's opening", []*openStream{s})
	}
	return ctx, func() { remove(); release() }, nil
}

// bindingOf is what binds a session signature to the call's connection: the TLS
// exporter value of the connection the call came on.
func bindingOf(pr *peer.Peer) connBinding {
	if pr == nil {
		return connBinding{}
	}
	ekm, isTLS, err := auth.ConnExporter(pr.AuthInfo)
	if !isTLS {
		return connBinding{}
	}
	return connBinding{tls: true, exporter: ekm, err: err}
}

// authStream authenticates a stream on its opening message; later messages only
// have their digests dropped. Its context, from the opening on, carries the principal
// and ends when the caller's rights are revoked (streamRevoked). Its messages may be
// received in another goroutine than the handler's (SubmitJobStream).
type authStream struct {
	grpc.ServerStream
	ctx    atomic.Value // context.Context
	codec  *auth.DigestCodec
	open   func(ctx context.Context, msg any) (context.Context, func(), error)
	opened bool // by the receiving goroutine only

	mu       sync.Mutex
	released func() // what the opening holds (its registration, a waiting slot)
	ended    bool   // the handler returned
}

func (s *authStream) Context() context.Context { return s.ctx.Load().(context.Context) }

func (s *authStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.opened {
		s.codec.Forget(m)
		return nil
	}
	ctx, release, err := s.open(s.Context(), m)
	if err != nil {
		return err
	}
	s.mu.Lock()
	ended := s.ended
	if !ended {
		s.released = release
	}
	s.mu.Unlock()
	if ended { // the handler gave up meanwhile
		release()
		return status.Error(codes.Canceled, "the stream has ended")
	}
	s.opened = true
	s.ctx.Store(ctx)
	return nil
}

// release lets go of what the opening holds, once the handler has returned.
func (s *authStream) release() {
	s.mu.Lock()
	r := s.released
	s.released, s.ended = nil, true
	s.mu.Unlock()
	if r != nil {
		r()
	}
}

func principal(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// coordinatorServer serves hero.v1.Coordinator on top of the service.
type coordinatorServer struct {
	herov1.UnimplementedCoordinatorServer
	s      *service
	limits *callerLimits // each item of a SubmitJobStream after its opening one
	// batches observes the items of each batch message of a SubmitJobStream, by
	// direction ("received", "sent"); nil: not observed
	batches *prometheus.HistogramVec
}

func call[R any](ctx context.Context, fn func(context.Context, Principal) (R, error)) (R, error) {
	r, err := fn(ctx, principal(ctx))
	if err != nil {
		var zero R
		return zero, grpcError(err)
	}
	return r, nil
}
