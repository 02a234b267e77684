package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/dispatcher"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// foreignWorker is a worker of another implementation, written with raw Redis
// commands as the seed's worker loop writes them: BLPOP the work queue, HGETALL, HSET
// status started, execute (here: upper-case the script, write log_path), HSET
// finished + output, LPUSH the reply. A script "long" waits for a stop request on
// the stop queue and ends with error stopped_by_request.
func foreignWorker(ctx context.Context, rdb *redis.Client, workerID, logDir string, seen chan<- map[string]string, started chan<- string) {
	for ctx.Err() == nil {
		res, err := rdb.BLPop(ctx, time.Second, "hero:work_queue:"+workerID).Result()
		if err != nil {
			continue
		}
		id := res[1]
		job := rdb.HGetAll(ctx, "hero:job:"+id).Val()
		seen <- job
		now := time.Now().UTC().Format(time.RFC3339)
		rdb.HSet(ctx, "hero:job:"+id, "status", "started", "updated_at", now)
		started <- id
		if job["script"] == "long" {
			for {
				stop, err := rdb.BLPop(ctx, 20*time.Second, "hero:stop_queue:"+workerID).Result()
				if err != nil {
					return
				}
				if stop[1] == id {
					rdb.HSet(ctx, "hero:job:"+id, "status", "error", "error", "stopped_by_request", "updated_at", now)
					rdb.LPush(ctx, "hero:reply:"+id, "stopped_by_request")
					break
				}
			}
			continue
		}
		out := strings.ToUpper(job["script"])
		if p := job["log_path"]; p != "" {
			if !filepath.IsAbs(p) {
				p = filepath.Join(logDir, p)
			}
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			_ = os.WriteFile(p, []byte("log of "+out+"\n"), 0o644)
		}
		rdb.HSet(ctx, "hero:job:"+id, "status", "finished", "output", out, "updated_at", now)
		rdb.LPush(ctx, "hero:reply:"+id, out)
	}
}

// foreignRig is a foreign worker serving "fw" and our Client, for
// TestConformanceForeignWorker's steps.
type foreignRig struct {
	h       *harness
	c       *dispatcher.Client
	fw      *redis.Client // the foreign worker's connection
	seen    chan map[string]string
	started chan string
}

// TestConformanceForeignWorker drives a foreign worker (raw Redis commands) through
// our dispatcher Client: run and await, status, logs, list, stop.
func TestConformanceForeignWorker(t *testing.T) {
	h := newHarness(t)
	logDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rig := &foreignRig{h: h, fw: srv.Client(t, 0), seen: make(chan map[string]string, 10), started: make(chan string, 10)}
	go foreignWorker(ctx, rig.fw, "fw", logDir, rig.seen, rig.started)
	c, err := dispatcher.NewClient(h.rdb, dispatcher.ClientOptions{LogDir: logDir})
	if err != nil {
		t.Fatal(err)
	}
	rig.c = c

	job := rig.runAndAwait(ctx, t)
	rig.status(ctx, t, job)
	rig.logs(ctx, t, job)
	// list_jobs: SCAN, the job is there.
	if ids := listAll(t, c); len(ids) != 1 || ids[0] != job.ID {
		t.Errorf("list_jobs = %v, want [%s]", ids, job.ID)
	}
	rig.stop(ctx, t)
	rig.failedRun(ctx, t)
	rig.noReply(ctx, t)
}

