package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// The Hero Dispatcher protocol served by the real runner binary (--dispatcher-workers)
// and driven through the real supervisor-daemon's dispatcher.* methods, and by a
// foreign client that speaks the protocol with raw Redis commands.
func TestDispatcherThroughTheRunner(t *testing.T) {
	logDir := t.TempDir()
	s, _ := newStack(t, harness.StackOptions{
		RunnerArgs: []string{"--dispatcher-workers", "local=/bin/sh", "--dispatcher-log-dir", logDir},
		APIArgs:    []string{"--dispatcher-log-dir", logDir},
	})
	op := s.Operator()

	// run_job: created, queued, run by the runner's dispatcher worker, reply awaited.
	var run struct {
		Job struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Output string `json:"output"`
		} `json:"job"`
		Reply string `json:"reply"`
	}
	op.MustCall(t, "dispatcher.run_job", map[string]any{"worker_id": "local", "timeout": 30,
		"job": map[string]any{"script": `echo "hi $WHO"`, "env_vars": map[string]string{"WHO": "there"}}}, &run)
	if run.Job.Status != "finished" || run.Reply != "hi there\n" || run.Job.Output != "hi there\n" {
		t.Fatalf("run_job: %+v", run)
	}

	// A foreign client: HSET the job hash, LPUSH its id, BLPOP the reply.
	rdb := redisSrv.Client(t, 0)
	ctx := context.Background()
	id := "6f1c2a9e-8d4b-4c3a-9e2f-1b7d5a0c4e11"
	now := time.Now().UTC().Format(time.RFC3339)
	rdb.HSet(ctx, "hero:job:"+id, "id", id, "caller_id", "client-7", "worker_id", "local", "context_id", "ctx",
		"script", "echo foreign; exit 3", "timeout", "30", "retries", "0", "concurrent", "false", "status", "dispatched",
		"created_at", now, "updated_at", now)
	rdb.LPush(ctx, "hero:work_queue:local", id)
	reply, err := rdb.BLPop(ctx, 30*time.Second, "hero:reply:"+id).Result()
	if err != nil {
		t.Fatalf("no reply for the foreign client's job: %v", err)
	}
	h := rdb.HGetAll(ctx, "hero:job:"+id).Val()
	if h["status"] != "error" || !strings.Contains(h["error"], "exit code 3") || reply[1] != h["error"] {
		t.Fatalf("foreign job: reply %q, hash %v", reply[1], h)
	}

	// job_status and stop_job of a running job through the API.
	long := "7a2d3b0f-9e5c-4d4b-8f3a-2c8e6b1d5f22"
	rdb.HSet(ctx, "hero:job:"+long, "id", long, "caller_id", "client-7", "worker_id", "local", "context_id", "ctx",
		"script", "sleep 30", "timeout", "60", "retries", "0", "concurrent", "false", "status", "dispatched",
		"created_at", now, "updated_at", now)
	rdb.LPush(ctx, "hero:work_queue:local", long)
	var st struct {
		Status string `json:"status"`
	}
	deadline := time.Now().Add(time.Minute)
	for op.MustCall(t, "dispatcher.job_status", map[string]any{"id": long}, &st); st.Status != "started"; op.MustCall(t, "dispatcher.job_status", map[string]any{"id": long}, &st) {
		if time.Now().After(deadline) {
			t.Fatalf("the long job did not start: %s", st.Status)
		}
		// The protocol has no event stream: the status field is all a client can read.
		time.Sleep(20 * time.Millisecond)
	}
	op.MustCall(t, "dispatcher.stop_job", map[string]any{"id": long}, nil)
	reply, err = rdb.BLPop(ctx, 10*time.Second, "hero:reply:"+long).Result()
	if err != nil {
		t.Fatalf("no reply after stop_job: %v", err)
	}
	if h := rdb.HGetAll(ctx, "hero:job:"+long).Val(); h["status"] != "error" || !strings.Contains(h["error"], "stop") {
		t.Fatalf("stopped job: reply %q, hash %v", reply[1], h)
	}
}
