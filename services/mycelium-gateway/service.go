package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/mycelium"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	b, err := app.NewBase(ctx, env, &cfg.Common, app.Serving{Peers: map[string][]string{herov1.Gateway_Send_FullMethodName: {"router"}}})
	if err != nil {
		return err
	}
	token := newToken()
	// The User-Agent names this replica (its lease token) in the node's view.
	mc, err := mycelium.New(mycelium.Config{BaseURL: cfg.MyceliumURL, UserAgent: "hero-mycelium-gateway (" + token + ")"})
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
		leaseTTL: cfg.LeaseTTL, leaseRenew: cfg.LeaseRenew, token: token,
		onLease: func(state, key string) {
			// Both states are ready: every replica serves the router's Send calls.
			if state == "active" {
				env.Probe.AddDetail("lease", "active: this replica pops the Mycelium node's inbox (holds "+key+")")
			} else {
				env.Probe.AddDetail("lease", "standby: pushes only; another replica pops the Mycelium node's inbox while it holds "+key)
			}
		},
	})
	env.Probe.AddDetail("lease", "standby: learning the Mycelium node's key")
	env.Probe.AddCheck("mycelium", g.check)
	herov1.RegisterGatewayServer(b.GRPC.Server, &handler{g: g})
	loopCtx, stop := context.WithCancel(context.Background())
	b.Add("gateway", func() error { return g.run(loopCtx) }, func(error) { stop() })
	return b.Run(herov1.Gateway_ServiceDesc.ServiceName)
}
