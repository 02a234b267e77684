package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// fakeDispatcher records requests and answers like supervisor-daemon would.
type fakeDispatcher struct {
	herov1.UnimplementedDispatcherServer
	runs  []*herov1.DispatcherRunJobRequest
	auth  []string
	pages int
	addr  string // where fakeDispatcherServer serves it
}

func (f *fakeDispatcher) ListJobs(ctx context.Context, r *herov1.DispatcherListJobsRequest) (*herov1.DispatcherListJobsResponse, error) {
	f.pages++
	if r.Cursor == "" {
		return &herov1.DispatcherListJobsResponse{Ids: []string{"a", "b"}, NextCursor: "17"}, nil
	}
	return &herov1.DispatcherListJobsResponse{Ids: []string{"c"}}, nil
}

func (f *fakeDispatcher) JobStatus(ctx context.Context, r *herov1.DispatcherJobStatusRequest) (*herov1.DispatcherJobStatusResponse, error) {
	return &herov1.DispatcherJobStatusResponse{Job: &herov1.DispatcherJob{Id: r.Id, WorkerId: "local", Status: "finished", Output: "hi\n", Timeout: 30,
		CreatedAt: "2025-01-02T03:04:05.000Z"}}, nil
}

func (f *fakeDispatcher) JobLogs(ctx context.Context, r *herov1.DispatcherJobLogsRequest) (*herov1.DispatcherJobLogsResponse, error) {
	return &herov1.DispatcherJobLogsResponse{Id: r.Id, Logs: "line 1\nline 2\n", Source: "redis"}, nil
}

func (f *fakeDispatcher) StopJob(ctx context.Context, r *herov1.DispatcherStopJobRequest) (*herov1.DispatcherStopJobResponse, error) {
	return &herov1.DispatcherStopJobResponse{Id: r.Id, WorkerId: "local", Status: "started"}, nil
}

func (f *fakeDispatcher) RunJob(ctx context.Context, r *herov1.DispatcherRunJobRequest) (*herov1.DispatcherRunJobResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.auth = append(f.auth, md.Get("authorization")...)
	f.runs = append(f.runs, r)
	j := &herov1.DispatcherJob{Id: "j1", WorkerId: r.WorkerId, Script: r.Job.Script, Status: "finished", Output: "out\n"}
	if r.Job.Script == "fail" {
		j.Status, j.Error, j.Output = "error", "exit code 3", ""
	}
	return &herov1.DispatcherRunJobResponse{Job: j, Reply: j.Output}, nil
}

// fakeDispatcherServer serves a fakeDispatcher and runs heroctl dispatcher commands
// against it with the operator secret.
func fakeDispatcherServer(t *testing.T) (*fakeDispatcher, func(args ...string) (string, error)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	fake := &fakeDispatcher{addr: ln.Addr().String()}
	herov1.RegisterDispatcherServer(gs, fake)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return fake, func(args ...string) (string, error) {
		var out, errw bytes.Buffer
		c := &cli{g: &globals{addr: ln.Addr().String(), secret: "s3cret-s3cret-s3cret", plain: true, output: "table", timeout: 5 * time.Second}, out: &out, errw: &errw}
		err := c.dispatch(context.Background(), append([]string{"dispatcher"}, args...))
		return out.String(), err
	}
}

func TestDispatcherRun(t *testing.T) {
	fake, runCmd := fakeDispatcherServer(t)
	out, err := runCmd("run", "--worker", "local", "--script", "echo hi", "--env", "A=1", "--timeout", "30", "--retries", "2",
		"--log-path", "x/y.log", "--depends", "d1, d2", "--concurrent", "--caller", "me")
	if err != nil || out != "out\n" {
		t.Fatalf("run: %q %v", out, err)
	}
	r := fake.runs[0]
	if r.WorkerId != "local" || r.Job.Script != "echo hi" || r.Job.EnvVars["A"] != "1" || r.Job.Timeout != 30 || r.Job.Retries != 2 ||
		r.Job.LogPath != "x/y.log" || strings.Join(r.Job.Dependencies, ",") != "d1,d2" || !r.Job.Concurrent || r.Job.CallerId != "me" {
		t.Errorf("run request %v", r)
	}
	if len(fake.auth) == 0 || fake.auth[0] != "Bearer s3cret-s3cret-s3cret" {
		t.Errorf("no operator secret sent: %v", fake.auth)
	}
	if _, err := runCmd("run", "--worker", "local", "--script", "fail"); err == nil || !strings.Contains(err.Error(), "exit code 3") {
		t.Errorf("failed run: %v", err)
	}
	if _, err := runCmd("run", "--script", "x"); err == nil {
		t.Error("run without --worker accepted")
	}
}

func TestDispatcherListAndJobs(t *testing.T) {
	fake, runCmd := fakeDispatcherServer(t)
	out, err := runCmd("list", "--all")
	if err != nil || out != "a\nb\nc\n" || fake.pages != 2 {
		t.Errorf("list --all: %q %v (%d pages)", out, err, fake.pages)
	}
	out, err = runCmd("list")
	if err != nil || !strings.Contains(out, "--cursor 17") {
		t.Errorf("list: %q %v", out, err)
	}
	for _, tc := range []struct {
		verb string
		want []string
	}{
		{"status", []string{"j9", "finished", "30s"}},
		{"logs", []string{"line 1\nline 2\n"}},
		{"stop", []string{"worker local"}},
	} {
		out, err := runCmd(tc.verb, "j9")
		if err != nil {
			t.Errorf("%s: %v", tc.verb, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: %q lacks %q", tc.verb, out, w)
			}
		}
	}
	if _, err := runCmd("status"); err == nil {
		t.Error("status without an id accepted")
	}
	if _, err := runCmd("bogus"); err == nil {
		t.Error("unknown verb accepted")
	}
}
