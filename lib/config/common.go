package config

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/tlsx"
)

// Common holds the settings every service has.
type Common struct {
	RedisURL            string
	RedisPlacement      string
	RedisConnectTimeout time.Duration
	RedisPoolSize       int
	GRPCAddr            string
	AdminAddr           string
	LogLevel            string
	LogFormat           string
	ShutdownTimeout     time.Duration
	TLS                 tlsx.Files // this service's identity inside the stack: mutual TLS
	RedisTLS            tlsx.Files // rediss://: the CA to verify Redis, a client certificate
	RedisPasswordFile   string
	// RedisSentinelPasswordFile holds the password of the Sentinels of a Sentinel URL.
	RedisSentinelPasswordFile string
	MaxConnections            int
	// MaxConnectionsPerSource caps one source address's open connections per
	// listener (netx.Source: an IPv4 address, an IPv6 /64).
	MaxConnectionsPerSource int
	// HandshakeTimeout bounds a new connection's TLS handshake and its first request
	// (JSON-RPC) or HTTP/2 preface (gRPC).
	HandshakeTimeout time.Duration
	Pprof            bool
}

// RegisterFlags adds the common flags with the service's default ports.
func (c *Common) RegisterFlags(f *FlagSet, grpcAddr, adminAddr string) {
	f.StringVar(&c.RedisURL, "redis-url", "", "redis://127.0.0.1:6379/0", "Redis server (redis:// or rediss:// for TLS; user:password@ for AUTH); holds DB 0 and, unless placed elsewhere, every context")
	f.StringVar(&c.RedisPlacement, "redis-placement", "", "", "place context ranges on other Redis servers: \"1-1000=redis://a:6379,1001-2000=redis://b:6379\" (the same map on every service; docs/architecture.md, Placement)")
	f.DurationVar(&c.RedisConnectTimeout, "redis-connect-timeout", "", 10*time.Second, "how long to wait for Redis at start before giving up")
	f.IntVar(&c.RedisPoolSize, "redis-pool-size", "", 32, "connections per Redis server and pool")
	f.StringVar(&c.GRPCAddr, "grpc-addr", "", grpcAddr, "gRPC listen address")
	f.StringVar(&c.AdminAddr, "admin-addr", "", adminAddr, "admin HTTP listen address (/metrics, /healthz, /readyz)")
	f.StringVar(&c.LogLevel, "log-level", "", "info", "log level: debug, info, warn, error")
	f.StringVar(&c.LogFormat, "log-format", "", "json", "log format: json or console")
	f.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", "", 10*time.Second, "how long in-flight work may take to finish after SIGTERM")
	f.StringVar(&c.TLS.CA, "tls-ca", "", "", "mutual TLS inside the stack: the internal CA (PEM) every peer's certificate chains to; with --tls-cert and --tls-key the gRPC server requires client certificates and internal clients present theirs (heroctl pki init makes them; plaintext when empty)")
	f.StringVar(&c.TLS.Cert, "tls-cert", "", "", "this service's certificate (PEM), naming it <service>.hero.internal; re-read when the file changes")
	f.StringVar(&c.TLS.Key, "tls-key", "", "", "the private key (PEM) of --tls-cert")
	f.StringVar(&c.RedisTLS.CA, "redis-tls-ca", "", "", "rediss://: the CA (PEM) that signs the Redis server's certificate (default: the system roots)")
	f.StringVar(&c.RedisTLS.Cert, "redis-tls-cert", "", "", "rediss://: a client certificate (PEM) for a Redis that requires one")
	f.StringVar(&c.RedisTLS.Key, "redis-tls-key", "", "", "rediss://: the private key (PEM) of --redis-tls-cert")
	f.StringVar(&c.RedisPasswordFile, "redis-password-file", "", "", "a file holding the Redis password (the user comes from --redis-url, redis://USER@host); overrides a password in the URL, so that none needs to be on a command line or in the environment")
	f.StringVar(&c.RedisSentinelPasswordFile, "redis-sentinel-password-file", "", "", "a file holding the password of the Redis Sentinels of a Sentinel URL (their requirepass; the user, when they have ACL users, from the URL's sentinel_user=); the master's is --redis-password-file")
	f.BoolVar(&c.Pprof, "pprof", "", false, "serve /debug/pprof/ on the admin port (profiles only; never the command line)")
	f.IntVar(&c.MaxConnections, "max-connections", "", 4096, "most open connections per listener (gRPC; and JSON-RPC on supervisor-daemon); over it new ones are refused at once while open ones are served (0: no cap)")
	f.IntVar(&c.MaxConnectionsPerSource, "max-connections-per-source", "", 256, "most open connections per listener from one source address (an IPv4 address, an IPv6 /64), so that one client cannot hold every slot; behind a proxy or NAT that hides clients' addresses raise it (0: no cap)")
	f.DurationVar(&c.HandshakeTimeout, "handshake-timeout", "", 10*time.Second, "a new connection must finish its TLS handshake and send its HTTP/2 preface (gRPC) or its first request's headers (JSON-RPC) within this, else it is closed")
}

