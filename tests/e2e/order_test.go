package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Issue 48: the order jobs start in — priorities within a queue, fairness between the
// contexts of a shared runner (docs/scheduling.md).

// orderJob is what these tests read of a job.
type orderJob struct {
	ID          uint32 `json:"id"`
	Status      string `json:"status"`
	Priority    uint8  `json:"priority"`
	StartedAtUs int64  `json:"started_at_us"`
	Dispatched  int64  `json:"dispatched_at_ms"`
}

func loadOrderJob(t testing.TB, c *harness.Client, ctxID, id uint32) orderJob {
	t.Helper()
	var j orderJob
	c.MustCall(t, "job.load", map[string]any{"context_id": ctxID, "caller_id": 1, "id": id}, &j)
	return j
}

// submitBatch submits jobs (one JSON-RPC call per 1,000).
func submitBatch(t *testing.T, c *harness.Client, ctxID uint32, jobs []map[string]any) {
	t.Helper()
	for i := 0; i < len(jobs); i += 1000 {
		items := make([]map[string]any, 0, 1000)
		for _, j := range jobs[i:min(i+1000, len(jobs))] {
			items = append(items, map[string]any{"job": j})
		}
		c.MustCall(t, "job.submit_batch", map[string]any{"context_id": ctxID, "jobs": items}, nil)
	}
}

// Acceptance 1: on a busy runner (one slot, taken by a job that waits), 100 queued
// jobs of priorities 1…5 (and none) start best first, each priority in submission
// order; and a priority-5 job queued 4 age steps (priority_age_ms) before priority-1
// jobs starts before them (the documented bound: a job is passed only by jobs of a
// better priority queued less than (its priority − theirs) × priority_age_ms after it).
func TestPriorityOrderOnABusyRunner(t *testing.T) {
	st, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--concurrency", "1"}})
	block := func() uint32 {
		sl := newSleeper(t, fmt.Sprint("block", time.Now().UnixNano()))
		var sub struct {
			Job orderJob `json:"job"`
		}
		c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"script": sl.script, "script_type": "sh"}}, &sub)
		sl.pid(t, st)
		return sub.Job.ID
	}
	stop := func(id uint32) {
		c.MustCall(t, "job.stop", map[string]any{"context_id": ctx1, "caller_id": 1, "id": id}, nil)
	}
	// waitStarted waits for the jobs' ends (their job.finished events), then reads them.
	waitStarted := func(ids []uint32) []orderJob {
		left := map[uint32]bool{}
		for _, id := range ids {
			left[id] = true
		}
		// the first check (ev nil): the jobs that ended already
		ok := c.WaitEventOf(t, ctx1, time.Minute, func(ev *herov1.Event) bool {
			if ev == nil {
				for _, id := range ids {
					if loadOrderJob(t, c, ctx1, id).Status == "finished" {
						delete(left, id)
					}
				}
			} else if ev.Type == "job.finished" {
				delete(left, ev.JobId)
			}
			return len(left) == 0
		})
		if !ok {
			t.Fatalf("jobs %v did not end within a minute", left)
		}
		js := make([]orderJob, len(ids))
		for i, id := range ids {
			js[i] = loadOrderJob(t, c, ctx1, id)
		}
		return js
	}

	blocker := block()
	// 100 jobs, priorities in a fixed shuffle, ids 1001… in submission order
	prios := []uint8{0, 1, 2, 3, 4, 5}
	var jobs []map[string]any
	var ids []uint32
	for i := range 100 {
		id := uint32(1001 + i)
		p := prios[(i*7+3)%len(prios)]
		j := map[string]any{"id": id, "script": "true", "script_type": "sh"}
		if p != 0 {
			j["priority"] = p
		}
		jobs = append(jobs, j)
		ids = append(ids, id)
	}
	submitBatch(t, c, ctx1, jobs)
	stop(blocker)
	js := waitStarted(ids)
	slices.SortFunc(js, func(a, b orderJob) int { return int(a.StartedAtUs - b.StartedAtUs) })
	eff := func(p uint8) uint8 {
		if p == 0 {
			return 3
		}
		return p
	}
	for k := 1; k < len(js); k++ {
		a, b := js[k-1], js[k]
		if eff(a.Priority) > eff(b.Priority) || (eff(a.Priority) == eff(b.Priority) && a.ID > b.ID) {
			t.Fatalf("start %d: job %d (priority %d) started before job %d (priority %d)", k, a.ID, eff(a.Priority), b.ID, eff(b.Priority))
		}
	}

	// The bound: with priority_age_ms 500, a priority-5 job queued over 2 s (4 steps)
	// before priority-1 jobs starts first.
	c.MustCall(t, "context.update", map[string]any{"id": ctx1, "priority_age_ms": 500}, nil)
	blocker = block()
	c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 2001, "script": "true", "script_type": "sh", "priority": 5}}, nil)
	// time passing is what this part tests: the low job ages 4 steps and more
	time.Sleep(2100 * time.Millisecond)
	var high []map[string]any
	for i := range 5 {
		high = append(high, map[string]any{"id": 2002 + i, "script": "true", "script_type": "sh", "priority": 1})
	}
	submitBatch(t, c, ctx1, high)
	stop(blocker)
	js = waitStarted([]uint32{2001, 2002, 2003, 2004, 2005, 2006})
	for _, j := range js[1:] {
		if j.StartedAtUs < js[0].StartedAtUs {
			t.Fatalf("priority-1 job %d (queued 2 s later) started before the aged priority-5 job 2001", j.ID)
		}
	}
	// A priority out of range is refused, naming the field.
	err := c.Call("job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"script": "true", "script_type": "sh", "priority": 9}}, nil)
	if re, ok := err.(*harness.RPCError); !ok || re.Code != -32602 || !strings.Contains(re.Message, "job.priority") {
		t.Fatalf("priority 9: %v", err)
	}
}

