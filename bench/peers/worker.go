package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// The asynq side runs in two processes, as this stack's does: its workers (an
// asynq.Server) in a process of their own, started with the GOMAXPROCS of each of this
// stack's services, and its producers and clients in this benchmark's process with
// Go's default, as this stack's producers are in the go test process. The worker
// process is this program again (-asynq-worker). It writes lines to its standard
// output and reads commands on its standard input:
//
//	ready                  it serves (written once)
//	count <n>              (command) write "counted" once n noop tasks have run in all
//	counted
//	done <payload>         an await task ran ((c)'s signal to the waiting client)
//	chain <µs> <µs> …      the chain of hop tasks ended: each hop's time ((d))
//	error <what>           a handler failed: the run stops
//
// Its configuration comes in the environment (workerEnv).

// workerConfig is the worker process's configuration.
type workerConfig struct {
	addr, user, password string
	workers              int
	poll                 time.Duration // 0: asynq's defaults
	chain                int
}

const (
	envAddr     = "PEERS_ASYNQ_ADDR"
	envUser     = "PEERS_ASYNQ_USER"
	envPassword = "PEERS_ASYNQ_PASSWORD"
	envWorkers  = "PEERS_ASYNQ_WORKERS"
	envPoll     = "PEERS_ASYNQ_POLL"
	envChain    = "PEERS_ASYNQ_CHAIN"
)

// workerEnv is the environment that passes cfg to the worker process.
func workerEnv(cfg workerConfig) []string {
	return []string{envAddr + "=" + cfg.addr, envUser + "=" + cfg.user, envPassword + "=" + cfg.password,
		envWorkers + "=" + strconv.Itoa(cfg.workers), envPoll + "=" + cfg.poll.String(), envChain + "=" + strconv.Itoa(cfg.chain)}
}

// serverConfig is the asynq.Config of the workers: asynq's defaults but the
// concurrency, or with poll, its two polls (an idle queue's check for new tasks, 1 s
// by default; the move of scheduled and retried tasks, 5 s) at that interval.
func serverConfig(workers int, poll time.Duration) asynq.Config {
	cfg := asynq.Config{Concurrency: workers, LogLevel: asynq.WarnLevel}
	if poll > 0 {
		cfg.TaskCheckInterval, cfg.DelayedTaskCheckInterval = poll, poll
	}
	return cfg
}

// out is the worker process's standard output: one write per line.
type out struct {
	mu sync.Mutex
}

func (o *out) line(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// counter counts the noop tasks and says "counted" once they reach the target.
type counter struct {
	mu           sync.Mutex
	done, target int
	o            *out
}

func (c *counter) add(ran, target int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done += ran
	if target > 0 {
		c.target = target
	}
	if c.target > 0 && c.done >= c.target {
		c.target = 0
		c.o.line("counted")
	}
}

// runWorker is the worker process (-asynq-worker): it serves the benchmark's task
// types until its standard input closes.
func runWorker() error {
	cfg, err := workerConfigFromEnv()
	if err != nil {
		return err
	}
	opt := asynq.RedisClientOpt{Addr: cfg.addr, Username: cfg.user, Password: cfg.password}
	o := &out{}
	count := &counter{o: o}
	next := asynq.NewClient(opt)
	defer func() { _ = next.Close() }()
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
		count.add(1, 0)
		return nil
	})
	mux.HandleFunc("await", func(_ context.Context, t *asynq.Task) error {
		o.line("done %s", t.Payload())
		return nil
	})
	mux.HandleFunc("hop", hopHandler(next, cfg.chain, o))
	srv := asynq.NewServer(opt, serverConfig(cfg.workers, cfg.poll))
	if err := srv.Start(mux); err != nil {
		return err
	}
	defer srv.Shutdown()
	o.line("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "count "); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("worker: bad command %q", sc.Text())
			}
			count.add(0, n)
		}
	}
	return sc.Err()
}

// hopHandler is (d)'s handler: each hop task enqueues the next (payload: its index);
// the hop is the next handler's start after the enqueue's return (µs, one process's
// clock). The chain's hops are written once the last one started and every enqueue
// returned (the last handler may start before the one before it saw its enqueue's
// answer).
func hopHandler(next *asynq.Client, chain int, o *out) func(context.Context, *asynq.Task) error {
	var mu sync.Mutex
	ends := make([]time.Time, chain)
	starts := make([]time.Time, chain)
	marks := 0 // starts of the last hop and enqueue returns recorded
	mark := func(at []time.Time, i int, t time.Time) {
		mu.Lock()
		defer mu.Unlock()
		at[i] = t
		if marks++; marks < chain { // chain-1 returns and the last start
			return
		}
		var b strings.Builder
		b.WriteString("chain")
		for k := 1; k < chain; k++ {
			fmt.Fprintf(&b, " %d", starts[k].Sub(ends[k-1]).Microseconds())
		}
		o.line("%s", b.String())
	}
	return func(_ context.Context, t *asynq.Task) error {
		started := time.Now()
		i, err := strconv.Atoi(string(t.Payload()))
		if err != nil || i < 0 || i >= chain {
			return fmt.Errorf("hop %q: not an index below %d", t.Payload(), chain)
		}
		if i+1 == chain {
			mark(starts, i, started)
			return nil
		}
		mu.Lock()
		starts[i] = started
		mu.Unlock()
		_, err = next.Enqueue(asynq.NewTask("hop", []byte(strconv.Itoa(i+1))))
		if err != nil {
			o.line("error hop %d: %v", i, err)
			return err
		}
		mark(ends, i, time.Now())
		return nil
	}
}

func workerConfigFromEnv() (workerConfig, error) {
	cfg := workerConfig{addr: os.Getenv(envAddr), user: os.Getenv(envUser), password: os.Getenv(envPassword)}
	var err error
	if cfg.workers, err = strconv.Atoi(os.Getenv(envWorkers)); err != nil || cfg.workers < 1 {
		return cfg, fmt.Errorf("worker: %s=%q: want a count", envWorkers, os.Getenv(envWorkers))
	}
	if cfg.chain, err = strconv.Atoi(os.Getenv(envChain)); err != nil || cfg.chain < 2 {
		return cfg, fmt.Errorf("worker: %s=%q: want a count of 2 or more", envChain, os.Getenv(envChain))
	}
	if cfg.poll, err = time.ParseDuration(os.Getenv(envPoll)); err != nil {
		return cfg, fmt.Errorf("worker: %s=%q: %w", envPoll, os.Getenv(envPoll), err)
	}
	if cfg.addr == "" {
		return cfg, fmt.Errorf("worker: %s is not set", envAddr)
	}
	return cfg, nil
}
