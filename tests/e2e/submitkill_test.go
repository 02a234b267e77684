package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (issue 51): kill -9 of the supervisor-daemon while 32 producers' Submit
// calls share one stream, several flights of them out and several group commits of
// them being stored: every submission acknowledged is a job in Redis, no job is
// acknowledged twice, and each producer's calls fail (Unavailable) from the kill on
// instead of hanging.
func TestKillSupervisorWithSubmissionsInFlight(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, AdminSecret: c.Secret, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sc.Close() }()
	const producers, before = 32, 2000
	var (
		mu     sync.Mutex
		acked  = map[uint32]int{} // job id → acknowledgements
		caller uint32
		failed []error
		wg     sync.WaitGroup
	)
	enough, stop := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				r, err := sc.Submit(ctx, &model.Job{ScriptType: model.ScriptSh, Script: fmt.Sprintf("echo %d-%d", p, i)}, hero.SubmitOptions{})
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
					mu.Unlock()
					return
				}
				acked[r.Job.ID]++
				caller = r.Job.CallerID
				n := len(acked)
				mu.Unlock()
				if n >= before {
					once.Do(func() { close(enough) })
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	select {
	case <-enough:
	case <-ctx.Done():
		t.Fatal("the producers never had enough submissions acknowledged")
	}
	s.API.Kill() // producers still submitting: flights out, groups being stored
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-ctx.Done():
		close(stop)
		t.Fatal("producers still waiting a minute after the kill")
	}
	rdb := redisSrv.Client(t, int(ctx1))
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != producers {
		t.Errorf("%d producers failed after the kill; want all %d", len(failed), producers)
	}
	for _, err := range failed {
		if ctx.Err() != nil {
			t.Errorf("a producer failed with %v after the test's deadline", err)
		}
	}
	missing := 0
	for id, n := range acked {
		if n != 1 {
			t.Errorf("job %d acknowledged %d times", id, n)
		}
		if rdb.Exists(context.Background(), keys.Job(caller, id)).Val() != 1 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of the %d jobs acknowledged are not in Redis", missing, len(acked))
	}
	t.Logf("%d jobs acknowledged before the kill, all stored", len(acked))
}