// Acceptance 2 (fairness): with 10,000 jobs queued in context 1 on a runner it shares
// with context 2, a job submitted to context 2 starts before 10 more of context 1's
// do (counted from the jobs' own start stamps).
func TestFairnessBetweenContexts(t *testing.T) {
	st, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--concurrency", "2"}})
	st.Operator().MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, nil)
	// a context's weight is the operators' to set, not its admins'
	err := c.Call("context.update", map[string]any{"id": 2, "weight": 5}, nil)
	if re, ok := err.(*harness.RPCError); !ok || re.Code != -32003 {
		t.Fatalf("an admin set its context's weight: %v", err)
	}
	var ctx2 struct {
		Weight uint32 `json:"weight"`
	}
	st.Operator().MustCall(t, "context.update", map[string]any{"id": 2, "weight": 2}, &ctx2)
	if ctx2.Weight != 2 {
		t.Fatalf("context.update weight 2 by the operator: %+v", ctx2)
	}
	c.MustCall(t, "runner.create", map[string]any{"context_id": 2, "runner": map[string]any{"id": 1, "script_types": []string{"sh"}}}, nil)
	const n = 10000
	jobs := make([]map[string]any, n)
	for i := range jobs {
		jobs[i] = map[string]any{"id": 1 + i, "script": "true", "script_type": "sh"}
	}
	submitBatch(t, c, ctx1, jobs)
	// context 1's backlog is being worked on
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadOrderJob(t, c, ctx1, 20).Status == "finished" }) {
		t.Fatal("context 1's jobs do not run")
	}
	c.MustCall(t, "job.submit", map[string]any{"context_id": 2, "job": map[string]any{"id": 1, "script": "true", "script_type": "sh"}}, nil)
	var b orderJob
	if !c.WaitEvent(t, 2, time.Minute, func() bool { b = loadOrderJob(t, c, 2, 1); return b.StartedAtUs != 0 }) {
		t.Fatal("context 2's job did not start within a minute")
	}
	// context 1's jobs that started between context 2's job's dispatch and its start
	rdb := redisSrv.Client(t, ctx1)
	if placedSrv != nil {
		rdb = placedSrv.Client(t, ctx1)
	}
	p := rdb.Pipeline()
	cmds := make([]interface{ Val() string }, n)
	for i := range n {
		cmds[i] = p.HGet(context.Background(), "job:1:"+strconv.Itoa(i+1), "started_at_us")
	}
	_, _ = p.Exec(context.Background()) // a job not started yet has no stamp (redis.Nil)
	passed := 0
	for _, cmd := range cmds {
		us, _ := strconv.ParseInt(cmd.Val(), 10, 64)
		if us > b.Dispatched*1000 && us < b.StartedAtUs {
			passed++
		}
	}
	if passed >= 10 {
		t.Fatalf("%d of context 1's jobs started between context 2's job's dispatch and its start, want fewer than 10", passed)
	}
	t.Logf("context 1's jobs started while context 2's waited: %d; its wait %.1f ms", passed, float64(b.StartedAtUs-b.Dispatched*1000)/1000)
}

