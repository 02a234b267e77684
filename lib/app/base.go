package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/grpcx"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/tlsx"
)

// Base is what every service has: the store, the gRPC server, the admin server and a
// run group. Services add their own actors and then call Run.
type Base struct {
	Env      *Env
	Store    *store.Store
	GRPC     *grpcx.Server
	Admin    *obs.AdminServer
	AdminMux *http.ServeMux
	// APITLS is the public API's server TLS (supervisor-daemon), nil when off.
	APITLS *tls.Config
	// TLSMetrics tracks the expiry of the certificates the process presents.
	TLSMetrics *tlsx.Metrics

	cfg   *config.Common
	group Group
	addrs map[string]string // more listeners, logged in the "started" line
}

// Serving says whom a service's gRPC server serves.
type Serving struct {
	// API marks the public API (supervisor-daemon): TLS from APITLS when set, and
	// callers authenticate per request (signatures, secrets), not with certificates.
	API    bool
	APITLS tlsx.Files
	// Peers are, by full method name, the services an internal server accepts calls
	// of that method from when mutual TLS is on ("operator", people's tools, always
	// is; grpcx.Options.Peers).
	Peers map[string][]string
	// LoadsScripts marks the one service that loads the store's Redis functions
	// (supervisor-daemon, whose Redis user alone may: lib/store, script.go); every
	// other one waits for them before it starts.
	LoadsScripts bool
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

// secretFile reads the secret in the file that flag --name names, without its
// surrounding white space ("" when no file is named).
func secretFile(name, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %v", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// NewBase connects to Redis and binds the gRPC and admin ports, so that an
// unreachable Redis or a port in use is an error before anything runs.
func NewBase(ctx context.Context, env *Env, c *config.Common, sv Serving, grpcOpts ...grpc.ServerOption) (*Base, error) {
	b := &Base{Env: env, cfg: c, TLSMetrics: tlsx.NewMetrics(env.Registry)}
	var redisTLS *tls.Config
	var err error
	if c.RedisTLS.Enabled() {
		if redisTLS, err = tlsx.ClientConfig(c.RedisTLS, "", "redis", b.TLSMetrics); err != nil {
			return nil, err
		}
	}
	password, err := secretFile("redis-password-file", c.RedisPasswordFile)
	if err != nil {
		return nil, err
	}
	sentinelPassword, err := secretFile("redis-sentinel-password-file", c.RedisSentinelPasswordFile)
	if err != nil {
		return nil, err
	}
	warnFileLimit(env, c, sv.API)
	opt := grpcx.Options{MaxConns: c.MaxConnections, MaxConnsPerSource: c.MaxConnectionsPerSource, HandshakeTimeout: c.HandshakeTimeout}
	switch {
	case sv.API && sv.APITLS.Cert != "":
		if b.APITLS, err = tlsx.ServerConfig(sv.APITLS, false, "api", b.TLSMetrics); err != nil {
			return nil, err
		}
		opt.TLS = b.APITLS
	case sv.API:
		env.Log.Warn().Msg("the public API serves without TLS (--api-tls-cert): requests and operator secrets cross the network in clear")
	case c.TLS.Enabled():
		if opt.TLS, err = tlsx.ServerConfig(c.TLS, true, "internal", b.TLSMetrics); err != nil {
			return nil, err
		}
		opt.Peers = sv.Peers
	default:
		env.Log.Warn().Msg("internal gRPC without mutual TLS (--tls-ca, --tls-cert, --tls-key): anyone who reaches this port can call it")
	}
	b.Store, err = store.Open(ctx, store.Options{
		URL: c.RedisURL, Placement: c.RedisPlacement, PoolSize: c.RedisPoolSize,
		ConnectTimeout: c.RedisConnectTimeout, Log: env.Log, TLS: redisTLS, Password: password,
		SentinelPassword: sentinelPassword, WaitScripts: !sv.LoadsScripts,
	})
	if err != nil {
		return nil, err
	}
	if b.GRPC, err = grpcx.NewServer(c.GRPCAddr, env.Registry, env.Log, opt, grpcOpts...); err != nil {
		b.Store.Close()
		return nil, err
	}
	if b.Admin, b.AdminMux, err = obs.NewAdminServer(c.AdminAddr, env.Registry, env.Probe, env.Log, c.Pprof); err != nil {
		b.GRPC.Stop()
		b.Store.Close()
		return nil, err
	}
	env.Probe.AddCheck("redis", b.Store.Ping)
	if !sv.LoadsScripts {
		// Until supervisor-daemon of this version has loaded the store's functions, the
		// probes answer (/readyz: not ready, and what it waits for) and nothing runs.
		b.Admin.Start()
		if err := b.Store.WaitScripts(ctx, env.Probe.Starting); err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = b.Admin.Shutdown(sctx)
			cancel()
			b.GRPC.Stop()
			b.Store.Close()
			return nil, err
		}
	}
	b.group.AddContext(ctx)
	return b, nil
}

// warnFileLimit says at start when the process may open fewer files than its
// listeners' caps allow (Go has raised the soft limit to the hard one): a flood would
// then run it out of descriptors, Redis's connections and job files included, before
// the caps refuse anything.
func warnFileLimit(env *Env, c *config.Common, api bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if need := filesNeeded(c.MaxConnections, api); lim.Cur < need {
		env.Log.Warn().Uint64("open_files_limit", lim.Cur).Uint64("open_files_needed", need).
			Msg("the open-file limit is below what --max-connections allows on this process's listeners: raise it (ulimit -Hn, LimitNOFILE=, the container's nofile) or lower --max-connections")
	}
}

// filesNeeded is the open files a process's listeners may hold at their caps, with
// room for the admin port (256), Redis's pools and files; 0 without a cap.
func filesNeeded(maxConns int, api bool) uint64 {
	if maxConns <= 0 {
		return 0
	}
	listeners := uint64(1)
	if api {
		listeners = 2 // gRPC and JSON-RPC
	}
	return listeners*uint64(maxConns) + 512
}

// Dial connects to another service of the stack, by mutual TLS when it is configured
// (the server must prove it is that service).
func (b *Base) Dial(addr, service string) (*grpc.ClientConn, error) {
	var t *tls.Config
	if b.cfg.TLS.Enabled() {
		var err error
		if t, err = tlsx.ClientConfig(b.cfg.TLS, tlsx.ServiceName(service), "internal", b.TLSMetrics); err != nil {
			return nil, err
		}
	}
	return grpcx.Dial(addr, t)
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