// Validate checks the common settings.
func (c *Common) Validate() error {
	if err := ValidateRedisURL("redis-url", c.RedisURL); err != nil {
		return err
	}
	if err := ValidateListenAddr("grpc-addr", c.GRPCAddr); err != nil {
		return err
	}
	if err := ValidateListenAddr("admin-addr", c.AdminAddr); err != nil {
		return err
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", c.LogLevel)
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		return fmt.Errorf("--log-format: %q is not json or console", c.LogFormat)
	}
	if c.RedisConnectTimeout <= 0 {
		return fmt.Errorf("--redis-connect-timeout: must be positive")
	}
	if c.RedisPoolSize < 2 {
		return fmt.Errorf("--redis-pool-size: must be at least 2")
	}
	if c.MaxConnections < 0 {
		return fmt.Errorf("--max-connections: must not be negative")
	}
	if c.MaxConnectionsPerSource < 0 {
		return fmt.Errorf("--max-connections-per-source: must not be negative")
	}
	if c.HandshakeTimeout <= 0 {
		return fmt.Errorf("--handshake-timeout: must be positive")
	}
	if err := c.TLS.Validate("tls", true); err != nil {
		return err
	}
	if err := c.RedisTLS.Validate("redis-tls", false); err != nil {
		return err
	}
	if c.RedisTLS.Enabled() && !strings.HasPrefix(c.RedisURL, "rediss://") {
		return fmt.Errorf("--redis-tls-ca/--redis-tls-cert need a rediss:// --redis-url")
	}
	if c.RedisPasswordFile != "" {
		if _, err := os.Stat(c.RedisPasswordFile); err != nil {
			return fmt.Errorf("--redis-password-file: %v", err)
		}
	}
	if c.RedisSentinelPasswordFile != "" {
		if _, err := os.Stat(c.RedisSentinelPasswordFile); err != nil {
			return fmt.Errorf("--redis-sentinel-password-file: %v", err)
		}
		if !strings.Contains(c.RedisURL+" "+c.RedisPlacement, "master_name=") {
			return fmt.Errorf("--redis-sentinel-password-file: neither --redis-url nor --redis-placement names a Sentinel-managed master (?master_name=)")
		}
	}
	return nil
}

// ValidateListenAddr checks a host:port listen address.
func ValidateListenAddr(flagName, addr string) error {
	if addr == "" {
		return fmt.Errorf("--%s: must not be empty", flagName)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--%s: %q is not host:port", flagName, addr)
	}
	return nil
}

// ValidateDialAddr checks a host:port address to connect to.
func ValidateDialAddr(flagName, addr string) error {
	h, p, err := net.SplitHostPort(addr)
	if err != nil || h == "" || p == "" {
		return fmt.Errorf("--%s: %q is not host:port", flagName, addr)
	}
	return nil
}

// ValidateDialTarget checks an address of a service that may run as several
// replicas: host:port (every address the name resolves to), dns:///host:port, or a
// comma-separated list of host:port.
func ValidateDialTarget(flagName, target string) error {
	if rest, ok := strings.CutPrefix(target, "dns:///"); ok {
		if err := ValidateDialAddr(flagName, rest); err != nil {
			return fmt.Errorf("--%s: %q is not dns:///host:port", flagName, target)
		}
		return nil
	}
	for _, a := range strings.Split(target, ",") {
		if err := ValidateDialAddr(flagName, strings.TrimSpace(a)); err != nil {
			return fmt.Errorf("--%s: %q is not host:port, dns:///host:port or a comma-separated list of host:port", flagName, target)
		}
	}
	return nil
}

// ValidateRedisURL checks that s is a redis:// or rediss:// URL.
func ValidateRedisURL(flagName, s string) error {
	if !strings.HasPrefix(s, "redis://") && !strings.HasPrefix(s, "rediss://") && !strings.HasPrefix(s, "unix://") {
		return fmt.Errorf("--%s: %q is not a redis://, rediss:// or unix:// URL", flagName, RedactURL(s))
	}
	return nil
}

// RedactURL hides a password in a URL for logs and errors.
func RedactURL(s string) string {
	at := strings.LastIndex(s, "@")
	scheme := strings.Index(s, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return s
	}
	cred := s[scheme+3 : at]
	if i := strings.Index(cred, ":"); i >= 0 {
		cred = cred[:i+1] + "xxxxx"
	} else {
		cred = "xxxxx"
	}
	return s[:scheme+3] + cred + s[at:]
}
