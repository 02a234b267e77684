// Command supervisor-daemon is the Hero coordinator's supervisor-daemon service: serves the public API (JSON-RPC 2.0 on HTTP and gRPC): validation, permissions, objects, flow start, run-and-await, stop, logs and watch.
//
// Flags and their environment twins: `supervisor-daemon --help`. Ports: docs/ports.md.
package main

import (
	"context"
	"os"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/config"
)

const summary = "serves the public API (JSON-RPC 2.0 on HTTP and gRPC): validation, permissions, objects, flow start, run-and-await, stop, logs and watch."

func main() {
	var cfg Config
	fs := config.NewFlagSet("supervisor-daemon", summary)
	cfg.RegisterFlags(fs)
	os.Exit(app.Main(fs, "supervisor-daemon", os.Args[1:], &cfg, func(ctx context.Context, env *app.Env) error { return run(ctx, &cfg, env) }))
}
