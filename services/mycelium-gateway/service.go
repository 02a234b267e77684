package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/mycelium"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	b, err := app.NewBase(ctx, env, &cfg.Common, app.Serving{Peers: []string{"router"}})
	if err != nil {
		return err
	}
	mc, err := mycelium.New(mycelium.Config{BaseURL: cfg.MyceliumURL})
	if err != nil {
		return err
	}
	rc, err := b.Dial(cfg.RouterAddr, "router")
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	g := newGateway(gatewayParams{
		store: b.Store, log: env.Log, reg: env.Registry, mycelium: mc, router: herov1.NewRouterClient(rc),
		pollTimeout: cfg.PollTimeout, routerWait: cfg.RouterWait,
	})
	env.Probe.AddCheck("mycelium", g.check)
	herov1.RegisterGatewayServer(b.GRPC.Server, &handler{g: g})
	loopCtx, stop := context.WithCancel(context.Background())
	b.Add("gateway", func() error { return g.run(loopCtx) }, func(error) { stop() })
	return b.Run(herov1.Gateway_ServiceDesc.ServiceName)
}
