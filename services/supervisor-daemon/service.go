package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/hero-coordinator/hero/lib/app"
	"github.com/hero-coordinator/hero/lib/grpcx"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

func run(ctx context.Context, cfg *Config, env *app.Env) error {
	// The gRPC interceptors exist before the server; the authenticator needs Redis.
	holder := &authenticator{}
	metrics := newAPIMetrics(env.Registry)
	unary, stream := authInterceptors(holder, metrics)
	b, err := app.NewBase(ctx, env, &cfg.Common, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	if err != nil {
		return err
	}
	auth, err := newAuthenticator(ctx, b.Store, cfg.secrets(), env.Log)
	if err != nil {
		return err
	}
	*holder = *auth

	sc, err := grpcx.Dial(cfg.SchedulerAddr, nil)
	if err != nil {
		return err
	}
	defer func() { _ = sc.Close() }()

	disp, err := newDispatcherService(ctx, &cfg.Dispatcher, &cfg.Common, cfg.RunMargin, env.Registry)
	if err != nil {
		return err
	}
	defer disp.Close()
	svc := &service{store: b.Store, scheduler: herov1.NewSchedulerClient(sc), waiter: newWaiter(), log: env.Log, runMargin: cfg.RunMargin, dispatcher: disp}
	herov1.RegisterCoordinatorServer(b.GRPC.Server, &coordinatorServer{s: svc})
	herov1.RegisterDispatcherServer(b.GRPC.Server, &dispatcherServer{d: disp})

	// job.run waits on job-done notifications: subscribe before serving.
	waitCtx, stopWait := context.WithCancel(context.Background())
	subscribed := make(chan struct{})
	waitErr := make(chan error, 1)
	go func() { waitErr <- svc.waiter.run(waitCtx, b.Store, env.Log, subscribed) }()
	select {
	case <-subscribed:
	case err := <-waitErr:
		stopWait()
		return fmt.Errorf("subscribe to job notifications: %v", err)
	case <-time.After(cfg.RedisConnectTimeout):
		stopWait()
		return errors.New("subscribe to job notifications: no answer from redis")
	}
	b.Add("job-notifications", func() error { return <-waitErr }, func(error) { stopWait() })

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		stopWait()
		return fmt.Errorf("json-rpc server: %w", err)
	}
	rpc := newJSONRPCServer(svc, auth, env.Log, metrics, int64(cfg.MaxBodyBytes))
	httpSrv := &http.Server{Handler: rpc, ReadHeaderTimeout: 10 * time.Second}
	b.AddListener("http", ln.Addr().String(), func() error {
		if b.TLS != nil {
			httpSrv.TLSConfig = b.TLS
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
