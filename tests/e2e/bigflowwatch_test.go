package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (issue 49, 4): a watcher that reconnects midway misses no event, even
// when the stream grows past the old fixed cap of the context's events (100,000,
// which cut the oldest while a watcher still had them to read: it then got
// OutOfRange). The stream's cap now scales with the jobs the context keeps
// (lib/store's EventsPerJob each): with 7,000 jobs kept, a stream of a little over 100,000
// events keeps them all. A watcher reads the stream from its start, disconnects after
// ten events, a flow of 60 jobs runs and pushes the stream past 100,100 events, and
// the watcher resumes from its tenth event: it reads every event after it, in order,
// up to the flow's end.
func TestWatchResumesPastTheOldEventsCap(t *testing.T) {
	const oldEventsCap = 100000 // lib/store's EventsMaxLen, now the cap's floor
	_, c := newStack(t, harness.StackOptions{})
	ctx := context.Background()
	rc := redisOf(ctx1).Client(t, ctx1)
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sc.Close() }()

	// 7,000 jobs kept (a flow created, not started)
	const kept = 7000
	st, err := sc.BeginFlow(ctx, kept, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	for from := 0; from < kept; from += 500 {
		var batch []*model.Job
		for i := from; i < from+500; i++ {
			id := st.FirstJob + uint32(i)
			batch = append(batch, &model.Job{ID: id, ScriptType: "sh", Script: "true"})
			ids = append(ids, id)
		}
		if _, errs, err := sc.CreateFlowJobs(ctx, st.FlowID, batch); err != nil || firstErr(errs) != nil {
			t.Fatalf("create jobs: %v %v", err, firstErr(errs))
		}
	}
	if _, err := sc.CreateFlow(ctx, &model.Flow{ID: st.FlowID, Jobs: ids}); err != nil {
		t.Fatal(err)
	}
	// the stream filled to 99,950 events
	for n := rc.XLen(ctx, keys.Events).Val(); n < oldEventsCap-50; {
		p := rc.Pipeline()
		for k := n; k < min(n+5000, oldEventsCap-50); k++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, Values: []any{"type", "test.filler", "actor", "test", "time_ms", "0"}})
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		n = rc.XLen(ctx, keys.Events).Val()
	}

	// the watcher: ten events from the start of the stream, then gone
	api := c.API(t)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	first, err := api.Watch(wctx, &herov1.WatchRequest{ContextId: ctx1, AfterId: "0"})
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for range 10 {
		ev, err := first.Recv()
		if err != nil {
			t.Fatal(err)
		}
		last = ev.Event.Id
	}
	cancel()

	// a flow of 100 jobs runs meanwhile: about 400 events in at least 200 entries (a
	// claim's and a finish's job events share entries), past 100,100
	var jobs []jobSpec
	for i := range 100 {
		jobs = append(jobs, jobSpec{id: 900001 + uint32(i), typ: "sh", script: "true"})
	}
	createFlow(t, c, 95, nil, jobs...)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 95}, nil)
	c.WaitFlow(t, ctx1, 95, time.Minute)
	total := rc.XLen(ctx, keys.Events).Val()
	if total <= oldEventsCap+100 {
		t.Fatalf("the stream holds %d events, not past the old cap's trim (%d)", total, oldEventsCap+100)
	}

	// the watcher back, from its tenth event: every event after it, in order, as
	// events.read gives them (a stream entry may hold several events of a script call:
	// docs/data-model.md, coord:events)
	want := eventIDsAfter(t, c, last)
	if len(want) < int(total)-oldEventsCap {
		t.Fatalf("events.read gave %d events after %s, of a stream of %d entries", len(want), last, total)
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	again, err := api.Watch(rctx, &herov1.WatchRequest{ContextId: ctx1, AfterId: last})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		ev, err := again.Recv()
		if err != nil {
			t.Fatalf("the resumed watch, after %d of %d events: %v", i, len(want), err)
		}
		if ev.Event.Id != w {
			t.Fatalf("the resumed watch's event %d is %s, want %s", i, ev.Event.Id, w)
		}
	}
}

// eventIDsAfter is the ids of every event of context ctx1 after the id after, read with
// events.read.
func eventIDsAfter(t *testing.T, c *harness.Client, after string) []string {
	t.Helper()
	var ids []string
	for {
		var ev struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
			Next string `json:"next"`
		}
		c.MustCall(t, "events.read", map[string]any{"context_id": ctx1, "after": after, "limit": 1000}, &ev)
		for _, e := range ev.Events {
			ids = append(ids, e.ID)
		}
		if len(ev.Events) < 1000 {
			return ids
		}
		after = ev.Next
	}
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// A job with more dependents than its completion releases (lib/store's ReleaseChunk,
// 100): its completion, applied by the runner that ran it, makes the first 100 ready
// and wakes the scheduler for the others (coord:due, coord:delayedwake), whose store
// calls make them ready and dispatch them 100 a call (the first call alone, the rest
// pipelined); every dependent runs, then a join of all of them. No-op handler jobs
// (the Go example executor): 1,502 jobs in seconds.
func TestManyDependentsAllRun(t *testing.T) {
	// the safety sweep every 2 s: it reads the flow's DAG in pages (HSCAN) meanwhile
	_, c := newStack(t, harness.StackOptions{SchedulerArgs: []string{"--safety-sweep", "2s"}, RunnerArgs: []string{"--concurrency", "64",
		"--executors", "go;cmd=" + filepath.Join(binDir, harness.ExampleExecutor) + ";size=2;inflight=32;pipeline=32"}})
	c.MustCall(t, "runner.create", map[string]any{"context_id": ctx1, "runner": map[string]any{"id": 2, "script_types": []string{"go"}}}, nil)
	const fan = 1500
	create := func(id uint32, deps []uint32) {
		c.MustCall(t, "job.create", map[string]any{"context_id": ctx1, "job": map[string]any{"id": id, "function_name": "go#noop", "depends": deps}}, nil)
	}
	create(1, nil)
	ids := []uint32{1}
	var mids []uint32
	for i := range fan {
		id := 2 + uint32(i)
		create(id, []uint32{1})
		mids = append(mids, id)
	}
	ids = append(append(ids, mids...), 2+fan)
	create(2+fan, mids)
	c.MustCall(t, "flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": 96, "jobs": ids}}, nil)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 96}, nil)
	if f := c.WaitFlow(t, ctx1, 96, time.Minute); f.Status != "finished" {
		t.Fatalf("flow 96: %+v", f)
	}
	for _, id := range []uint32{2, 2 + 99, 2 + 100, 2 + 199, 2 + 200, 1 + fan, 2 + fan} {
		if j := loadJob(t, c, id); j.Status != "finished" {
			t.Fatalf("job %d: %s", id, j.Status)
		}
	}
}
