package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/config"
)

// ClientConfig is the dispatcher side's configuration (supervisor-daemon).
type ClientConfig struct {
	DB     int
	Prefix string
	LogDir string
}

// RegisterFlags adds the --dispatcher-* flags of the API.
func (c *ClientConfig) RegisterFlags(f *config.FlagSet) {
	f.IntVar(&c.DB, "dispatcher-db", "", 0, "Redis DB of the Hero Dispatcher protocol (its hero: keys)")
	f.StringVar(&c.Prefix, "dispatcher-prefix", "", DefaultPrefix, "key prefix of the Hero Dispatcher protocol")
	f.StringVar(&c.LogDir, "dispatcher-log-dir", "", "", "directory dispatcher.job_logs may read log_path files from; empty: only the copy kept in Redis")
}

// Validate checks the configuration.
func (c *ClientConfig) Validate() error {
	if c.DB < 0 {
		return fmt.Errorf("--dispatcher-db must not be negative")
	}
	if c.Prefix == "" {
		return fmt.Errorf("--dispatcher-prefix must not be empty")
	}
	if c.LogDir != "" {
		if _, err := CleanLogDir(c.LogDir); err != nil {
			return fmt.Errorf("--dispatcher-log-dir: %v", err)
		}
	}
	return nil
}

// NewClient builds the client from the configuration; rdb must be on c.DB.
func (c *ClientConfig) NewClient(rdb *redis.Client, reg prometheus.Registerer) (*Client, error) {
	return NewClient(rdb, ClientOptions{Prefix: c.Prefix, LogDir: c.LogDir, Registerer: reg})
}

// Open connects to the dispatcher DB of the server of base and builds the client,
// which owns that connection (Close closes it).
func (c *ClientConfig) Open(ctx context.Context, base *redis.Options, poolSize int, connectTimeout time.Duration, reg prometheus.Registerer) (*Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rdb, err := OpenRedis(ctx, base, c.DB, poolSize, connectTimeout)
	if err != nil {
		return nil, err
	}
	cl, err := c.NewClient(rdb, reg)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	cl.ownsRedis = true
	return cl, nil
}

// OpenRedis connects to the server of base on db and checks it answers within
// timeout. poolSize ≤ 0 keeps go-redis's default.
func OpenRedis(ctx context.Context, base *redis.Options, db, poolSize int, timeout time.Duration) (*redis.Client, error) {
	opt := *base
	opt.DB = db
	if poolSize > 0 {
		opt.PoolSize = poolSize
	}
	rdb := redis.NewClient(&opt)
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			return rdb, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = rdb.Close()
			return nil, fmt.Errorf("dispatcher redis %s db %d: %v", opt.Addr, db, err)
		}
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}
