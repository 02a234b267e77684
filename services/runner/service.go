package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/app"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	b, err := app.NewBase(ctx, env, &cfg.Common, app.Serving{Peers: []string{"supervisor-daemon", "scheduler"}})
	if err != nil {
		return err
	}
	r := newRunner(runnerParams{store: b.Store, log: env.Log, reg: env.Registry, cfg: cfg})
	if err := r.startExecutors(ctx); err != nil {
		return err
	}
	herov1.RegisterRunnerControlServer(b.GRPC.Server, &handler{r: r})
	loopCtx, stop := context.WithCancel(context.Background())
	b.Add("runner", func() error { return r.run(loopCtx) }, func(error) { stop() })
	if cfg.Dispatcher.Enabled() {
		// The Hero Dispatcher protocol (seed 000): hero: job hashes and work queues.
		dw, err := cfg.Dispatcher.Open(ctx, cfg.RedisURL, cfg.WorkerID, cfg.RedisConnectTimeout, cfg.ShutdownTimeout/2, env.Log, env.Registry)
		if err != nil {
			return err
		}
		dctx, dstop := context.WithCancel(context.Background())
		b.Add("dispatcher-worker", func() error { return dw.Run(dctx) }, func(error) { dstop() })
	}
	return b.Run(herov1.RunnerControl_ServiceDesc.ServiceName)
}
