package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/app"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	b, err := app.NewBase(ctx, env, &cfg.Common, app.Serving{Peers: []string{"mycelium-gateway"}})
	if err != nil {
		return err
	}
	sc, err := b.Dial(cfg.SchedulerAddr, "scheduler")
	if err != nil {
		return err
	}
	defer func() { _ = sc.Close() }()
	var gw herov1.GatewayClient
	if cfg.GatewayAddr != "" {
		gc, err := b.Dial(cfg.GatewayAddr, "mycelium-gateway")
		if err != nil {
			return err
		}
		defer func() { _ = gc.Close() }()
		gw = herov1.NewGatewayClient(gc)
	}
	r := newRouter(routerParams{
		store: b.Store, log: env.Log, reg: env.Registry, scheduler: herov1.NewSchedulerClient(sc), gateway: gw,
		id: cfg.RouterID, workers: cfg.Workers, lease: cfg.Lease, remote: cfg.Remote, retention: cfg.Retention,
	})
	herov1.RegisterRouterServer(b.GRPC.Server, &handler{r: r})
	loopCtx, stop := context.WithCancel(context.Background())
	b.Add("router", func() error { return r.run(loopCtx) }, func(error) { stop() })
	return b.Run(herov1.Router_ServiceDesc.ServiceName)
}
