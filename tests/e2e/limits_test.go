package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Run limits end to end (docs/scheduling.md): limit.set of type:sh with max_running
// 2 on a runner of 8 slots (lease 1 s): of 40 jobs at most 2 run at once (in the order Redis
// recorded the starts and ends: the events' stream), the waiting jobs said why
// (job.held events) and lose it once started, limit.list counts the runs; raising
// the limit at run time (no restart) lets 4 run at once for the next 40; a rate of
// 20/s set then spreads 11 jobs' starts over at least 450 ms. Bad limits are refused
// naming the field, changing nothing.
func TestRunLimitEndToEnd(t *testing.T) {
	// A lease of 1 s: a job's claim, start (its sandbox made) and end's write take more
	// than that on a loaded machine, and the runner must keep the lease all along (a
	// lease kept only while the process ran let the limit give an alive run's slot away).
	_, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--concurrency", "8", "--lease", "1s", "--heartbeat", "250ms"}})
	c.MustCall(t, "limit.set", map[string]any{"context_id": ctx1, "scope": "type:sh", "max_running": 2}, nil)
	rdb := redisSrv.Client(t, ctx1)
	if placedSrv != nil {
		rdb = placedSrv.Client(t, ctx1)
	}
	bg := context.Background()
	run := func(first, n int) int {
		t.Helper()
		var jobs []map[string]any
		for i := range n {
			jobs = append(jobs, map[string]any{"id": first + i, "script": "sleep 0.05", "script_type": "sh"})
		}
		submitBatch(t, c, ctx1, jobs)
		last := int64(first + n - 1)
		if !c.WaitEvent(t, ctx1, 2*time.Minute, func() bool {
			return rdb.ZCard(bg, "coord:idx:jobs:finished").Val() >= last
		}) {
			t.Fatalf("the jobs did not all end: %d of %d finished", rdb.ZCard(bg, "coord:idx:jobs:finished").Val(), last)
		}
		evs, err := rdb.XRange(bg, "coord:events", "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		now, most := 0, 0
		for _, e := range store.EntryEvents(ctx1, evs) { // one entry may hold several events
			id := int(e.JobID)
			if id < first || id >= first+n {
				continue
			}
			switch e.Type {
			case "job.started":
				now++
				most = max(most, now)
			case "job.finished", "job.failed":
				now--
			}
		}
		return most
	}
	if most := run(1, 40); most != 2 {
		t.Errorf("under max_running 2: at most %d jobs ran at once", most)
	}
	held := 0
	for id := 1; id <= 40; id++ {
		if strings.Contains(fmt.Sprint(rdb.HGet(bg, "job:1:"+strconv.Itoa(id), "held").Val()), "limit") {
			held++
		}
	}
	if held != 0 {
		t.Errorf("%d started jobs keep their held field", held)
	}
	if n := countEventsOf(t, rdb, "job.held", "limit type:sh: 2 running"); n == 0 {
		t.Error("no job.held event names the limit")
	}
	var list struct {
		Items []struct {
			Scope      string `json:"scope"`
			MaxRunning int    `json:"max_running"`
			Running    int    `json:"running"`
		} `json:"items"`
	}
	c.MustCall(t, "limit.list", map[string]any{"context_id": ctx1}, &list)
	if len(list.Items) != 1 || list.Items[0].Scope != "type:sh" || list.Items[0].MaxRunning != 2 || list.Items[0].Running != 0 {
		t.Errorf("limit.list: %+v", list)
	}
	// raised at run time
	c.MustCall(t, "limit.set", map[string]any{"context_id": ctx1, "scope": "type:sh", "max_running": 4}, nil)
	if most := run(41, 40); most > 4 || most < 3 {
		t.Errorf("under max_running 4: at most %d jobs ran at once", most)
	}
	// a rate at run time: 20 jobs/s, burst 1, instead of the max
	c.MustCall(t, "limit.set", map[string]any{"context_id": ctx1, "scope": "type:sh", "rate": 20, "per": "1s", "burst": 1}, nil)
	run(81, 11)
	checkRateSpread(t, rdb, 81, 11)
	checkBadLimits(t, c)
	list.Items = nil
	c.MustCall(t, "limit.list", map[string]any{"context_id": ctx1}, &list)
	if len(list.Items) != 1 || list.Items[0].MaxRunning != 0 {
		t.Errorf("a refused limit.set changed the limits: %+v", list)
	}
}

// checkRateSpread checks that n jobs from first, started under 20/s with a burst of
// 1, started no faster: 10 tokens after the first start take 500 ms (less a few ms:
// a start stamp is its process's, after its claim).
func checkRateSpread(t *testing.T, rdb *redis.Client, first, n int) {
	t.Helper()
	checkSpread(t, rdb, first, n, 450*time.Millisecond)
}

// checkSpread checks that the starts of the n jobs from first span at least least.
func checkSpread(t *testing.T, rdb *redis.Client, first, n int, least time.Duration) {
	t.Helper()
	var lo, hi int64
	for id := first; id < first+n; id++ {
		us, _ := strconv.ParseInt(rdb.HGet(context.Background(), "job:1:"+strconv.Itoa(id), "started_at_us").Val(), 10, 64)
		if lo == 0 || us < lo {
			lo = us
		}
		hi = max(hi, us)
	}
	if span := time.Duration(hi-lo) * time.Microsecond; span < least {
		t.Errorf("%d jobs under a rate started within %s (want at least %s)", n, span, least)
	}
}

// checkBadLimits checks that bad limits are refused naming the field.
func checkBadLimits(t *testing.T, c *harness.Client) {
	t.Helper()
	for _, bad := range []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"scope": "queue:sh", "max_running": 1}, "scope"},
		{map[string]any{"scope": "context"}, "max_running"},
		{map[string]any{"scope": "context", "rate": 5, "per": "soon"}, "per"},
		{map[string]any{"scope": "key:k", "rate": 2_000_000}, "rate"},
	} {
		bad.params["context_id"] = ctx1
		err := c.Call("limit.set", bad.params, nil)
		if err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("limit.set %v: %v (want a refusal naming %s)", bad.params, err, bad.field)
		}
	}
}

