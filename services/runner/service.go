package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/sandbox"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// sandboxMadeMetric observes how long each sandbox made ahead took to make.
func sandboxMadeMetric(reg prometheus.Registerer) func(time.Duration, error) {
	h := promauto.With(reg).NewHistogramVec(prometheus.HistogramOpts{Name: "hero_runner_sandbox_make_seconds",
		Help:    "Time to make a job's sandbox ahead of its job (its namespaces, mounts and cgroup, until its first process waits for the job), by outcome (ok, error).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}}, []string{"outcome"})
	return func(d time.Duration, err error) {
		outcome := "ok"
		if err != nil {
			outcome = "error"
		}
		h.WithLabelValues(outcome).Observe(d.Seconds())
	}
}

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	// RunnerControl/StopJob is the operator's alone: the services stop jobs through
	// Redis (coord:ctl:<process>), none calls it.
	b, err := app.NewBase(ctx, env, &cfg.Common, app.Serving{Peers: map[string][]string{herov1.RunnerControl_StopJob_FullMethodName: nil}})
	if err != nil {
		return err
	}
	cfg.pause = pauseHook(os.Getenv)
	opt := cfg.Sandbox.Options()
	opt.Pause = cfg.pause
	opt.Ahead.Made = sandboxMadeMetric(env.Registry)
	sb, err := sandbox.New(ctx, opt)
	if err != nil {
		return err
	}
	for _, state := range []string{"ready", "making"} {
		promauto.With(env.Registry).NewGaugeFunc(prometheus.GaugeOpts{Name: "hero_runner_sandboxes_ahead",
			Help:        "Sandboxes made ahead of their jobs (--sandbox-ahead), by state: ready for a job, or being made.",
			ConstLabels: prometheus.Labels{"state": state}}, func() float64 {
			ready, making := sb.AheadCounts()
			if state == "ready" {
				return float64(ready)
			}
			return float64(making)
		})
	}
	defer sb.Close() // its guard: what is left of the jobs once they are drained
	sandboxGauge := promauto.With(env.Registry).NewGaugeVec(prometheus.GaugeOpts{Name: "hero_runner_sandbox",
		Help: "1 for the mode jobs run in: bwrap (sandboxed) or none (--sandbox=none: unsandboxed)."}, []string{"mode"})
	sandboxGauge.WithLabelValues(sb.Mode()).Set(1)
	if sb.Mode() == sandbox.ModeNone {
		env.Log.Warn().Msg("jobs run WITHOUT a sandbox (--sandbox=none): a job can read this process's files and environment, reach Redis and the services, and outlive its run")
		env.Probe.AddDetail("sandbox", "none: jobs run unsandboxed (--sandbox=none)")
	} else {
		env.Log.Info().Str("sandbox", sb.Describe()).Str("limits", cfg.Sandbox.Limits().String()).Msg("jobs run sandboxed")
		if why := sb.NoFork(); why != "" {
			env.Log.Warn().Str("sandbox", why).Msg("--sandbox-fork: no forking sandbox here; each job's sandbox is made by bwrap (more CPU and time per job)")
		}
		env.Probe.AddDetail("sandbox", sb.Describe())
		// The first jobs (of contexts without limits of their own) find their sandboxes
		// made (--sandbox-ahead), instead of waiting while the rest are made beside them.
		if lim, err := sandbox.Resolve(nil, nil, nil, cfg.Sandbox.Limits(), cfg.Sandbox.Max()); err == nil {
			sb.Warm(lim)
		}
	}
	r := newRunner(runnerParams{store: b.Store, log: env.Log, reg: env.Registry, cfg: cfg, sandbox: sb})
	if err := r.startExecutors(ctx); err != nil {
		return err
	}
	env.Probe.AddCheck("executors", r.executorsReady)
	// The worker id names this process's claims: one live process per id. A restart
	// after a crash on this host takes it at once; elsewhere, once its TTL passed.
	id, err := b.Store.HoldIdentity(ctx, "runner", cfg.WorkerID, cfg.Lease)
	if err != nil {
		return fmt.Errorf("--worker-id %s: %w", cfg.WorkerID, err)
	}
	herov1.RegisterRunnerControlServer(b.GRPC.Server, &handler{r: r})
	loopCtx, stop := context.WithCancel(context.Background())
	b.Add("runner", func() error {
		defer id.Release() // after the drain: the claims are handed back by then
		return r.run(loopCtx)
	}, func(error) { stop() })
	keepCtx, stopKeep := context.WithCancel(context.Background())
	b.Add("worker-id", func() error { return id.Keep(keepCtx) }, func(error) { stopKeep() })
	if cfg.Dispatcher.Enabled() {
		cfg.Dispatcher.Sandbox, cfg.Dispatcher.Limits = sb, cfg.Sandbox.Limits()
		// The Hero Dispatcher protocol (seed 000): hero: job hashes and work queues.
		dw, err := cfg.Dispatcher.Open(ctx, b.Store.RedisOptions(), cfg.WorkerID, cfg.RedisConnectTimeout, cfg.ShutdownTimeout/2, env.Log, env.Registry)
		if err != nil {
			return err
		}
		dctx, dstop := context.WithCancel(context.Background())
		b.Add("dispatcher-worker", func() error { return dw.Run(dctx) }, func(error) { dstop() })
	}
	return b.Run(herov1.RunnerControl_ServiceDesc.ServiceName)
}
