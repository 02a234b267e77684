// Command mycelium-gateway is the Hero coordinator's mycelium-gateway service: bridges to a Mycelium node's message API: sends messages to runners on other nodes and delivers inbound messages into the right context's msg_in.
//
// Flags and their environment twins: `mycelium-gateway --help`. Ports: docs/ports.md.
package main

import (
	"context"
	"os"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/config"
)

const summary = "bridges to a Mycelium node's message API: sends messages to runners on other nodes and delivers inbound messages into the right context's msg_in."

func main() {
	var cfg Config
	fs := config.NewFlagSet("mycelium-gateway", summary)
	cfg.RegisterFlags(fs)
	os.Exit(app.Main(fs, "mycelium-gateway", os.Args[1:], &cfg, func(ctx context.Context, env *app.Env) error { return run(ctx, &cfg, env) }))
}