// countEventsOf counts the context's events of a type whose detail holds sub.
func countEventsOf(t *testing.T, rdb *redis.Client, typ, sub string) int {
	t.Helper()
	evs, err := rdb.XRange(context.Background(), "coord:events", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range store.EntryEvents(ctx1, evs) { // one entry may hold several events
		if e.Type == typ && strings.Contains(e.Detail, sub) {
			n++
		}
	}
	return n
}

// Debounce end to end: 100 submissions of one debounce_key within its window run
// once, the last, at the window's end; the 99 others end error, cancelled, naming the
// debounce (and a job.cancelled event each), never run. A debounce without its window,
// or with run_at, is refused naming the field.
func TestDebounce(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{})
	rdb := redisSrv.Client(t, ctx1)
	if placedSrv != nil {
		rdb = placedSrv.Client(t, ctx1)
	}
	ids := make([]uint32, 0, 100)
	for i := range 100 {
		var r struct {
			Job delayedJob `json:"job"`
		}
		c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"script": fmt.Sprintf("echo %d", i), "script_type": "sh"},
			"debounce_key": "report-7", "debounce": "15s"}, &r)
		if r.Job.Status != "scheduled" {
			t.Fatalf("submission %d: %+v (want scheduled at the window's end)", i, r.Job)
		}
		ids = append(ids, r.Job.ID)
	}
	last := ids[len(ids)-1]
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadDelayed(t, c, last).Status == "finished" }) {
		t.Fatalf("the last submission did not run: %+v", loadDelayed(t, c, last))
	}
	cancelled := 0
	for _, id := range ids[:len(ids)-1] {
		j := loadDelayed(t, c, id)
		if j.Status == "error" && strings.Contains(j.Error, "debounce_key report-7") && j.StartedAtMs == 0 {
			cancelled++
		} else {
			t.Errorf("job %d: %+v (want error, cancelled by the debounce, never run)", id, j)
		}
	}
	if cancelled != 99 {
		t.Errorf("%d of 99 cancelled", cancelled)
	}
	if n := countEventsOf(t, rdb, "job.cancelled", "debounce_key report-7"); n != 99 {
		t.Errorf("%d job.cancelled events name the debounce (want 99)", n)
	}
	for _, bad := range []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"debounce_key": "k"}, "debounce"},
		{map[string]any{"debounce_key": "k", "debounce": "soon"}, "debounce"},
		{map[string]any{"debounce": "5s"}, "debounce_key"},
		{map[string]any{"debounce_key": "k", "debounce": "5s", "delay": "1s"}, "debounce"},
	} {
		bad.params["context_id"] = ctx1
		bad.params["job"] = map[string]any{"script": "true", "script_type": "sh"}
		err := c.Call("job.submit", bad.params, nil)
		if err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("job.submit %v: %v (want a refusal naming %s)", bad.params, err, bad.field)
		}
	}
}

