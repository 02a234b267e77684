package rrq

import (
	"errors"
	"github.com/hero-coordinator/hero/lib/testutil/proctest"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

var oneConnBin struct {
	once sync.Once
	path string
	err  error
}

// oneConnBinary builds lib/rrq/executor/oneconn: an executor that accepts exactly one
// connection and exits when it closes.
func oneConnBinary(t *testing.T) string {
	t.Helper()
	oneConnBin.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out := filepath.Join(testBinDir, "oneconn")
		if b, err := exec.Command(goTool, "build", "-o", out, "./executor/oneconn").CombinedOutput(); err != nil {
			oneConnBin.err = err
			t.Logf("%s", b)
			return
		}
		oneConnBin.path = out
	})
	if oneConnBin.err != nil {
		t.Fatal(oneConnBin.err)
	}
	return oneConnBin.path
}

func startOneConnPool(t *testing.T, transport Transport, args ...string) (*Pool, *restartLog, error) {
	t.Helper()
	rl := &restartLog{}
	p, err := StartPool(testCtx(t, time.Minute), PoolConfig{
		Name: "oneconn", Command: append([]string{oneConnBinary(t)}, args...), Transport: transport,
		Client:         ClientOptions{MaxInFlight: 4, Connections: 1},
		StartupTimeout: 10 * time.Second, StopGrace: 2 * time.Second, RestartBackoff: 20 * time.Millisecond,
		OnRestart: rl.add,
	})
	if err == nil {
		t.Cleanup(func() { p.Close() })
	}
	return p, rl, err
}

type restartLog struct {
	mu      sync.Mutex
	crashes int
	clean   int
}

func (r *restartLog) add(_ int, _ error, crash bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if crash {
		r.crashes++
	} else {
		r.clean++
	}
}

func (r *restartLog) counts() (crashes, clean int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.crashes, r.clean
}

