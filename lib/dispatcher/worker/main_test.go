package worker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/dispatcher"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

var srv *redistest.Server

// The test binary doubles as a worker process for the kill -9 test: with
// DISPATCHER_TEST_WORKER set it serves that worker id until killed.
func TestMain(m *testing.M) {
	if os.Getenv("DISPATCHER_TEST_WORKER") != "" {
		os.Exit(runTestWorker())
	}
	os.Exit(redistest.Main(m, &srv))
}

func runTestWorker() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DISPATCHER_TEST_REDIS")})
	w, err := New(Params{
		Redis: rdb, Workers: []Spec{{ID: os.Getenv("DISPATCHER_TEST_WORKER"), Argv: []string{"/bin/sh"}}},
		ProcessID: os.Getenv("DISPATCHER_TEST_PROC"), Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second,
		Log: zerolog.New(os.Stderr).With().Str("service", "testworker").Logger(),
	})
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := w.Run(ctx); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	return 0
}

// syncBuffer collects log lines from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is one test's Redis and workers.
type harness struct {
	t    *testing.T
	rdb  *redis.Client
	keys dispatcher.Keys
	port string
	logs *syncBuffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	srv.Flush(t)
	h := &harness{t: t, rdb: srv.Client(t, 0), keys: dispatcher.NewKeys(""), logs: &syncBuffer{}}
	h.port = srv.Addr[strings.LastIndex(srv.Addr, ":")+1:]
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", h.logs.String())
		}
	})
	return h
}

func (h *harness) needRedisCLI() {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		h.t.Skip("redis-cli not installed: the job scripts of this test use it")
	}
}

// worker starts a worker with test-friendly defaults; it is stopped at the end of
// the test (or by the returned function).
func (h *harness) worker(p Params) (*Worker, func()) {
	h.t.Helper()
	if p.Redis == nil {
		p.Redis = srv.Client(h.t, 0)
	}
	if p.Heartbeat == 0 {
		p.Heartbeat = 100 * time.Millisecond
	}
	if p.StaleAfter == 0 {
		p.StaleAfter = time.Second
	}
	if p.KillGrace == 0 {
		p.KillGrace = 200 * time.Millisecond
	}
	if p.ProcessID == "" {
		p.ProcessID = "test-" + dispatcher.NewJobID()[:8]
	}
	p.Log = zerolog.New(h.logs).With().Timestamp().Str("service", "test").Logger()
	w, err := New(p)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					h.t.Errorf("worker Run: %v", err)
				}
			case <-time.After(time.Minute):
				h.t.Errorf("worker did not stop within a minute")
			}
		})
	}
	h.t.Cleanup(stop)
	select {
	case <-w.Ready():
	case err := <-done:
		h.t.Fatalf("worker ended at start: %v", err)
	case <-time.After(time.Minute):
		h.t.Fatal("worker not ready within a minute")
	}
	return w, stop
}

// rawJob writes a job hash as a foreign client does: HSET hero:job:<id> field value ….
func (h *harness) rawJob(id string, fields ...string) {
	h.t.Helper()
	args := make([]any, 0, len(fields))
	for _, f := range fields {
		args = append(args, f)
	}
	if err := h.rdb.HSet(context.Background(), "hero:job:"+id, args...).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// seedJob writes a complete job hash with the seed's fields, overridden by extra.
func (h *harness) seedJob(id, workerID, script string, extra ...string) {
	h.t.Helper()
	now := "2024-05-01T10:00:00Z"
	f := map[string]string{
		"id": id, "caller_id": "client-1", "worker_id": workerID, "context_id": "ctx-1", "script": script,
		"timeout": "30", "retries": "0", "concurrent": "false", "created_at": now, "updated_at": now,
		"status": "dispatched", "env_vars": `{"RP":"` + h.port + `"}`, "prerequisites": "[]", "dependents": "[]", "dependencies": "[]",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "\x00delete" {
			delete(f, extra[i])
			continue
		}
		f[extra[i]] = extra[i+1]
	}
	var flat []string
	for k, v := range f {
		flat = append(flat, k, v)
	}
	h.rawJob(id, flat...)
}

// push queues a job as a foreign client does: LPUSH hero:work_queue:<worker> <id>.
func (h *harness) push(workerID, id string) {
	h.t.Helper()
	if err := h.rdb.LPush(context.Background(), "hero:work_queue:"+workerID, id).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// reply waits for a job's reply: BLPOP hero:reply:<id> <timeout>.
func (h *harness) reply(id string, within time.Duration) string {
	h.t.Helper()
	res, err := h.rdb.BLPop(context.Background(), within, "hero:reply:"+id).Result()
	if errors.Is(err, redis.Nil) {
		h.t.Fatalf("no reply for job %s within %s; job: %v", id, within, h.hash(id))
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return res[1]
}

// signal waits for a job script's signal (it LPUSHes test:<name>).
func (h *harness) signal(name string, within time.Duration) string {
	h.t.Helper()
	res, err := h.rdb.BLPop(context.Background(), within, "test:"+name).Result()
	if err != nil {
		h.t.Fatalf("no signal %s within %s: %v", name, within, err)
	}
	return res[1]
}

func (h *harness) hash(id string) map[string]string {
	h.t.Helper()
	m, err := h.rdb.HGetAll(context.Background(), "hero:job:"+id).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return m
}

// rc is the redis-cli command a job script uses (RP comes in env_vars).
const rc = `redis-cli -p "$RP"`
