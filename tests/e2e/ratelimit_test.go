package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// A rate limit end to end, by order and counts (docs/scheduling.md): at 1 job an hour
// with a burst of 3, of 25 jobs 3 start and the next waits, saying why. Raised at run
// time to 4/s with a burst of 1 (no restart), the waiting jobs start only after the
// change, all of them — limit.set wakes the parked queue, then the scheduler's timer
// wakes it at each next token, with no claim loop in between — and by the claims'
// times (the job.started events) no second holds more starts than the rate and the
// burst allow.
func TestRateLimitEndToEnd(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--concurrency", "8"}})
	rdb := redisSrv.Client(t, ctx1)
	if placedSrv != nil {
		rdb = placedSrv.Client(t, ctx1)
	}
	bg := context.Background()
	c.MustCall(t, "limit.set", map[string]any{"context_id": ctx1, "scope": "context", "rate": 1, "per": "1h", "burst": 3}, nil)
	const n = 25
	jobs := make([]map[string]any, n)
	for i := range jobs {
		jobs[i] = map[string]any{"id": 1 + i, "script": "true", "script_type": "sh"}
	}
	submitBatch(t, c, ctx1, jobs)
	// starts: the claims' times (ms) of the job.started events, in order
	starts := func() []int64 {
		evs, err := rdb.XRange(bg, "coord:events", "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, e := range store.EntryEvents(ctx1, evs) { // one entry may hold several events
			if e.Type == string(model.EventJobStarted) {
				out = append(out, e.TimeMs) // the entry's time (its id: <ms>-<seq>)
			}
		}
		slices.Sort(out)
		return out
	}
	const why = "limit context: 1 per 3600000 ms"
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return rdb.HGet(bg, "job:1:4", "held").Val() == why }) {
		t.Fatalf("job 4 does not say it waits for the rate (held %q)", rdb.HGet(bg, "job:1:4", "held").Val())
	}
	changed := time.Now().UnixMilli()
	if got := starts(); len(got) != 3 {
		t.Fatalf("%d jobs started under a burst of 3 at 1 an hour, want 3", len(got))
	}
	c.MustCall(t, "limit.set", map[string]any{"context_id": ctx1, "scope": "context", "rate": 4, "per": "1s", "burst": 1}, nil)
	if !c.WaitEvent(t, ctx1, 2*time.Minute, func() bool { return rdb.ZCard(bg, "coord:idx:jobs:finished").Val() >= n }) {
		t.Fatalf("after the rate was raised %d of %d jobs ended", rdb.ZCard(bg, "coord:idx:jobs:finished").Val(), n)
	}
	got := starts()
	if len(got) != n {
		t.Fatalf("%d job.started events for %d jobs", len(got), n)
	}
	if got[3] < changed {
		t.Fatalf("the 4th job started %d ms before the rate was raised", changed-got[3])
	}
	// 4 tokens a second and the burst's 1; 1 more for a claim's stamp taken by the
	// runner's clock before Redis's (without the limit, the first claim after the
	// change would start 8 at once: the runner's free slots)
	for i, at := range got[3:] {
		k := 0
		for _, b := range got[3+i:] {
			if b < at+1000 {
				k++
			}
		}
		if k > 6 {
			t.Fatalf("%d jobs started within a second from %d ms after the change, under 4/s (burst 1)", k, at-changed)
		}
	}
	if held := rdb.HGet(bg, "job:1:25", "held").Val(); held != "" {
		t.Errorf("the last job, started, still says it is held: %q", held)
	}
}
