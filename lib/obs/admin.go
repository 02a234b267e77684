package obs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/netx"
)

// NewRegistry returns a registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Check is a readiness dependency, e.g. a Redis ping.
type Check func(ctx context.Context) error

// Probe holds readiness: ready once Ready() is called and every check passes; not
// ready again after Shutdown() (so /readyz answers 503 while the service drains).
type Probe struct {
	mu       sync.Mutex
	ready    bool
	draining bool
	starting string // what the start waits for (Starting)
	checks   map[string]Check
	details  map[string]string
}

// NewProbe returns a probe that is not ready yet.
func NewProbe() *Probe { return &Probe{checks: map[string]Check{}} }

// AddCheck registers a named readiness dependency.
func (p *Probe) AddCheck(name string, c Check) {
	p.mu.Lock()
	p.checks[name] = c
	p.mu.Unlock()
}

// AddDetail adds a line "name: text" to what /readyz answers (how the service runs,
// e.g. its sandbox mode).
func (p *Probe) AddDetail(name, text string) {
	p.mu.Lock()
	if p.details == nil {
		p.details = map[string]string{}
	}
	p.details[name] = text
	p.mu.Unlock()
}

// Details returns the "name: text" lines, sorted.
func (p *Probe) Details() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.details))
	for k, v := range p.details {
		out = append(out, k+": "+v)
	}
	sort.Strings(out)
	return out
}

// Starting says what the start waits for ("" when nothing): /readyz names it while
// the service is not ready.
func (p *Probe) Starting(what string) { p.mu.Lock(); p.starting = what; p.mu.Unlock() }

// Ready marks the service as started.
func (p *Probe) Ready() { p.mu.Lock(); p.ready = true; p.mu.Unlock() }

// Shutdown marks the service as draining: not ready from now on.
func (p *Probe) Shutdown() { p.mu.Lock(); p.draining = true; p.mu.Unlock() }

// Check returns nil when ready, or why not.
func (p *Probe) Check(ctx context.Context) error {
	p.mu.Lock()
	ready, draining, starting := p.ready, p.draining, p.starting
	checks := make(map[string]Check, len(p.checks))
	for k, v := range p.checks {
		checks[k] = v
	}
	p.mu.Unlock()
	if draining {
		return errors.New("shutting down")
	}
	if !ready && starting != "" {
		return errors.New("starting: " + starting)
	}
	if !ready {
		return errors.New("starting")
	}
	for name, c := range checks {
		if err := c(ctx); err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
	}
	return nil
}

// Limits of the admin server: its connections in all and per source address (a
// Prometheus and a kubelet need a few each), and how long a new connection may take
// to send its request's headers.
const (
	adminMaxConns          = 256
	adminMaxConnsPerSource = 64
	adminHeaderTimeout     = 5 * time.Second
	adminWriteTimeout      = 2 * time.Minute
)

// AdminServer serves /metrics, /healthz and /readyz, and /debug/pprof/ when asked
// (--pprof). It is plain HTTP and holds nothing secret: Prometheus and probes reach it
// without credentials.
type AdminServer struct {
	srv     *http.Server
	ln      net.Listener
	log     zerolog.Logger
	serving sync.Once
	done    chan error // Serve's end (Start)
}

// NewAdminServer binds addr at once (so a port in use is an error at start) and
// returns the server; extra handlers may be added to mux before ListenAndServe.
func NewAdminServer(addr string, reg *prometheus.Registry, probe *Probe, log zerolog.Logger, pprofOn bool) (*AdminServer, *http.ServeMux, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("admin server: %w", err)
	}
	// Probes and scrapes need few connections: a flood of them is refused at once
	// rather than let it use up the process's file descriptors, and one source
	// cannot take every slot.
	refused, err := netx.Refused(reg, "admin")
	if err != nil {
		_ = ln.Close()
		return nil, nil, fmt.Errorf("admin server: %w", err)
	}
	ln = netx.Limit(ln, netx.Options{Max: adminMaxConns, PerSource: adminMaxConnsPerSource, OnReject: refused})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		// The command line may hold secrets (--admin-secret, a password in
		// --redis-url): only the program's name is shown.
		mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = fmt.Fprintf(w, "%s\x00[arguments hidden]", filepath.Base(os.Args[0]))
		})
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := probe.Check(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
		for _, d := range probe.Details() {
			_, _ = fmt.Fprintln(w, d)
		}
	})
	return &AdminServer{
		// A CPU profile or trace streams for its ?seconds= (at most adminWriteTimeout).
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: adminHeaderTimeout, ReadTimeout: 10 * time.Second,
			WriteTimeout: adminWriteTimeout, IdleTimeout: time.Minute},
		ln:   ln,
		log:  log,
		done: make(chan error, 1),
	}, mux, nil
}

// Addr returns the bound address.
func (a *AdminServer) Addr() string { return a.ln.Addr().String() }

// Start serves in the background (once): the probes answer while a start waits for
// something (the service not ready yet).
func (a *AdminServer) Start() {
	a.serving.Do(func() {
		a.log.Info().Str("addr", a.Addr()).Msg("admin server listening")
		go func() {
			err := a.srv.Serve(a.ln)
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				err = fmt.Errorf("admin server: %w", err)
			} else {
				err = nil
			}
			a.done <- err
		}()
	})
}

// ListenAndServe serves (unless Start did already) until Shutdown.
func (a *AdminServer) ListenAndServe() error {
	a.Start()
	return <-a.done
}

// Shutdown stops the server.
func (a *AdminServer) Shutdown(ctx context.Context) error { return a.srv.Shutdown(ctx) }
