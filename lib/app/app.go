// Package app is the frame of every binary: flags and environment, validation before
// anything starts, the logger, metrics registry and readiness probe, signal handling,
// a run group of actors, the `healthcheck` subcommand, and one-line errors with the
// right exit code (0 done, 1 failed while running, 2 bad configuration).
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/obs"
)

// Config is a service's configuration tree.
type Config interface {
	Validate() error
	CommonConfig() *config.Common
}

// Env is what the frame hands to a service's run function.
type Env struct {
	Name     string
	Log      zerolog.Logger
	Registry *prometheus.Registry
	Probe    *obs.Probe
	Stdout   io.Writer
}

// RunFunc runs the service until ctx ends (SIGTERM/SIGINT) and returns nil on a clean stop.
type RunFunc func(ctx context.Context, env *Env) error

// Main runs a service binary and returns its exit code.
func Main(fs *config.FlagSet, name string, args []string, cfg Config, run RunFunc) int {
	return MainIO(fs, name, args, cfg, run, os.Stdout, os.Stderr)
}

// MainIO is Main with explicit output streams (tests).
func MainIO(fs *config.FlagSet, name string, args []string, cfg Config, run RunFunc, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "healthcheck" {
		if err := fs.Parse(args[1:], stdout); err != nil {
			if errors.Is(err, config.ErrHelp) {
				return 0
			}
			fmt.Fprintf(stderr, "%s healthcheck: %v\n", name, err)
			return 2
		}
		if err := Healthcheck(cfg.CommonConfig().AdminAddr, 3*time.Second); err != nil {
			fmt.Fprintf(stderr, "%s healthcheck: %v\n", name, err)
			return 1
		}
		fmt.Fprintln(stdout, "ready")
		return 0
	}
	if err := fs.Parse(args, stdout); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: invalid configuration: %v\n", name, err)
		return 2
	}
	c := cfg.CommonConfig()
	gcPercent, memLimit := tuneGC(os.Getenv, cgroupMemoryFiles)
	// Log lines go out in batches, at most obs.DefaultLogLinger late (one write per
	// batch, not per line, under load); Close below writes the rest before the last
	// words on stderr.
	logw := obs.NewBatchWriter(stderr, obs.DefaultLogLinger, obs.DefaultLogFlushAt, obs.DefaultLogMax)
	env := &Env{
		Name:     name,
		Log:      obs.NewLogger(logw, name, c.LogLevel, c.LogFormat),
		Registry: obs.NewRegistry(),
		Probe:    obs.NewProbe(),
		Stdout:   stdout,
	}
	if gcPercent > 0 || memLimit > 0 {
		env.Log.Debug().Int("gogc", gcPercent).Int64("gomemlimit", memLimit).Msg("garbage collector tuned (GOGC, GOMEMLIMIT unset)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, env); err != nil && (ctx.Err() == nil || !errors.Is(err, context.Canceled)) {
		_ = logw.Close()
		fmt.Fprintf(stderr, "%s: %v\n", name, oneLine(err))
		return 1
	}
	env.Log.Info().Msg("stopped")
	_ = logw.Close() // a failing stderr has nowhere left to be reported
	return 0
}

func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}

// Healthcheck asks the admin server at addr for /readyz.
func Healthcheck(addr string, timeout time.Duration) error {
	host := addr
	if strings.HasPrefix(host, ":") {
		host = "127.0.0.1" + host
	}
	host = strings.Replace(host, "0.0.0.0:", "127.0.0.1:", 1)
	host = strings.Replace(host, "[::]:", "127.0.0.1:", 1)
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get("http://" + host + "/readyz")
	if err != nil {
		return fmt.Errorf("admin server at %s: %v", host, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/readyz: %s %s", host, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Group runs actors together: when the first returns, every actor is interrupted, and
// Run returns the first actor's error (oklog/run's model).
type Group struct {
	actors []actor
}

type actor struct {
	name      string
	execute   func() error
	interrupt func(error)
}

// Add registers an actor.
func (g *Group) Add(name string, execute func() error, interrupt func(error)) {
	g.actors = append(g.actors, actor{name, execute, interrupt})
}

// AddContext registers the signal context as an actor: it ends the group on SIGTERM.
func (g *Group) AddContext(ctx context.Context) {
	inner, cancel := context.WithCancel(ctx)
	g.Add("signals", func() error {
		<-inner.Done()
		return nil
	}, func(error) { cancel() })
}

// Run runs every actor and returns the error of the first to return.
func (g *Group) Run() error {
	if len(g.actors) == 0 {
		return nil
	}
	type result struct {
		name string
		err  error
	}
	errs := make(chan result, len(g.actors))
	for _, a := range g.actors {
		go func(a actor) { errs <- result{a.name, a.execute()} }(a)
	}
	first := <-errs
	for _, a := range g.actors {
		a.interrupt(first.err)
	}
	for i := 1; i < len(g.actors); i++ {
		<-errs
	}
	if first.err != nil {
		return fmt.Errorf("%s: %w", first.name, first.err)
	}
	return nil
}
