// Command router is the Hero coordinator's router service: moves messages: takes them from every context's msg_out and msg_in, materialises jobs onto their queues for local runners, hands remote ones to the gateway, and delivers results to the scheduler.
//
// Flags and their environment twins: `router --help`. Ports: docs/ports.md.
package main

import (
	"context"
	"os"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/config"
)

const summary = "moves messages: takes them from every context's msg_out and msg_in, materialises jobs onto their queues for local runners, hands remote ones to the gateway, and delivers results to the scheduler."

func main() {
	var cfg Config
	fs := config.NewFlagSet("router", summary)
	cfg.RegisterFlags(fs)
	os.Exit(app.Main(fs, "router", os.Args[1:], &cfg, func(ctx context.Context, env *app.Env) error { return run(ctx, &cfg, env) }))
}
