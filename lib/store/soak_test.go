package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

func usedMemory(b *testing.B) int64 {
	info := srv.Client(b, 0).Info(context.Background(), "memory").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// BenchmarkRetentionSoak drives 100,000 one-job flows through every step the services
// take (start, dispatch, route, claim, start, finish, result, completion) with a 1 ms
// retention, deleting what expires as the scheduler does, and reports Redis's memory
// along the way: it must stay flat.
func BenchmarkRetentionSoak(b *testing.B) {
	if os.Getenv("HERO_BENCH") == "" {
		b.Skip("set HERO_BENCH=1 (make bench)")
	}
	flows := 100000
	if v, err := strconv.Atoi(os.Getenv("HERO_SOAK_FLOWS")); err == nil && v > 0 {
		flows = v
	}
	s := open(b)
	ctx := context.Background()
	db := mustCtx(b, s, 8)
	if _, _, err := s.CreateRunner(ctx, 8, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
		b.Fatal(err)
	}
	step := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	one := func(i int) {
		j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 8, Script: "true", ScriptType: "sh"}, "1")
		step(err)
		f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 8, Jobs: []uint32{j.ID}}, "1")
		step(err)
		jobs, err := db.LoadJobs(ctx, 1, f.Jobs)
		step(err)
		deps, err := store.PlanDAG(f, jobs)
		step(err)
		_, _, _, err = db.StartFlow(ctx, f, jobs, deps, "1")
		step(err)
		// the dispatch routes the job onto queue:sh itself (runner 1 serves sh)
		_, _, ok, why, err := db.Dispatch(ctx, f.ID, jobs[0], "scheduler", 0)
		step(err)
		if !ok {
			b.Fatalf("dispatch: %s", why)
		}
		// runner
		item, _, job, err := db.ClaimStart(ctx, keys.Queue("sh"), "runner", time.Minute, "")
		step(err)
		step(db.AppendLog(ctx, 1, j.ID, []byte("ok\n"), 0))
		_, err = db.FinishJob(ctx, item, job, store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"output": "ok\n", "N": strconv.Itoa(i)}})
		step(err)
		// router: the result to the scheduler
		mk, err := db.Claim(ctx, keys.MsgOut, "router", time.Minute)
		step(err)
		if mk == nil {
			b.Fatal("no result message on msg_out")
		}
		_, err = db.CompleteNode(ctx, store.JobEnd{FlowID: f.ID, CallerID: 1, JobID: j.ID, Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler", Retention: time.Millisecond})
		step(err)
		step(db.Ack(ctx, mk))
		// the wake tokens a blocked consumer would have taken
		s.G().Del(ctx, keys.WakeMsgOut, keys.WakeRunner(1, keys.Queue("sh")))
	}
	expire := func() int {
		n := 0
		for {
			items, err := s.PopExpired(ctx, time.Now(), 1000)
			step(err)
			for _, it := range items {
				step(db.DeleteFlow(ctx, it.FlowID, true, "retention"))
				n++
			}
			if len(items) < 1000 {
				return n
			}
		}
	}
	b.ResetTimer()
	var samples []int64
	deleted := 0
	start := time.Now()
	for i := 1; i <= flows; i++ {
		one(i)
		if i%1000 == 0 {
			deleted += expire()
			step(db.TrimEvents(ctx, time.Now().Add(-time.Second)))
		}
		if i%(flows/10) == 0 {
			samples = append(samples, usedMemory(b))
		}
	}
	deleted += expire()
	b.StopTimer()
	var parts []string
	for _, m := range samples {
		parts = append(parts, fmt.Sprintf("%.1f", float64(m)/(1<<20)))
	}
	fmt.Printf("retention soak: %d one-job flows in %v (%.0f flows/s), %d deleted by retention; Redis used_memory every %d flows (MiB): %s\n",
		flows, time.Since(start).Round(time.Second), float64(flows)/time.Since(start).Seconds(), deleted, flows/10, strings.Join(parts, " "))
	if deleted != flows {
		b.Fatalf("retention deleted %d of %d flows", deleted, flows)
	}
	if len(samples) >= 3 && samples[len(samples)-1] > samples[1]+samples[1]/4 {
		b.Fatalf("memory grew from %d to %d bytes", samples[1], samples[len(samples)-1])
	}
	left := srv.Keys(b, 8)
	if len(left) > 20 {
		b.Fatalf("%d keys left in the context after every flow expired, e.g. %v", len(left), left[:10])
	}
}
