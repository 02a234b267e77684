package main

import (
	"fmt"
	"time"

	"github.com/hero-coordinator/hero/lib/config"
)

// Config is the scheduler's configuration.
type Config struct {
	config.Common
	RetryBase   time.Duration
	RetryCap    time.Duration
	SafetySweep time.Duration
	Retention   time.Duration
}

// RegisterFlags adds every flag.
func (c *Config) RegisterFlags(f *config.FlagSet) {
	c.Common.RegisterFlags(f, ":9654", ":9661")
	f.DurationVar(&c.RetryBase, "retry-base", "", time.Second, "backoff before a failed job's first retry; doubles per attempt, with jitter")
	f.DurationVar(&c.RetryCap, "retry-cap", "", 5*time.Minute, "longest backoff between retries")
	f.DurationVar(&c.SafetySweep, "safety-sweep", "", 30*time.Second, "how often active flows are reconciled with their jobs (a safety net; the normal path is event-driven)")
	f.DurationVar(&c.Retention, "retention", "", 7*24*time.Hour, "how long ended flows and standalone jobs (with their jobs, messages, logs) and events are kept; a context's retention_seconds overrides it; 0 keeps them forever")
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if c.RetryBase <= 0 || c.RetryCap < c.RetryBase {
		return fmt.Errorf("--retry-base must be positive and --retry-cap at least --retry-base")
	}
	if c.Retention < 0 {
		return fmt.Errorf("--retention must not be negative")
	}
	if c.SafetySweep < time.Second {
		return fmt.Errorf("--safety-sweep must be at least 1s")
	}
	return nil
}

// CommonConfig returns the shared settings.
func (c *Config) CommonConfig() *config.Common { return &c.Common }