// An executor that accepts one connection at a time and exits when it closes runs
// request after request with Connections 1: the connection that found it ready
// carries them all, and a cancel travels on it too.
func TestPoolOneConnection(t *testing.T) {
	for _, transport := range []Transport{TransportUnix, TransportTCP} {
		t.Run(string(transport), func(t *testing.T) {
			p, rl, err := startOneConnPool(t, transport)
			if err != nil {
				t.Fatal(err)
			}
			ctx := testCtx(t, 60*time.Second)
			for i := range 20 {
				if i == 10 {
					started := newStarted(t)
					req := NewRequest("job-sleep", "sleep", nil, map[string]any{"seconds": 30, "started": started.Path})
					done := make(chan struct{})
					ch := make(chan execResult, 1)
					go func() {
						out, err := p.Execute(ctx, req)
						ch <- execResult{out, err}
						close(done)
					}()
					// The cancel goes on the request's connection, behind the request.
					if !started.Wait(1, time.Minute) {
						t.Fatal("the sleep call did not start")
					}
					if killed := p.Stop(req.JobID, req.RequestID, 5*time.Second, done, func(err error) { t.Errorf("cancel: %v", err) }); killed {
						t.Fatal("the cancel was not delivered: process killed")
					}
					r := await(t, ch, time.Minute)
					if r.err != nil || r.out.Status != StatusError || r.out.Error == nil || r.out.Error.Type != "cancelled" {
						t.Fatalf("cancelled call: %+v %v", r.out, r.err)
					}
					continue
				}
				out, err := p.Execute(ctx, NewRequest("job-echo", "echo", []any{i}, nil))
				if err != nil || out.Status != StatusSuccess {
					t.Fatalf("call %d: %+v %v", i, out, err)
				}
			}
			st := p.Stats()
			if st.Restarts != 0 || st.Processes[0].Client.Dials != 1 {
				t.Fatalf("restarts %d, connections opened %d; want 0 and 1", st.Restarts, st.Processes[0].Client.Dials)
			}
			// The executor closes its connection and exits 0: started again when the
			// next request needs it, without counting as a crash.
			if out, err := p.Execute(ctx, NewRequest("job-bye", "bye", nil, nil)); err != nil || out.Status != StatusSuccess {
				t.Fatalf("bye: %+v %v", out, err)
			}
			for i := range 3 {
				out, err := p.Execute(ctx, NewRequest("job-after", "echo", []any{i}, nil))
				if err != nil || out.Status != StatusSuccess {
					t.Fatalf("after the exit: %+v %v", out, err)
				}
			}
			if crashes, clean := rl.counts(); crashes != 0 || clean != 1 {
				t.Fatalf("crashes %d, clean restarts %d; want 0 and 1", crashes, clean)
			}
			if err := p.Healthy(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With Connections 1, a cancel that cannot be delivered (no connection) kills the
// request's process at once.
func TestPoolOneConnectionCancelUndeliverable(t *testing.T) {
	p, _, err := startOneConnPool(t, TransportUnix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, time.Minute)
	started := newStarted(t)
	req := NewRequest("job-sleep", "sleep", nil, map[string]any{"seconds": 600, "started": started.Path})
	if err := PrepareRequest(&req); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	ch := make(chan execResult, 1)
	go func() {
		out, err := p.Execute(ctx, req)
		ch <- execResult{out, err}
		close(done)
	}()
	if !started.Wait(1, time.Minute) {
		t.Fatal("the sleep call did not start")
	}
	// Take the connection away from the client: the cancel has nothing to travel on.
	p.procs[0].client.mu.Lock()
	cn := p.procs[0].client.single
	p.procs[0].client.single = nil
	p.procs[0].client.mu.Unlock()
	start := time.Now()
	// A grace of 2 minutes: killed within the test's minute is "at once", not after it.
	if !p.Stop(req.JobID, req.RequestID, 2*time.Minute, done, nil) {
		t.Fatal("not killed")
	}
	if time.Since(start) > time.Minute {
		t.Fatalf("killed after %v, not at once (the grace is 2 minutes)", time.Since(start))
	}
	r := await(t, ch, time.Minute)
	if !errors.Is(r.err, ErrExecutorKilled) {
		t.Fatalf("want ErrExecutorKilled, got %v", r.err)
	}
	cn.fail(errors.New("test done"))
}

// An executor that dies at start fails StartPool; one whose processes keep crashing
// makes the pool unhealthy after CrashLoop crashes in a row, healthy again once a
// process answers.
func TestPoolCrashLoopUnhealthy(t *testing.T) {
	if _, _, err := startOneConnPool(t, TransportUnix, "crash"); err == nil {
		t.Fatal("a pool of an executor that exits at start started")
	}
	var mu sync.Mutex
	var health []bool
	changes := make(chan bool, 8)
	p, err := StartPool(testCtx(t, time.Minute), PoolConfig{
		Name: "crashy", Command: []string{goExampleBinary(t)}, RestartBackoff: 10 * time.Millisecond,
		OnHealth: func(h bool, _ error) { mu.Lock(); health = append(health, h); mu.Unlock(); changes <- h },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := testCtx(t, 60*time.Second)
	for i := range 3 {
		if p.Healthy() != nil {
			t.Fatalf("unhealthy after %d crashes", i)
		}
		if _, err := p.Execute(ctx, NewRequest("job-crash", "crash", nil, nil)); !errors.Is(err, ErrExecutorCrashed) {
			t.Fatalf("crash: %v", err)
		}
	}
	select {
	case h := <-changes:
		if h || p.Healthy() == nil {
			t.Fatalf("the first health change after 3 crashes: healthy=%v", h)
		}
	case <-time.After(time.Minute):
		t.Fatal("not unhealthy a minute after 3 crashes")
	}
	if out, err := p.Execute(ctx, NewRequest("job-ok", "noop", nil, nil)); err != nil || out.Status != StatusSuccess {
		t.Fatalf("noop: %+v %v", out, err)
	}
	if err := p.Healthy(); err != nil {
		t.Fatalf("still unhealthy after an answer: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(health) != 2 || health[0] || !health[1] {
		t.Fatalf("health changes %v, want [false true]", health)
	}
}

// newStarted is a named pipe the test executor's sleep handler writes to when its
// call runs.
func newStarted(t *testing.T) *proctest.Signal {
	t.Helper()
	sig, err := proctest.NewSignal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sig.Close)
	return sig
}
