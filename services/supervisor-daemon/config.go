package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/dispatcher"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/tlsx"
)

// Config is the supervisor-daemon's configuration.
type Config struct {
	config.Common
	HTTPAddr        string
	SchedulerAddr   string
	AdminSecret     string
	AdminSecretFile string
	// OperatorSecretKeyFile holds the operator secrets' HMAC key (operatorkey.go).
	OperatorSecretKeyFile string
	RunMargin             time.Duration
	MaxBodyBytes          int
	Dispatcher            dispatcher.ClientConfig

	APITLS             tlsx.Files
	AuthWindow         time.Duration
	AuthSessionRecheck time.Duration
	AuthDevTrustHeader bool

	HTTPReadTimeout  time.Duration
	HTTPWriteTimeout time.Duration
	HTTPIdleTimeout  time.Duration
	MaxBatch         int
	RateLimit        float64
	RateBurst        int
	MaxWaits         int
	MaxFlowJobs      int
	SubmitInflight   int

	Console           bool
	ConsoleReadOnly   bool
	ConsoleSessionTTL time.Duration
}

// RegisterFlags adds every flag.
func (c *Config) RegisterFlags(f *config.FlagSet) {
	c.Common.RegisterFlags(f, ":9653", ":9660")
	c.Dispatcher.RegisterFlags(f)
	f.StringVar(&c.HTTPAddr, "http-addr", "", ":9652", "JSON-RPC 2.0 API listen address (POST /)")
	f.StringVar(&c.SchedulerAddr, "scheduler-addr", "", "127.0.0.1:9654", "scheduler gRPC address: host:port (every address the name resolves to), dns:///host:port, or a comma-separated list of host:port; calls go round robin to the replicas whose gRPC health is SERVING")
	f.StringVar(&c.AdminSecret, "admin-secret", "HERO_ADMIN_SECRET", "", "operator secret(s), comma-separated, each at least 16 characters (prefer --admin-secret-file: a command line and an environment are visible to more than a file)")
	f.StringVar(&c.AdminSecretFile, "admin-secret-file", "HERO_ADMIN_SECRET_FILE", "", "file of operator secrets, one per line; when no secret is configured anywhere and none is stored yet, one is generated into this file (mode 0600)")
	f.StringVar(&c.OperatorSecretKeyFile, "operator-secret-key-file", "OPERATOR_SECRET_KEY_FILE", "", "file of the HMAC key under which operator secrets are stored (heroctl pki init makes it, operator-secret-key; made here, mode 0600, when there is none; a key kept in Redis by an earlier version is moved into it); empty: the key is kept in Redis")
	f.StringVar(&c.APITLS.Cert, "api-tls-cert", "", "", "TLS certificate (PEM) of the public API, JSON-RPC and gRPC (heroctl pki init makes one, api.pem); plaintext when empty")
	f.StringVar(&c.APITLS.Key, "api-tls-key", "", "", "the private key (PEM) of --api-tls-cert")
	f.DurationVar(&c.AuthWindow, "auth-window", "", 5*time.Minute, "a signed request's timestamp may be this far from the server's clock; its nonce is remembered twice as long")
	f.DurationVar(&c.AuthSessionRecheck, "auth-session-recheck", "", 30*time.Second, "a gRPC session signature (hero-session, one per TLS connection) verified on a connection is taken without a new check for this long, unless a change of the actor (actor.update) drops it first; open streams are checked again at this interval too, so a change no notice tells (an actor removed from Redis by hand) takes effect within it")
	f.BoolVar(&c.AuthDevTrustHeader, "auth-dev-trust-actor-header", "HERO_AUTH_DEV_TRUST_ACTOR_HEADER", false, "DEVELOPMENT ONLY: trust a bare X-Hero-Actor header without a signature (anyone reaching the API can act as any actor)")
	f.DurationVar(&c.HTTPReadTimeout, "http-read-timeout", "", 30*time.Second, "JSON-RPC: time to read a request's headers and body")
	f.DurationVar(&c.HTTPWriteTimeout, "http-write-timeout", "", 60*time.Second, "JSON-RPC: time to handle a request and write its answer (job.run, flow.wait and dispatcher.run_job are bounded by their own timeouts instead)")
	f.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", "", 60*time.Second, "JSON-RPC: an idle keep-alive connection is closed after this")
	f.IntVar(&c.MaxBatch, "max-batch", "", 1000, "most requests in one JSON-RPC batch")
	f.Float64Var(&c.RateLimit, "rate-limit", "", 1000, "calls per second each actor (or operator secret) may make, per replica; a batch counts each call (0: no limit)")
	f.IntVar(&c.RateBurst, "rate-burst", "", 2000, "calls an actor may make at once above --rate-limit (at least --max-batch)")
	f.IntVar(&c.MaxWaits, "max-waits-per-caller", "", 100, "waiting calls (job.run, flow.wait, Watch, dispatcher.run_job) one actor may hold open at once, per replica (0: no cap)")
	f.DurationVar(&c.RunMargin, "run-margin", "", 30*time.Second, "job.run waits the job's timeout plus this margin when no timeout is given")
	f.IntVar(&c.MaxFlowJobs, "max-flow-jobs", "", model.DefaultMaxFlowJobs, fmt.Sprintf("most jobs of one flow (flow.begin, flow.create), checked before anything of the flow is stored; at most %d", model.MaxFlowJobs))
	f.IntVar(&c.SubmitInflight, "submit-inflight", "", submitInflight, "groups of the group commit of single submissions (job.submit, job.run, SubmitJobStream) stored at once per Redis server, 1 to 16: the next group's call is sent while Redis runs the previous one")
	f.IntVar(&c.MaxBodyBytes, "max-body-bytes", "", 4<<20, "largest JSON-RPC request body accepted")
	f.BoolVar(&c.Console, "console", "HERO_CONSOLE", true, "serve the web console under /ui/ on --http-addr (docs/console.md); its session cookie is Secure: use it over TLS (--api-tls-cert) or on localhost")
	f.BoolVar(&c.ConsoleReadOnly, "console-read-only", "HERO_CONSOLE_READ_ONLY", false, "the web console shows everything and refuses every action, for every role")
	f.DurationVar(&c.ConsoleSessionTTL, "console-session-ttl", "", 12*time.Hour, "a web console session's life (a changed key or revoked secret ends it sooner)")
}