// Acceptance 2 (keys): 3 concurrency keys × 1,000 no-op handler jobs (go#noop: the
// claims and the keys' limits are what is tested, not the sandbox's start, which
// would make 3,000 sh jobs take minutes) with a limit of 2 per key on one runner (8
// slots): from the jobs' own start and end stamps, at most 2 jobs of a key ever run at
// once (each key reaches 2), and the keys interleave (no key's jobs all start before
// another key's start).
func TestConcurrencyKeysEndToEnd(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--concurrency", "8",
		"--executors", "go;cmd=" + filepath.Join(binDir, harness.ExampleExecutor) + ";size=2;inflight=8"}})
	const perKey = 1000
	keys := []string{"a", "b", "c"}
	var jobs []map[string]any
	for k, key := range keys {
		for i := range perKey {
			jobs = append(jobs, map[string]any{"id": 1 + k*perKey + i, "function_name": "go#noop", "concurrency_key": key, "concurrency_limit": 2})
		}
	}
	// The executor's queue paused while the 3,000 are submitted (key a's first, then
	// b's, then c's): every key's jobs wait before the first starts, so that the keys'
	// interleaving is the claims' round robin, not the submission's order.
	c.MustCall(t, "queue.pause", map[string]any{"context_id": ctx1, "executor": "go"}, nil)
	submitBatch(t, c, ctx1, jobs)
	c.MustCall(t, "queue.resume", map[string]any{"context_id": ctx1, "executor": "go"}, nil)
	last := uint32(len(jobs))
	rdb := redisSrv.Client(t, ctx1)
	if placedSrv != nil {
		rdb = placedSrv.Client(t, ctx1)
	}
	// wait for every job's end
	if !c.WaitEvent(t, ctx1, 5*time.Minute, func() bool {
		return rdb.ZCard(context.Background(), "coord:idx:jobs:finished").Val() >= int64(last)
	}) {
		t.Fatalf("the jobs did not all end: %d finished of %d; held lists %v %v %v", rdb.ZCard(context.Background(), "coord:idx:jobs:finished").Val(), last,
			rdb.LLen(context.Background(), "coord:ckheld:a").Val(), rdb.LLen(context.Background(), "coord:ckheld:b").Val(), rdb.LLen(context.Background(), "coord:ckheld:c").Val())
	}
	type span struct{ start, end int64 }
	spans := map[string][]span{}
	bg := context.Background()
	p := rdb.Pipeline()
	cmds := make([]interface{ Val() []any }, last)
	for i := range last {
		cmds[i] = p.HMGet(bg, "job:1:"+strconv.Itoa(int(i)+1), "concurrency_key", "started_at_us", "finished_at_us", "status")
	}
	if _, err := p.Exec(bg); err != nil {
		t.Fatal(err)
	}
	type start struct {
		at  int64
		key string
	}
	var starts []start
	for i, cmd := range cmds {
		v := cmd.Val()
		key, _ := v[0].(string)
		s, _ := v[1].(string)
		e, _ := v[2].(string)
		st, _ := v[3].(string)
		a, _ := strconv.ParseInt(s, 10, 64)
		b, _ := strconv.ParseInt(e, 10, 64)
		if st != "finished" || a == 0 || b < a {
			t.Fatalf("job %d: status %q, start %d, end %d", i+1, st, a, b)
		}
		spans[key] = append(spans[key], span{a, b})
		starts = append(starts, start{a, key})
	}
	// the most that ran at once per key, in the order Redis recorded the starts and
	// ends (the events' stream order: the runner's clock stamps of a start and of an
	// end written by different connections may cross by the time a loaded machine
	// takes to send them)
	evs, err := rdb.XRange(bg, "coord:events", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	now, most := map[string]int{}, map[string]int{}
	for _, e := range store.EntryEvents(ctx1, evs) { // one entry may hold several events
		id := int(e.JobID)
		if id < 1 || id > int(last) {
			continue
		}
		key := keys[(id-1)/perKey]
		switch e.Type {
		case "job.started":
			now[key]++
			most[key] = max(most[key], now[key])
		case "job.finished", "job.failed":
			now[key]--
		}
	}
	for _, key := range keys {
		if most[key] != 2 {
			t.Errorf("key %s: at most %d of its jobs ran at once, want 2", key, most[key])
		}
	}
	slices.SortFunc(starts, func(x, y start) int { return int(x.at - y.at) })
	// interleaved: in the first tenth of the starts every key has started, and each
	// key's share of it is near a third
	n := map[string]int{}
	for _, s := range starts[:len(starts)/10] {
		n[s.key]++
	}
	for _, key := range keys {
		if n[key] < len(starts)/10/6 {
			t.Errorf("key %s: %d of the first %d starts, want about a third: %v", key, n[key], len(starts)/10, n)
		}
	}
}
