package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/app"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	b, err := app.NewBase(ctx, env, &cfg.Common, app.Serving{Peers: []string{"supervisor-daemon", "router"}})
	if err != nil {
		return err
	}
	loopCtx, stop := context.WithCancel(context.Background())
	eng := newEngine(engineParams{
		store: b.Store, log: env.Log, reg: env.Registry,
		retryBase: cfg.RetryBase, retryCap: cfg.RetryCap, sweepEvery: cfg.SafetySweep, retention: cfg.Retention,
		life: loopCtx,
	})
	herov1.RegisterSchedulerServer(b.GRPC.Server, &handler{eng: eng})
	b.Add("engine", func() error { return eng.run(loopCtx) }, func(error) { stop() })
	return b.Run(herov1.Scheduler_ServiceDesc.ServiceName)
}
