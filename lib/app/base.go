package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/grpcx"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/store"
)

// Base is what every service has: the store, the gRPC server, the admin server and a
// run group. Services add their own actors and then call Run.
type Base struct {
	Env      *Env
	Store    *store.Store
	GRPC     *grpcx.Server
	Admin    *obs.AdminServer
	AdminMux *http.ServeMux
	TLS      *tls.Config

	cfg   *config.Common
	group Group
	addrs map[string]string // more listeners, logged in the "started" line
}

// AddListener registers another server of the service (e.g. the JSON-RPC HTTP server):
// its bound address is logged in the "started" line as <name>_addr.
func (b *Base) AddListener(name, addr string, serve func() error, shutdown func(context.Context) error) {
	if b.addrs == nil {
		b.addrs = map[string]string{}
	}
	b.addrs[name+"_addr"] = addr
	b.group.Add(name, serve, func(error) {
		b.Env.Probe.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ShutdownTimeout)
		defer cancel()
		_ = shutdown(ctx)
	})
}

// NewBase connects to Redis and binds the gRPC and admin ports, so that an
// unreachable Redis or a port in use is an error before anything runs.
func NewBase(ctx context.Context, env *Env, c *config.Common, grpcOpts ...grpc.ServerOption) (*Base, error) {
	b := &Base{Env: env, cfg: c}
	var err error
	if b.TLS, err = ServerTLS(c); err != nil {
		return nil, err
	}
	b.Store, err = store.Open(ctx, store.Options{
		URL: c.RedisURL, Placement: c.RedisPlacement, PoolSize: c.RedisPoolSize,
		ConnectTimeout: c.RedisConnectTimeout, Log: env.Log,
	})
	if err != nil {
		return nil, err
	}
	if b.GRPC, err = grpcx.NewServer(c.GRPCAddr, env.Registry, env.Log, grpcx.Options{TLS: b.TLS, MaxConns: c.MaxConnections}, grpcOpts...); err != nil {
		b.Store.Close()
		return nil, err
	}
	if b.Admin, b.AdminMux, err = obs.NewAdminServer(c.AdminAddr, env.Registry, env.Probe, env.Log, b.TLS); err != nil {
		b.GRPC.Stop()
		b.Store.Close()
		return nil, err
	}
	env.Probe.AddCheck("redis", b.Store.Ping)
	b.group.AddContext(ctx)
	return b, nil
}

// Add registers a service actor (a worker loop, another server).
func (b *Base) Add(name string, execute func() error, interrupt func(error)) {
	b.group.Add(name, execute, interrupt)
}

// Run serves until SIGTERM (or an actor fails): readiness goes up once everything
// runs, down as soon as shutdown begins; the servers drain within the shutdown timeout.
func (b *Base) Run(services ...string) error {
	defer b.Store.Close()
	b.group.Add("grpc", b.GRPC.ListenAndServe, func(error) {
		b.Env.Probe.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ShutdownTimeout)
		defer cancel()
		b.GRPC.Shutdown(ctx)
	})
	b.group.Add("admin", b.Admin.ListenAndServe, func(error) {
		b.Env.Probe.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = b.Admin.Shutdown(ctx)
	})
	b.GRPC.SetServing(true, services...)
	b.Env.Probe.Ready()
	ev := b.Env.Log.Info().Str("grpc_addr", b.GRPC.Addr()).Str("admin_addr", b.Admin.Addr())
	for k, v := range b.addrs {
		ev = ev.Str(k, v)
	}
	ev.Msg("started")
	return b.group.Run()
}

// ServerTLS loads the servers' TLS settings (nil when TLS is off).
func ServerTLS(c *config.Common) (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("tls: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