// validateBounds checks the settings that are a number within a range.
func (c *Config) validateBounds() error {
	if c.ConsoleSessionTTL < time.Minute || c.ConsoleSessionTTL > 30*24*time.Hour {
		return fmt.Errorf("--console-session-ttl: %v is not between 1m and 720h", c.ConsoleSessionTTL)
	}
	if c.MaxFlowJobs < 1 || c.MaxFlowJobs > model.MaxFlowJobs {
		return fmt.Errorf("--max-flow-jobs: %d is not between 1 and %d", c.MaxFlowJobs, model.MaxFlowJobs)
	}
	if c.SubmitInflight < 1 || c.SubmitInflight > 16 {
		return fmt.Errorf("--submit-inflight: %d is not between 1 and 16", c.SubmitInflight)
	}
	return nil
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if err := config.ValidateListenAddr("http-addr", c.HTTPAddr); err != nil {
		return err
	}
	if err := c.APITLS.Validate("api-tls", false); err != nil {
		return err
	}
	if err := c.Dispatcher.Validate(); err != nil {
		return err
	}
	if err := config.ValidateDialTarget("scheduler-addr", c.SchedulerAddr); err != nil {
		return err
	}
	for _, s := range c.secrets() {
		if len(s) < 16 {
			return fmt.Errorf("--admin-secret: each secret must be at least 16 characters")
		}
	}
	if c.RunMargin < 0 || c.MaxBodyBytes < 1024 {
		return fmt.Errorf("--run-margin must not be negative and --max-body-bytes at least 1024")
	}
	if c.AuthWindow < 10*time.Second || c.AuthWindow > time.Hour {
		return fmt.Errorf("--auth-window: %v is not between 10s and 1h", c.AuthWindow)
	}
	if c.AuthSessionRecheck < time.Second || c.AuthSessionRecheck > 10*time.Minute {
		return fmt.Errorf("--auth-session-recheck: %v is not between 1s and 10m", c.AuthSessionRecheck)
	}
	if c.HTTPReadTimeout <= 0 || c.HTTPWriteTimeout <= 0 || c.HTTPIdleTimeout <= 0 {
		return fmt.Errorf("--http-read-timeout, --http-write-timeout and --http-idle-timeout must be positive")
	}
	if err := c.validateBounds(); err != nil {
		return err
	}
	if c.MaxBatch < 1 {
		return fmt.Errorf("--max-batch: must be at least 1")
	}
	if c.RateLimit < 0 || c.MaxWaits < 0 {
		return fmt.Errorf("--rate-limit and --max-waits-per-caller must not be negative")
	}
	if c.RateLimit > 0 && c.RateBurst < c.MaxBatch {
		return fmt.Errorf("--rate-burst (%d) must be at least --max-batch (%d): a full batch could never pass", c.RateBurst, c.MaxBatch)
	}
	return nil
}

func (c *Config) secrets() []string {
	var out []string
	for _, s := range strings.Split(c.AdminSecret, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// CommonConfig returns the shared settings.
func (c *Config) CommonConfig() *config.Common { return &c.Common }
