package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/netx"
	"github.com/hero-coordinator/hero/lib/obs"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// maxGroupJobs bounds the jobs of one store call of the group commit.
const maxGroupJobs = 256

// jobDoneLinger is how long coord:jobdone stays followed after the last job.run call
// that waited for it; jobDoneWait bounds a call's wait for its subscription.
const (
	jobDoneLinger = 30 * time.Second
	jobDoneWait   = 2 * time.Second
)

// contextMaxAge is how long a cached context serves submissions before it is read
// again (contextCache: a changed context is seen at once by the guard).
const contextMaxAge = 30 * time.Second

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	// The gRPC interceptors exist before the server; the authenticator needs Redis.
	holder := &authenticator{}
	metrics := newAPIMetrics(env.Registry)
	limits := newCallerLimits(cfg.RateLimit, cfg.RateBurst, cfg.MaxWaits, env.Registry)
	codec := auth.NewDigestCodec("hero.v1")
	unary, stream := authInterceptors(holder, limits, codec, metrics)
	b, err := app.NewBase(ctx, env, &cfg.Common, app.Serving{API: true, APITLS: cfg.APITLS, LoadsScripts: true}, grpc.ForceServerCodecV2(codec), grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	if err != nil {
		return err
	}
	secrets, err := loadOperatorSecrets(ctx, b.Store, cfg.secrets(), cfg.AdminSecretFile, cfg.OperatorSecretKeyFile, env.Log)
	if err != nil {
		return err
	}
	*holder = *newAuthenticator(b.Store, secrets, cfg.AuthWindow, cfg.AuthSessionRecheck, cfg.AuthDevTrustHeader, env.Registry, env.Log)

	sc, err := b.Dial(cfg.SchedulerAddr, "scheduler")
	if err != nil {
		return err
	}
	defer func() { _ = sc.Close() }()

	disp, err := newDispatcherService(ctx, &cfg.Dispatcher, &cfg.Common, b.Store.RedisOptions(), cfg.RunMargin, env.Registry)
	if err != nil {
		return err
	}
	defer disp.Close()
	// The group commit of single submissions: answered before run returns (the
	// servers have stopped by then), then refused.
	groups := newSubmitGroups(b.Store.SubmitGuarded, b.Store.ServerFor, maxGroupJobs, cfg.SubmitInflight, promauto.With(env.Registry).NewHistogram(prometheus.HistogramOpts{
		Name: "hero_api_submit_group_jobs", Help: "Jobs per store call of the group commit of single submissions (job.submit, job.run): concurrent submissions to one context share one call.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 9)}))
	defer groups.shutdown()
	loads := newEndedLoads(b.Store)
	defer loads.shutdown()
	svc := &service{store: b.Store, scheduler: herov1.NewSchedulerClient(sc), waiter: newWaiter(), logs: newWaiter(), log: env.Log, runMargin: cfg.RunMargin, dispatcher: disp, secrets: secrets, metrics: metrics,
		contexts: newContextCache(b.Store, contextMaxAge), groups: groups, loads: loads, maxFlowJobs: cfg.MaxFlowJobs, jobLists: newJobListCache()}
	batches := promauto.With(env.Registry).NewHistogramVec(prometheus.HistogramOpts{
		Name: "hero_api_stream_batch_items", Help: "Submissions (received) or answers (sent) per batch message of a SubmitJobStream.",
		Buckets: prometheus.ExponentialBuckets(2, 2, 8)}, []string{"direction"})
	herov1.RegisterCoordinatorServer(b.GRPC.Server, &coordinatorServer{s: svc, limits: limits, batches: batches})
	herov1.RegisterDispatcherServer(b.GRPC.Server, &dispatcherServer{d: disp})

	// job.run waits on job-done notifications (followed while such calls wait:
	// jobDoneLinger), flow.wait on flow-done ones, and open streams are checked again
	// on notices of credential changes: subscribe before serving.
	svc.jobDone = newOnDemandChannel(keys.JobDone, jobDoneLinger, min(cfg.RedisConnectTimeout, jobDoneWait))
	waitCtx, stopWait := context.WithCancel(context.Background())
	subscribed := make(chan struct{})
	waitErr := make(chan error, 1)
	go func() {
		waitErr <- followNotices(waitCtx, b.Store, []string{keys.FlowDone, keys.AuthChanged, keys.LogAppended}, svc.jobDone, svc.noticeHandler(holder), subscribed)
	}()
	select {
	case <-subscribed:
	case err := <-waitErr:
		stopWait()
		return fmt.Errorf("subscribe to job notifications: %v", err)
	case <-time.After(cfg.RedisConnectTimeout):
		stopWait()
		return errors.New("subscribe to job notifications: no answer from redis")
	}
	b.Add("notifications", func() error { return <-waitErr }, func(error) { stopWait() })
	go holder.streamSweep(waitCtx, cfg.AuthSessionRecheck)

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		stopWait()
		return fmt.Errorf("json-rpc server: %w", err)
	}
	refused, err := netx.Refused(env.Registry, "jsonrpc")
	if err != nil {
		stopWait()
		_ = ln.Close()
		return fmt.Errorf("json-rpc server: %w", err)
	}
	door := netx.Options{Max: cfg.MaxConnections, PerSource: cfg.MaxConnectionsPerSource, Reject: netx.RejectHTTP, OnReject: refused}
	if b.APITLS != nil {
		door.Reject = nil // under TLS a plaintext answer would be noise
	}
	ln = netx.Limit(ln, door)
	rpc := newJSONRPCServer(svc, holder, limits, env.Log, metrics, cfg)
	var handler http.Handler = rpc
	if cfg.Console {
		cons, err := newConsole(svc, holder, limits, rpc.methods, cfg)
		if err != nil {
			stopWait()
			_ = ln.Close()
			return err
		}
		handler = withConsole(rpc, cons)
	}
	// WriteTimeout stays 0: each request sets its own write deadline (waiting methods
	// are exempt), which the server's would override. ReadHeaderTimeout bounds a new
	// connection's TLS handshake, and then its first request's headers.
	httpSrv := &http.Server{Handler: handler, ReadHeaderTimeout: cfg.HandshakeTimeout, ReadTimeout: cfg.HTTPReadTimeout,
		IdleTimeout: cfg.HTTPIdleTimeout, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(obs.Slog(env.Log).Handler(), slog.LevelDebug)}
	b.AddListener("http", ln.Addr().String(), func() error {
		if b.APITLS != nil {
			httpSrv.TLSConfig = b.APITLS
			if err := httpSrv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}
		if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, httpSrv.Shutdown)
	return b.Run(herov1.Coordinator_ServiceDesc.ServiceName, herov1.Dispatcher_ServiceDesc.ServiceName)
}

// noticeHandler hands each notice to what follows its channel: job and flow ends to
// the waiting calls, the on-demand coord:jobdone's confirmations to it, log appends
// to the console's tails, credential changes to the authenticator.
func (svc *service) noticeHandler(holder *authenticator) func(notice) {
	return func(n notice) {
		switch {
		case n.channel == keys.JobDone && (n.again || n.off):
			svc.jobDone.confirmed(n.server, n.off)
		case n.off: // only the on-demand channel is unsubscribed
		case n.channel == keys.LogAppended:
			if !n.again { // a missed append is caught by the tail's renewal (console)
				svc.logs.received(n.channel, n.payload, svc.log)
			}
		case n.channel != keys.AuthChanged:
			if !n.again { // a missed end is caught by the waiting calls' own checks
				svc.waiter.received(n.channel, n.payload, svc.log)
			}
		case n.again:
			holder.authNoticesMissed()
		default:
			holder.authChanged(n.payload)
		}
	}
}
