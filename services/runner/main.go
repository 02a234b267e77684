// Command runner is the Hero coordinator's runner service: executes jobs: claims them reliably from its contexts' queues, runs each script with its interpreter, enforces timeouts and stops, keeps logs and results, and heartbeats.
//
// Flags and their environment twins: `runner --help`. Ports: docs/ports.md.
package main

import (
	"context"
	"os"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/sandbox"
)

const summary = "executes jobs: claims them reliably from its contexts' queues, runs each script with its interpreter, enforces timeouts and stops, keeps logs and results, and heartbeats."

func main() {
	// A job starts through this binary: it joins the job's cgroup, then runs bwrap.
	if len(os.Args) > 1 && os.Args[1] == sandbox.TrampolineArg {
		os.Exit(sandbox.Trampoline(os.Args[2:]))
	}
	var cfg Config
	fs := config.NewFlagSet("runner", summary)
	cfg.RegisterFlags(fs)
	os.Exit(app.Main(fs, "runner", os.Args[1:], &cfg, func(ctx context.Context, env *app.Env) error { return run(ctx, &cfg, env) }))
}
