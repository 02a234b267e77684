package main

import (
	"fmt"
	"os"
	"time"

	"github.com/hero-coordinator/hero/lib/config"
)

// Config is the router's configuration.
type Config struct {
	config.Common
	SchedulerAddr string
	GatewayAddr   string
	RouterID      string
	Workers       int
	Lease         time.Duration
	Remote        remoteConfig
	Retention     time.Duration
}

// RegisterFlags adds every flag.
func (c *Config) RegisterFlags(f *config.FlagSet) {
	c.Common.RegisterFlags(f, ":9655", ":9662")
	host, _ := os.Hostname()
	if host == "" {
		host = "router"
	}
	f.StringVar(&c.SchedulerAddr, "scheduler-addr", "", "127.0.0.1:9654", "scheduler gRPC address: host:port (every address the name resolves to), dns:///host:port, or a comma-separated list of host:port; calls go round robin to the replicas whose gRPC health is SERVING")
	f.StringVar(&c.GatewayAddr, "gateway-addr", "", "", "mycelium-gateway gRPC address: host:port (every address the name resolves to), dns:///host:port, or a comma-separated list of host:port; sends go round robin to the replicas whose gRPC health is SERVING (active or standby: every gateway replica sends); empty: no remote runners")
	f.StringVar(&c.RouterID, "router-id", "", "router-"+host, "this router's consumer name; unique per replica, stable across restarts")
	f.IntVar(&c.Workers, "workers", "", 8, "messages handled concurrently")
	f.DurationVar(&c.Lease, "lease", "", 30*time.Second, "how long a claimed message stays claimed without a heartbeat")
	f.DurationVar(&c.Remote.Timeout, "remote-timeout", "", time.Minute, "a job for a remote runner that cannot be handed to the gateway for this long fails (a message's own timeout wins)")
	f.DurationVar(&c.Remote.AckTimeout, "remote-ack-timeout", "", 30*time.Second, "a remote runner's node must acknowledge a job within this (a message's timeout_ack wins); then the job's retry policy applies")
	f.DurationVar(&c.Remote.ResultTimeout, "remote-result-timeout", "", 0, "a remote job's result must arrive within this after the acknowledgement, or the job ends with a timeout (a message's timeout_result wins; 0: the job's timeout, or --remote-job-timeout, plus --remote-result-margin)")
	f.DurationVar(&c.Remote.ResultMargin, "remote-result-margin", "", time.Minute, "added to a remote job's timeout to make its result deadline")
	f.DurationVar(&c.Remote.JobTimeout, "remote-job-timeout", "", time.Hour, "the timeout assumed, for its result deadline, of a remote job that has none")
	f.DurationVar(&c.Remote.AckDelay, "remote-ack-delay", "", 2*time.Second, "a job from another node is acknowledged to its origin only if its result has not gone back within this (a quick job costs two Mycelium messages, its request and its result); at the latest by the request's take-by time; 0: acknowledged at once")
	f.DurationVar(&c.Retention, "retention", "", 7*24*time.Hour, "how long jobs run here for other nodes, and duplicate-delivery records, are kept")
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if err := config.ValidateDialTarget("scheduler-addr", c.SchedulerAddr); err != nil {
		return err
	}
	if c.GatewayAddr != "" {
		if err := config.ValidateDialTarget("gateway-addr", c.GatewayAddr); err != nil {
			return err
		}
	}
	if c.RouterID == "" {
		return fmt.Errorf("--router-id must not be empty")
	}
	if c.Workers < 1 || c.Workers > 1024 {
		return fmt.Errorf("--workers must be between 1 and 1024")
	}
	if c.Remote.ResultMargin < 0 || c.Remote.JobTimeout <= 0 || c.Remote.ResultTimeout < 0 {
		return fmt.Errorf("--remote-result-margin and --remote-result-timeout must not be negative, --remote-job-timeout must be positive")
	}
	if c.Remote.AckDelay < 0 || c.Remote.AckDelay > time.Minute {
		return fmt.Errorf("--remote-ack-delay must be between 0 and 1m")
	}
	if c.Lease < time.Second {
		return fmt.Errorf("--lease must be at least 1s")
	}
	return nil
}

// CommonConfig returns the shared settings.
func (c *Config) CommonConfig() *config.Common { return &c.Common }
