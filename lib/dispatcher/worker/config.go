package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/dispatcher"
	"github.com/hero-coordinator/hero/lib/sandbox"
)

// Config is the runner's Hero Dispatcher worker configuration: flags with
// environment twins. Workers empty means the worker is off.
type Config struct {
	Workers     string // "local=/bin/sh;w2=python3 -u": worker_id=interpreter command, ';'-separated
	DB          int
	Prefix      string
	LogDir      string
	Concurrency int
	ReplyTTL    time.Duration
	StaleAfter  time.Duration
	specs       []Spec
	// Sandbox and Limits, set by the runner, run each job in its sandbox.
	Sandbox *sandbox.Sandbox
	Limits  sandbox.Limits
}

// RegisterFlags adds the --dispatcher-* flags of the runner.
func (c *Config) RegisterFlags(f *config.FlagSet) {
	f.StringVar(&c.Workers, "dispatcher-workers", "", "", "Hero Dispatcher worker ids served, each with its interpreter: \"local=/bin/sh;w2=python3 -u\" (';'-separated worker_id=command; the script comes on stdin); empty: off")
	f.IntVar(&c.DB, "dispatcher-db", "", 0, "Redis DB of the Hero Dispatcher protocol (its hero: keys)")
	f.StringVar(&c.Prefix, "dispatcher-prefix", "", dispatcher.DefaultPrefix, "key prefix of the Hero Dispatcher protocol")
	f.StringVar(&c.LogDir, "dispatcher-log-dir", "", "", "directory a dispatcher job's log_path must lie in; empty: jobs with a log_path are refused")
	f.IntVar(&c.Concurrency, "dispatcher-concurrency", "", 1, "dispatcher jobs of one worker id run at once (jobs with concurrent=false always run alone)")
	f.DurationVar(&c.ReplyTTL, "dispatcher-reply-ttl", "", time.Hour, "expiry of a dispatcher job's reply list (hero:reply:<id>) when nobody takes the reply")
	f.DurationVar(&c.StaleAfter, "dispatcher-stale-after", "", 15*time.Second, "a dispatcher worker process silent this long is dead: its jobs go back to their work queues")
}

// Enabled says whether any worker id is configured.
func (c *Config) Enabled() bool { return strings.TrimSpace(c.Workers) != "" }

// Validate checks the configuration (and parses the worker list).
func (c *Config) Validate() error {
	c.specs = nil
	if c.DB < 0 {
		return fmt.Errorf("--dispatcher-db must not be negative")
	}
	if c.Prefix == "" {
		return fmt.Errorf("--dispatcher-prefix must not be empty")
	}
	if !c.Enabled() {
		return nil
	}
	specs, err := ParseSpecs(c.Workers)
	if err != nil {
		return fmt.Errorf("--dispatcher-workers: %v", err)
	}
	c.specs = specs
	if c.Concurrency < 1 || c.Concurrency > 4096 {
		return fmt.Errorf("--dispatcher-concurrency must be between 1 and 4096")
	}
	if c.ReplyTTL < time.Second {
		return fmt.Errorf("--dispatcher-reply-ttl must be at least 1s")
	}
	if c.StaleAfter < 2*time.Second {
		return fmt.Errorf("--dispatcher-stale-after must be at least 2s")
	}
	if c.LogDir != "" {
		if _, err := dispatcher.CleanLogDir(c.LogDir); err != nil {
			return fmt.Errorf("--dispatcher-log-dir: %v", err)
		}
	}
	return nil
}

// Specs returns the parsed worker ids (after Validate).
func (c *Config) Specs() []Spec { return c.specs }

// ParseSpecs reads "local=/bin/sh;w2=python3 -u".
func ParseSpecs(s string) ([]Spec, error) {
	var out []Spec
	seen := map[string]bool{}
	for _, part := range config.Entries(s, ";") {
		id, cmd, ok := strings.Cut(part, "=")
		id = strings.TrimSpace(id)
		argv := strings.Fields(cmd)
		if !ok || id == "" || len(argv) == 0 {
			return nil, fmt.Errorf("%q is not worker_id=command", part)
		}
		if strings.ContainsAny(id, " \t") {
			return nil, fmt.Errorf("worker id %q has spaces", id)
		}
		if seen[id] {
			return nil, fmt.Errorf("worker id %q given twice", id)
		}
		seen[id] = true
		out = append(out, Spec{ID: id, Argv: argv})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no worker_id=command entries")
	}
	return out, nil
}

// New builds the worker from the configuration. rdb must be on c.DB (see
// OpenRedis); processID names the process (the runner's --worker-id fits).
func (c *Config) New(rdb *redis.Client, processID string, shutdown time.Duration, log zerolog.Logger, reg prometheus.Registerer) (*Worker, error) {
	if c.specs == nil {
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	hb := c.StaleAfter / 5
	if hb < 500*time.Millisecond {
		hb = 500 * time.Millisecond
	}
	return New(Params{
		Redis: rdb, Prefix: c.Prefix, Workers: c.specs, LogDir: c.LogDir, Concurrency: c.Concurrency,
		ProcessID: processID, Heartbeat: hb, StaleAfter: c.StaleAfter, ReplyTTL: c.ReplyTTL,
		DrainTimeout: shutdown, Log: log, Registerer: reg, Sandbox: c.Sandbox, Limits: c.Limits,
	})
}

// Open connects to the dispatcher DB of the server of base (the store's connection
// options: address, TLS, user) and builds the worker,
// which owns that connection (Run closes it when it returns). processID names the
// process (the runner's --worker-id fits); drain is how long running jobs may finish
// at shutdown before they are handed back.
func (c *Config) Open(ctx context.Context, base *redis.Options, processID string, connectTimeout, drain time.Duration, log zerolog.Logger, reg prometheus.Registerer) (*Worker, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !c.Enabled() {
		return nil, fmt.Errorf("--dispatcher-workers is empty: the dispatcher worker is off")
	}
	rdb, err := dispatcher.OpenRedis(ctx, base, c.DB, len(c.specs)+16, connectTimeout)
	if err != nil {
		return nil, err
	}
	w, err := c.New(rdb, processID, drain, log, reg)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	w.ownsRedis = true
	return w, nil
}
