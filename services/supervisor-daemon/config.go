package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/dispatcher"
)

// Config is the supervisor-daemon's configuration.
type Config struct {
	config.Common
	HTTPAddr      string
	SchedulerAddr string
	AdminSecret   string
	RunMargin     time.Duration
	MaxBodyBytes  int
	Dispatcher    dispatcher.ClientConfig
}

// RegisterFlags adds every flag.
func (c *Config) RegisterFlags(f *config.FlagSet) {
	c.Common.RegisterFlags(f, ":9653", ":9660")
	c.Dispatcher.RegisterFlags(f)
	f.StringVar(&c.HTTPAddr, "http-addr", "", ":9652", "JSON-RPC 2.0 API listen address (POST /)")
	f.StringVar(&c.SchedulerAddr, "scheduler-addr", "", "127.0.0.1:9654", "scheduler gRPC address (host:port)")
	f.StringVar(&c.AdminSecret, "admin-secret", "HERO_ADMIN_SECRET", "", "operator secret(s), comma-separated; empty: one is generated at first start, kept hashed in Redis and logged once")
	f.DurationVar(&c.RunMargin, "run-margin", "", 30*time.Second, "job.run waits the job's timeout plus this margin when no timeout is given")
	f.IntVar(&c.MaxBodyBytes, "max-body-bytes", "", 4<<20, "largest JSON-RPC request body accepted")
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if err := config.ValidateListenAddr("http-addr", c.HTTPAddr); err != nil {
		return err
	}
	if err := c.Dispatcher.Validate(); err != nil {
		return err
	}
	if err := config.ValidateDialAddr("scheduler-addr", c.SchedulerAddr); err != nil {
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
