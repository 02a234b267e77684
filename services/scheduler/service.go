package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/app"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	b, err := app.NewBase(ctx, env, &cfg.Common, app.Serving{Peers: map[string][]string{
		// The API's: a flow's start, cancel and retry, job.run's dispatch.
		herov1.Scheduler_StartFlow_FullMethodName:   {"supervisor-daemon"},
		herov1.Scheduler_CancelFlow_FullMethodName:  {"supervisor-daemon"},
		herov1.Scheduler_RetryFlow_FullMethodName:   {"supervisor-daemon"},
		herov1.Scheduler_DispatchJob_FullMethodName: {"supervisor-daemon"},
		// The router's: the results it read.
		herov1.Scheduler_JobDone_FullMethodName:  {"router"},
		herov1.Scheduler_JobsDone_FullMethodName: {"router"},
	}})
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
	wakeCtx, stopWake := context.WithCancel(context.Background())
	wake := &delayedWake{store: b.Store, poke: eng.pokeDue}
	b.Add("delayed-wake", func() error { return wake.run(wakeCtx) }, func(error) { stopWake() })
	return b.Run(herov1.Scheduler_ServiceDesc.ServiceName)
}
