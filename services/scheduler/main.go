// Command scheduler is the Hero coordinator's scheduler service: runs flows: validates each DAG, dispatches ready jobs as messages onto msg_out, retries failed jobs with backoff, enforces timeouts, and completes flows.
//
// Flags and their environment twins: `scheduler --help`. Ports: docs/ports.md.
package main

import (
	"context"
	"os"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/config"
)

const summary = "runs flows: validates each DAG, dispatches ready jobs as messages onto msg_out, retries failed jobs with backoff, enforces timeouts, and completes flows."

func main() {
	var cfg Config
	fs := config.NewFlagSet("scheduler", summary)
	cfg.RegisterFlags(fs)
	os.Exit(app.Main(fs, "scheduler", os.Args[1:], &cfg, func(ctx context.Context, env *app.Env) error { return run(ctx, &cfg, env) }))
}