// runAndAwait: run_job_and_await_result (HSET, LPUSH, BLPOP reply); what the foreign
// worker read is the seed's hash, field by field.
func (rig *foreignRig) runAndAwait(ctx context.Context, t *testing.T) *dispatcher.Job {
	job := &dispatcher.Job{CallerID: "caller-1", ContextID: "ctx-9", Script: "hello", Timeout: 30 * time.Second, Retries: 2,
		LogPath: "fw/hello.log", EnvVars: map[string]string{"A": "1"}, Dependencies: []string{}}
	res, err := rig.c.RunJobAndAwaitResult(ctx, job, "fw", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reply != "HELLO" || res.Job.Status != dispatcher.StatusFinished || res.Job.Output != "HELLO" {
		t.Fatalf("run result: reply %q status %q output %q", res.Reply, res.Job.Status, res.Job.Output)
	}
	stored := <-rig.seen
	<-rig.started
	if !uuidV4.MatchString(stored["id"]) || stored["id"] != job.ID {
		t.Errorf("id %q is not the job's UUID v4 %q", stored["id"], job.ID)
	}
	want := map[string]string{
		"caller_id": "caller-1", "worker_id": "fw", "context_id": "ctx-9", "script": "hello", "timeout": "30",
		"retries": "2", "concurrent": "false", "log_path": "fw/hello.log", "status": "dispatched",
		"env_vars": `{"A":"1"}`, "dependencies": "[]",
	}
	for k, v := range want {
		if stored[k] != v {
			t.Errorf("field %s = %q, want %q", k, stored[k], v)
		}
	}
	for _, k := range []string{"created_at", "updated_at"} {
		if !iso8601.MatchString(stored[k]) {
			t.Errorf("%s = %q, not ISO 8601", k, stored[k])
		}
	}
	for _, k := range []string{"output", "error"} {
		if _, ok := stored[k]; ok {
			t.Errorf("a new job has the worker's field %s", k)
		}
	}
	return job
}

// status: get_job_status (HGETALL, parse status).
func (rig *foreignRig) status(ctx context.Context, t *testing.T, job *dispatcher.Job) {
	st, err := rig.c.JobStatus(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != dispatcher.StatusFinished || st.Output != "HELLO" || st.WorkerID != "fw" || st.CallerID != "caller-1" || st.Timeout != 30*time.Second {
		t.Errorf("status: %+v", st)
	}
	if _, err := rig.c.JobStatus(ctx, "no-such-job"); !errors.Is(err, dispatcher.ErrNotFound) {
		t.Errorf("status of an unknown job: %v, want ErrNotFound", err)
	}
}

// logs: get_job_logs reads log_path from the file system (inside the log directory).
func (rig *foreignRig) logs(ctx context.Context, t *testing.T, job *dispatcher.Job) {
	logs, err := rig.c.JobLogs(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if text, src := logs.Text(); src != "file" || text != "log of HELLO\n" {
		t.Errorf("logs = %q from %s (file error %q)", text, src, logs.FileError)
	}
}

// stop: stop_job (LPUSH hero:stop_queue:<worker_id> <id>); the foreign worker stops it.
func (rig *foreignRig) stop(ctx context.Context, t *testing.T) {
	long := &dispatcher.Job{Script: "long"}
	if err := rig.c.SubmitJob(ctx, long, "fw"); err != nil {
		t.Fatal(err)
	}
	<-rig.seen
	if got := <-rig.started; got != long.ID {
		t.Fatalf("foreign worker started %s, want %s", got, long.ID)
	}
	w, err := rig.c.StopJob(ctx, long.ID)
	if err != nil || w != "fw" {
		t.Fatalf("stop_job: worker %q, %v", w, err)
	}
	if r := rig.h.reply(long.ID, time.Minute); r != "stopped_by_request" {
		t.Errorf("reply after stop = %q", r)
	}
	st, _ := rig.c.JobStatus(ctx, long.ID)
	if st.Status != dispatcher.StatusError || st.Error != "stopped_by_request" {
		t.Errorf("stopped job: status %q error %q", st.Status, st.Error)
	}
	if _, err := rig.c.StopJob(ctx, "nope"); !errors.Is(err, dispatcher.ErrNotFound) {
		t.Errorf("stop of an unknown job: %v", err)
	}
}

// failedRun: a failing job as the foreign worker reports it; the caller tells by status.
func (rig *foreignRig) failedRun(ctx context.Context, t *testing.T) {
	go func() {
		// Play a worker that fails this one.
		res, err := rig.fw.BLPop(ctx, 10*time.Second, "hero:work_queue:none").Result()
		if err == nil {
			rig.fw.HSet(ctx, "hero:job:"+res[1], "status", "error", "error", "boom")
			rig.fw.LPush(ctx, "hero:reply:"+res[1], "boom")
		}
	}()
	r2, err := rig.c.RunJobAndAwaitResult(ctx, &dispatcher.Job{Script: "anything"}, "none", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Reply != "boom" || r2.Job.Status != dispatcher.StatusError || r2.Job.Error != "boom" {
		t.Errorf("failed run: %+v / %+v", r2, r2.Job)
	}
}

// noReply: no reply in time is ErrTimeout, and the job is left as it is.
func (rig *foreignRig) noReply(ctx context.Context, t *testing.T) {
	tj := &dispatcher.Job{Script: "never"}
	if _, err := rig.c.RunJobAndAwaitResult(ctx, tj, "nobody-serves-this", time.Second); !errors.Is(err, dispatcher.ErrTimeout) {
		t.Errorf("run with no worker: %v, want ErrTimeout", err)
	}
	if n := rig.h.rdb.LLen(ctx, "hero:work_queue:nobody-serves-this").Val(); n != 1 {
		t.Errorf("the unserved job is not on its queue (%d)", n)
	}
}

func listAll(t *testing.T, c *dispatcher.Client) []string {
	t.Helper()
	var ids []string
	var cursor uint64
	for {
		page, next, err := c.ListJobs(context.Background(), cursor, 50)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, page...)
		if next == 0 {
			return ids
		}
		cursor = next
	}
}

// TestListJobsScan: list_jobs pages through a large keyspace with SCAN and returns
// exactly the job ids, none of the other keys.
func TestListJobsScan(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	c, _ := dispatcher.NewClient(h.rdb, dispatcher.ClientOptions{})
	want := map[string]bool{}
	p := h.rdb.Pipeline()
	for i := 0; i < 3000; i++ {
		id := dispatcher.NewJobID()
		want[id] = true
		p.HSet(ctx, "hero:job:"+id, "id", id, "status", "dispatched")
		p.Set(ctx, "other:"+id, "x", 0)
		p.RPush(ctx, "hero:reply:"+id, "x")
	}
	p.Set(ctx, "hero:coord:log:abc", "x", 0)
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, id := range listAll(t, c) {
		if !want[id] {
			t.Fatalf("list_jobs returned %q, not a job id", id)
		}
		got[id] = true
	}
	if len(got) != len(want) {
		t.Fatalf("list_jobs found %d of %d jobs", len(got), len(want))
	}
	// A custom prefix.
	c2, _ := dispatcher.NewClient(h.rdb, dispatcher.ClientOptions{Prefix: "herotest:"})
	h.rdb.HSet(ctx, "herotest:job:one", "status", "dispatched")
	if ids := listAll(t, c2); len(ids) != 1 || ids[0] != "one" {
		t.Fatalf("list with prefix herotest: = %v", ids)
	}
}
