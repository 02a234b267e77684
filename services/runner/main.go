// Command runner is the Hero coordinator's runner service: executes jobs: claims them reliably from its contexts' queues, runs each script with its interpreter, enforces timeouts and stops, keeps logs and results, and heartbeats.
//
// Flags and their environment twins: `runner --help`. Ports: docs/ports.md.
package main

import (
	"context"
	"os"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/reaper"
)

const summary = "executes jobs: claims them reliably from its contexts' queues, runs each script with its interpreter, enforces timeouts and stops, keeps logs and results, and heartbeats."

func main() {
	// As PID 1 of a container (the image's entrypoint on Kubernetes), the runner runs
	// itself again as its child and waits for the processes its jobs' sandboxes leave
	// behind (lib/reaper); under compose, tini is PID 1 (init: true).
	if code, ran := reaper.IfPID1(); ran {
		os.Exit(code)
	}
	var cfg Config
	fs := config.NewFlagSet("runner", summary)
	cfg.RegisterFlags(fs)
	os.Exit(app.Main(fs, "runner", os.Args[1:], &cfg, func(ctx context.Context, env *app.Env) error { return run(ctx, &cfg, env) }))
}
