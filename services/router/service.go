package main

import (
	"context"
	"fmt"

	"github.com/hero-coordinator/hero/lib/app"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	b, err := app.NewBase(ctx, env, &cfg.Common, app.Serving{Peers: map[string][]string{herov1.Router_Deliver_FullMethodName: {"mycelium-gateway"}}})
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
	// The router id names this router's claims: one live process per id. A restart
	// after a crash on this host takes it at once; elsewhere, once its TTL passed.
	id, err := b.Store.HoldIdentity(ctx, "router", cfg.RouterID, cfg.Lease)
	if err != nil {
		return fmt.Errorf("--router-id %s: %w", cfg.RouterID, err)
	}
	herov1.RegisterRouterServer(b.GRPC.Server, &handler{r: r})
	loopCtx, stop := context.WithCancel(context.Background())
	b.Add("router", func() error {
		defer id.Release() // after the loops: the claims are settled by then
		return r.run(loopCtx)
	}, func(error) { stop() })
	keepCtx, stopKeep := context.WithCancel(context.Background())
	b.Add("router-id", func() error { return id.Keep(keepCtx) }, func(error) { stopKeep() })
	return b.Run(herov1.Router_ServiceDesc.ServiceName)
}
