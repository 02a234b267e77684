package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/dispatcher"
	dispatchworker "github.com/hero-coordinator/hero/lib/dispatcher/worker"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// TestDispatcherAPI drives the dispatcher.* methods (as JSON-RPC decodes them) and the
// gRPC Dispatcher service against a real Redis and a lib/dispatcher worker on DB 2.
func TestDispatcherAPI(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	logDir := t.TempDir()
	dc := &dispatcher.ClientConfig{DB: 2, Prefix: "hero:", LogDir: logDir}
	common := &config.Common{RedisURL: srv.URL, RedisPoolSize: 8, RedisConnectTimeout: time.Minute}
	d, err := newDispatcherService(ctx, dc, common, srv.Options(), 30*time.Second, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	startAPIWorker(t, srv, logDir)

	api := &dispatcherAPI{t: t, ctx: ctx, methods: d.rpcMethods(), op: Principal{Operator: true}}
	// Operator only: the protocol has no contexts.
	for name := range api.methods {
		if _, err := api.call(Principal{Actor: 1}, name, `{}`); apiCode(err) != codePermission {
			t.Errorf("%s as an actor: %v", name, err)
		}
	}
	id := api.runJob()
	if srv.Client(t, 2).Exists(ctx, "hero:job:"+id).Val() != 1 {
		t.Error("the job is not in the dispatcher DB (2)")
	}
	api.readJob(id)

	// A failing job comes back with status error.
	res, err := api.call(api.op, "dispatcher.run_job", `{"job":{"worker_id":"api","script":"exit 7"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if rr := res.(*dispatcherRunResult); rr.Job.Status != dispatcher.StatusError || rr.Reply != "exit code 7" {
		t.Errorf("failed run %+v %+v", rr, rr.Job)
	}

	// Errors.
	for _, tc := range []struct {
		method, params string
		want           int
	}{
		{"dispatcher.job_status", `{"id":"nope"}`, codeNotFound},
		{"dispatcher.job_status", `{}`, codeInvalidParams},
		{"dispatcher.stop_job", `{"id":"nope"}`, codeNotFound},
		{"dispatcher.run_job", `{"worker_id":"api","job":{}}`, codeInvalidParams},
		{"dispatcher.run_job", `{"job":{"script":"x"}}`, codeInvalidParams},
		{"dispatcher.run_job", `{"worker_id":"api","job":{"script":"x","retries":300}}`, codeInvalidParams},
		{"dispatcher.run_job", `{"worker_id":"api","job":{"script":"x","bogus":1}}`, codeInvalidParams},
		{"dispatcher.run_job", `{"worker_id":"nobody","timeout":1,"job":{"script":"x"}}`, codeTimeout},
		{"dispatcher.list_jobs", `{"cursor":"abc"}`, codeInvalidParams},
	} {
		if _, err := api.call(api.op, tc.method, tc.params); apiCode(err) != tc.want {
			t.Errorf("%s %s: %v, want code %d", tc.method, tc.params, err, tc.want)
		}
	}

	checkDispatcherGRPC(t, ctx, d)
}

// startAPIWorker runs a lib/dispatcher/worker worker ("api", /bin/sh) on DB 2 until the
// test ends.
func startAPIWorker(t *testing.T, srv *redistest.Server, logDir string) {
	t.Helper()
	ctx := context.Background()
	wc := &dispatchworker.Config{Workers: "api=/bin/sh", DB: 2, Prefix: "hero:", LogDir: logDir, Concurrency: 1, ReplyTTL: time.Hour, StaleAfter: 15 * time.Second}
	w, err := wc.Open(ctx, srv.Options(), "api-test", 5*time.Second, 0, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-done })
	<-w.Ready()
}

// dispatcherAPI calls the dispatcher.* methods as JSON-RPC decodes them.
type dispatcherAPI struct {
	t       *testing.T
	ctx     context.Context
	methods map[string]method
	op      Principal // an operator
}

func (a *dispatcherAPI) call(p Principal, name, params string) (any, error) {
	m, ok := a.methods[name]
	if !ok {
		a.t.Fatalf("no method %s", name)
	}
	return m.call(a.ctx, p, json.RawMessage(params))
}

// apiCode is the API error code of err (0: no error).
func apiCode(err error) int {
	if err == nil {
		return 0
	}
	return toAPIError(err).Code
}

// runJob: run_job → finished, with the reply. It returns the job's id.
func (a *dispatcherAPI) runJob() string {
	t := a.t
	t.Helper()
	res, err := a.call(a.op, "dispatcher.run_job", `{"worker_id":"api","timeout":20,"job":{"script":"echo hi; echo to-log >&2","log_path":"api/x.log","env_vars":{"A":"1"},"caller_id":"me"}}`)
	if err != nil {
		t.Fatal(err)
	}
	rr := res.(*dispatcherRunResult)
	if rr.Reply != "hi\n" || rr.Job.Status != dispatcher.StatusFinished || rr.Job.Output != "hi\n" {
		t.Fatalf("run: %+v %+v", rr, rr.Job)
	}
	b, _ := json.Marshal(res)
	if !strings.Contains(string(b), `"status":"finished"`) || !strings.Contains(string(b), `"caller_id":"me"`) {
		t.Errorf("run_job JSON %s", b)
	}
	return rr.Job.ID
}

// readJob: job_status, job_logs, list_jobs of the job runJob ran (the only one).
func (a *dispatcherAPI) readJob(id string) {
	t := a.t
	t.Helper()
	st, err := a.call(a.op, "dispatcher.job_status", `{"id":"`+id+`"}`)
	if err != nil || st.(*dispatcher.Job).Output != "hi\n" {
		t.Fatalf("job_status %v %v", st, err)
	}
	lg, err := a.call(a.op, "dispatcher.job_logs", `{"id":"`+id+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	if l := lg.(*dispatcherLogsResult); l.Source != "file" || !strings.Contains(l.Logs, "to-log") {
		t.Errorf("job_logs %+v", l)
	}
	ls, err := a.call(a.op, "dispatcher.list_jobs", `{"limit":100}`)
	if err != nil {
		t.Fatal(err)
	}
	if items := ls.(*dispatcherListResult).Items; len(items) != 1 || items[0] != id {
		t.Errorf("list_jobs %v", items)
	}
}

// checkDispatcherGRPC drives the gRPC Dispatcher service, with the principal the
// interceptor sets.
func checkDispatcherGRPC(t *testing.T, ctx context.Context, d *dispatcherService) {
	t.Helper()
	gs := &dispatcherServer{d: d}
	gctx := context.WithValue(ctx, principalKey{}, Principal{Operator: true})
	gr, err := gs.RunJob(gctx, &herov1.DispatcherRunJobRequest{WorkerId: "api", Timeout: 20, Job: &herov1.DispatcherJob{Script: "echo grpc", Retries: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if gr.Reply != "grpc\n" || gr.Job.Status != "finished" || gr.Job.Retries != 1 || gr.Job.CreatedAt == "" {
		t.Errorf("gRPC run %+v", gr)
	}
	gst, err := gs.JobStatus(gctx, &herov1.DispatcherJobStatusRequest{Id: gr.Job.Id})
	if err != nil || gst.Job.Output != "grpc\n" {
		t.Errorf("gRPC status %v %v", gst, err)
	}
	if _, err := gs.StopJob(gctx, &herov1.DispatcherStopJobRequest{Id: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("gRPC stop unknown: %v", err)
	}
	if _, err := gs.ListJobs(context.WithValue(ctx, principalKey{}, Principal{Actor: 3}), &herov1.DispatcherListJobsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC list as actor: %v", err)
	}
	page, err := gs.ListJobs(gctx, &herov1.DispatcherListJobsRequest{Limit: 1000})
	if err != nil || len(page.Ids) < 3 {
		t.Errorf("gRPC list %v %v", page, err)
	}
}