// A rate per concurrency key end to end: key k at 5 jobs/s with a burst of 1 spreads
// its 11 jobs' starts over at least 1.5 s (10 tokens after the first take 2 s; a start
// stamp is its process's, after its claim and its sandbox's handoff, which under load
// can be late for the first job and not for the last: the margin is for that), released by the scheduler as the
// tokens come (job.held and job.released events name the key's rate), while the 6
// jobs of another key on the same queue are not held back: all of them start before
// k's last. Nothing is left held.
func TestKeyRateEndToEnd(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--concurrency", "8"}})
	c.MustCall(t, "limit.set", map[string]any{"context_id": ctx1, "scope": "key:k", "rate": 5, "per": "1s", "burst": 1}, nil)
	rdb := redisSrv.Client(t, ctx1)
	if placedSrv != nil {
		rdb = placedSrv.Client(t, ctx1)
	}
	bg := context.Background()
	var jobs []map[string]any
	for i := range 11 {
		jobs = append(jobs, map[string]any{"id": 1 + i, "script": "true", "script_type": "sh", "concurrency_key": "k", "concurrency_limit": 100})
	}
	for i := range 6 {
		jobs = append(jobs, map[string]any{"id": 12 + i, "script": "true", "script_type": "sh", "concurrency_key": "other", "concurrency_limit": 100})
	}
	submitBatch(t, c, ctx1, jobs)
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool {
		return rdb.ZCard(bg, "coord:idx:jobs:finished").Val() >= 17
	}) {
		t.Fatalf("the jobs did not all end: %d of 17 finished; %d held by the key's rate", rdb.ZCard(bg, "coord:idx:jobs:finished").Val(), rdb.LLen(bg, "coord:ckrate:k").Val())
	}
	checkSpread(t, rdb, 1, 11, 1500*time.Millisecond)
	var lastK int64
	for id := 1; id <= 11; id++ {
		us, _ := strconv.ParseInt(rdb.HGet(bg, "job:1:"+strconv.Itoa(id), "started_at_us").Val(), 10, 64)
		lastK = max(lastK, us)
	}
	for id := 12; id <= 17; id++ {
		if us, _ := strconv.ParseInt(rdb.HGet(bg, "job:1:"+strconv.Itoa(id), "started_at_us").Val(), 10, 64); us == 0 || us >= lastK {
			t.Errorf("job %d of the other key started at %d, not before key k's last start %d: held back by k's rate", id, us, lastK)
		}
	}
	if n := countEventsOf(t, rdb, "job.held", "limit key:k: 5 per 1000 ms"); n == 0 {
		t.Error("no job.held event names the key's rate")
	}
	if n := countEventsOf(t, rdb, "job.released", "limit key:k"); n == 0 {
		t.Error("no job.released event names the key's rate")
	}
	if n := rdb.LLen(bg, "coord:ckrate:k").Val(); n != 0 {
		t.Errorf("%d jobs left held by the key's rate", n)
	}
}
