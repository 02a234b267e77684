package main

import (
	"fmt"
	"time"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/mycelium"
)

// Config is the mycelium-gateway's configuration.
type Config struct {
	config.Common
	MyceliumURL  string
	MyceliumIP   string
	MyceliumPort int
	RouterAddr   string
	PollTimeout  time.Duration
	TopicPrefix  string
	RouterWait   time.Duration
	LeaseTTL     time.Duration
	LeaseRenew   time.Duration
}

// RegisterFlags adds every flag.
func (c *Config) RegisterFlags(f *config.FlagSet) {
	c.Common.RegisterFlags(f, ":9657", ":9664")
	f.StringVar(&c.MyceliumURL, "mycelium-url", "", "", "the Mycelium node's HTTP API (default http://127.0.0.1:8989, or built from --mycelium-ip and --mycelium-port)")
	f.StringVar(&c.MyceliumIP, "mycelium-ip", "", mycelium.DefaultHost, "the Mycelium node's address, when --mycelium-url is not set")
	f.IntVar(&c.MyceliumPort, "mycelium-port", "", mycelium.DefaultPort, "the Mycelium node's HTTP API port, when --mycelium-url is not set")
	f.StringVar(&c.RouterAddr, "router-addr", "", "127.0.0.1:9655", "the local router's gRPC address (host:port)")
	f.DurationVar(&c.PollTimeout, "poll-timeout", "", 10*time.Second, "how long one long-poll for inbound messages waits (the gateway's own pushes cancel it and go first)")
	f.DurationVar(&c.RouterWait, "router-wait", "", 2*time.Minute, "how long an inbound message waits for an unavailable router (retried with backoff) before it is refused")
	f.DurationVar(&c.LeaseTTL, "lease-ttl", "", defaultLeaseTTL, "the gateway lease (coord:gateway:<node key> in Redis) that makes one replica per Mycelium node the one that pops its inbox: a standby takes over at most this long after the holder died")
	f.DurationVar(&c.LeaseRenew, "lease-renew", "", defaultLeaseRenew, "how often the holder renews the gateway lease (at most 2/5 of --lease-ttl: a holder whose renewals fail stops popping at 4/5 of it)")
	f.StringVar(&c.TopicPrefix, "topic-prefix", "", "", "REMOVED, must stay empty: a Mycelium node's topic filter matches whole topics, so the gateway owns its node's inbox and pops every topic")
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if c.MyceliumURL == "" {
		u, err := mycelium.BaseURLFromIPPort(c.MyceliumIP, c.MyceliumPort)
		if err != nil {
			return fmt.Errorf("--mycelium-ip/--mycelium-port: %v", err)
		}
		c.MyceliumURL = u
	}
	if _, err := mycelium.New(mycelium.Config{BaseURL: c.MyceliumURL}); err != nil {
		return fmt.Errorf("--mycelium-url: %v", err)
	}
	if err := config.ValidateDialAddr("router-addr", c.RouterAddr); err != nil {
		return err
	}
	if c.RouterWait < 0 || c.RouterWait > time.Hour {
		return fmt.Errorf("--router-wait must be between 0 and 1h")
	}
	if c.TopicPrefix != "" {
		return fmt.Errorf("--topic-prefix is no longer supported: Mycelium v0.7.10 filters pops by the whole topic, not a prefix, so no prefix can select the gateway's topics; run the gateway as the only consumer of its node's inbox, without --topic-prefix (docs/mycelium.md)")
	}
	if c.LeaseTTL < 2*time.Second || c.LeaseTTL > 5*time.Minute {
		return fmt.Errorf("--lease-ttl must be between 2s and 5m")
	}
	if c.LeaseRenew < 100*time.Millisecond || c.LeaseRenew > (c.LeaseTTL-leaseMargin(c.LeaseTTL))/2 {
		return fmt.Errorf("--lease-renew must be between 100ms and 2/5 of --lease-ttl (%v), so that a failed renewal is tried again before the holder must stop", (c.LeaseTTL-leaseMargin(c.LeaseTTL))/2)
	}
	if c.PollTimeout < time.Second || c.PollTimeout > 5*time.Minute {
		return fmt.Errorf("--poll-timeout must be between 1s and 5m")
	}
	return nil
}

// CommonConfig returns the shared settings.
func (c *Config) CommonConfig() *config.Common { return &c.Common }
