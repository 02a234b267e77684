package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// layeredFlow is the acceptance's flow shape: layers of width no-op handler jobs
// (go#noop), each job of a layer after the first depending on two jobs of the layer
// before.
func layeredFlow(layers, width int) hero.FlowSpec {
	var spec hero.FlowSpec
	name := func(l, i int) string { return "l" + strconv.Itoa(l) + "." + strconv.Itoa(i) }
	for l := range layers {
		for i := range width {
			fj := hero.FlowJob{Name: name(l, i), Job: model.Job{FunctionName: "go#noop"}}
			if l > 0 {
				fj.Depends = []string{name(l-1, i), name(l-1, (i+1)%width)}
			}
			spec.Jobs = append(spec.Jobs, fj)
		}
	}
	return spec
}

// slowest resets Redis's slow log (threshold 10 ms) and returns a function that gives
// the slowest command logged since, and how many passed 10 ms. With
// HERO_BENCH_REDIS_STATS set, every command is logged (threshold 0) and the function
// also prints where Redis's time went, by command and script (printSlowlog).
func slowest(b *testing.B, rc *redis.Client) func() (time.Duration, string, int) {
	ctx := context.Background()
	stats := os.Getenv("HERO_BENCH_REDIS_STATS") != ""
	threshold, fetch := "10000", int64(128)
	if stats {
		threshold, fetch = "0", -1
		if err := rc.ConfigSet(ctx, "slowlog-max-len", "2000000").Err(); err != nil {
			b.Fatal(err)
		}
	}
	if err := rc.ConfigSet(ctx, "slowlog-log-slower-than", threshold).Err(); err != nil {
		b.Fatal(err)
	}
	if err := rc.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		b.Fatal(err)
	}
	return func() (time.Duration, string, int) {
		logs, err := rc.SlowLogGet(ctx, fetch).Result()
		if err != nil {
			b.Fatal(err)
		}
		var worst time.Duration
		var what string
		over := 0
		for _, l := range logs {
			if l.Duration > 10*time.Millisecond {
				over++
			}
			if l.Duration > worst {
				worst, what = l.Duration, strings.Join(l.Args[:min(2, len(l.Args))], " ")
			}
		}
		if stats {
			printSlowlog(b, rc)
		}
		return worst, what, over
	}
}

func usedMemory(b *testing.B, rc *redis.Client) int64 {
	info := rc.Info(context.Background(), "memory").Val()
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}

// BenchmarkBigFlowLifecycle (issue 49): flows of 100 layers × 100 and 1,000 layers ×
// 100 no-op handler jobs (each depending on two of the layer before), through the
// public API with signed calls: created as a unit (flow.begin, job.create_batch of 500
// with flow_id, four at once, flow.create), read page by page (flow.dag, 10,000 a
// page) and counted (flow.counts), started and run to their end (flow.start,
// flow.wait), then deleted (flow.delete, chunks of 500). Each phase reports its time
// per job, the Redis memory per job after the creation and after the run, and Redis's
// slowest command (SLOWLOG, threshold 10 ms), and, after the run, where a finished
// job's bytes are: MEMORY USAGE of the context's keys summed by kind (memoryByKind;
// HERO_BENCH_BIGFLOW_SAMPLES=1 prints a few keys of each kind too), and what else grew
// (MEMORY STATS: the keyspace's table, the clients' buffers; memoryStatsGrowth). It fails (after
// printing the figures) when the 100,000-job flow's creation or run costs more than
// 1.3 times the 10,000-job flow's per job, a finished job of a flow of 100,000 jobs
// holds more than 1 KiB of Redis, or a Redis command of the creation, the run or the deletion took more than
// 10 ms.
func BenchmarkBigFlowLifecycle(b *testing.B) {
	s, c := handlerBenchStackOf(b, 256)
	_ = s
	rc := redisOf(ctx1).Client(b, 0)
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sc.Close() })
	ctx := context.Background()
	type cost struct{ create, run float64 }
	var costs []cost
	sizes := []int{100, 1000}
	if v := os.Getenv("HERO_BENCH_BIGFLOW_LAYERS"); v != "" { // e.g. "1000": the big flow alone
		sizes = nil
		for _, f := range strings.Fields(v) {
			n, _ := strconv.Atoi(f)
			sizes = append(sizes, n)
		}
	}
	for _, layers := range sizes {
		spec := layeredFlow(layers, 100)
		n := len(spec.Jobs)
		order, err := spec.Order()
		if err != nil {
			b.Fatal(err)
		}
		mem0 := usedMemory(b, rc)
		stats0 := memoryStats(b, rc)
		slow := slowest(b, rc)
		t0 := time.Now()
		id := createLayered(b, sc, spec, order)
		create := time.Since(t0)
		cw, cwhat, cn := slow()
		perJob := float64(usedMemory(b, rc)-mem0) / float64(n)

		slow = slowest(b, rc)
		t0 = time.Now()
		nodes := 0
		for off := uint32(0); ; {
			d, err := sc.FlowDAGPage(ctx, id, off, 10000)
			if err != nil {
				b.Fatal(err)
			}
			nodes += len(d.Nodes)
			if off = d.NextOffset; off == 0 {
				break
			}
		}
		read := time.Since(t0)
		t0 = time.Now()
		counts, err := sc.FlowCounts(ctx, id)
		if err != nil || int(counts.Total) != n || nodes != n {
			b.Fatalf("counts %+v, %d nodes read: %v", counts, nodes, err)
		}
		count := time.Since(t0)
		rw, rwhat, rn := slow()

		slow = slowest(b, rc)
		t0 = time.Now()
		sctx, scancel := context.WithTimeout(ctx, 10*time.Minute) // the SDK's default call bound is 30 s
		_, err = sc.StartFlow(sctx, id)
		scancel()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Since(t0)
		f, err := sc.WaitFlow(ctx, id, time.Hour)
		if err != nil || f.Status != model.FlowFinished {
			b.Fatalf("flow %d: %+v, %v", id, f, err)
		}
		run := time.Since(t0)
		uw, uwhat, un := slow()
		finished := float64(usedMemory(b, rc)-mem0) / float64(n)
		rcx := redisOf(ctx1).Client(b, int(ctx1))
		fmt.Printf("BIGFLOW %d jobs: Redis memory per finished job by key kind (MEMORY USAGE): %s\n", n, memoryByKind(b, rcx, n))
		fmt.Printf("BIGFLOW %d jobs: used_memory's growth per finished job by MEMORY STATS item: %s\n", n, memoryStatsGrowth(stats0, memoryStats(b, rc), n))
		if os.Getenv("HERO_BENCH_BIGFLOW_SAMPLES") != "" {
			memorySamples(b, rcx, id)
		}

		slow = slowest(b, rc)
		t0 = time.Now()
		if err := sc.DeleteFlow(ctx, id, false); err != nil {
			b.Fatal(err)
		}
		del := time.Since(t0)
		dw, dwhat, dn := slow()
		fmt.Printf("BIGFLOW %d jobs: create %.1f µs/job (%.2f s), %.0f B/job in Redis; dag read %.1f µs/job (%d pages), counts %.2f ms; start %.2f s; run %.1f µs/job (%.2f s), %.0f B/finished job; delete %.1f µs/job\n",
			n, us(create, n), create.Seconds(), perJob, us(read, n), (n+9999)/10000, float64(count.Microseconds())/1000, start.Seconds(), us(run, n), run.Seconds(), finished, us(del, n))
		fmt.Printf("BIGFLOW %d jobs: slowest Redis command: create %v (%s; %d over 10 ms), read %v (%s; %d), run %v (%s; %d), delete %v (%s; %d)\n",
			n, cw, cwhat, cn, rw, rwhat, rn, uw, uwhat, un, dw, dwhat, dn)
		costs = append(costs, cost{us(create, n), us(run, n)})
		if finished > 1024 && n >= 100000 { // the acceptance's flow: a smaller one spreads fixed costs (the clients' buffers) over fewer jobs
			b.Errorf("%d jobs: %.0f B of Redis per finished job, more than 1 KiB", n, finished)
		}
		if cn+un+dn > 0 {
			b.Errorf("%d jobs: Redis commands over 10 ms: %d in the creation, %d in the run, %d in the deletion", n, cn, un, dn)
		}
	}
	if len(costs) < 2 {
		return
	}
	if r := costs[1].create / costs[0].create; r > 1.3 {
		b.Errorf("creation: %.2f times the 10,000-job flow's cost per job (at most 1.3)", r)
	}
	if r := costs[1].run / costs[0].run; r > 1.3 {
		b.Errorf("run: %.2f times the 10,000-job flow's cost per job (at most 1.3)", r)
	}
	fmt.Printf("BIGFLOW 100,000 against 10,000 jobs, per job: create %.2f×, run %.2f×\n", costs[1].create/costs[0].create, costs[1].run/costs[0].run)
}

// BenchmarkFanOutFanIn10k (issue 49, acceptance 3): a flow of a root, 10,000 no-op
// handler jobs that depend on it and a join that depends on all 10,000, run through
// the public API. Fan-out: from the root's end to the last of its 10,000 dependents
// dispatched (dispatched_at_ms; they are made ready store.ReleaseChunk a call, the
// first ones by the root's completion, the others by the scheduler). Fan-in: from the
// last dependency's end to the join's start. And the slowest Redis command of the
// run (SLOWLOG, threshold 10 ms). It fails when the fan-out takes more than 50 ms, the
// join starts more than 5 ms after, or a command took more than 10 ms.
func BenchmarkFanOutFanIn10k(b *testing.B) {
	_, c := handlerBenchStackOf(b, 256)
	rc := redisOf(ctx1).Client(b, 0)
	rcx := redisOf(ctx1).Client(b, ctx1)
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sc.Close() })
	ctx := context.Background()
	const width = 10000
	spec := hero.FlowSpec{Jobs: []hero.FlowJob{{Name: "root", Job: model.Job{FunctionName: "go#noop"}}}}
	mids := make([]string, width)
	for i := range mids {
		mids[i] = "m" + strconv.Itoa(i)
		spec.Jobs = append(spec.Jobs, hero.FlowJob{Name: mids[i], Depends: []string{"root"}, Job: model.Job{FunctionName: "go#noop"}})
	}
	spec.Jobs = append(spec.Jobs, hero.FlowJob{Name: "join", Depends: mids, Job: model.Job{FunctionName: "go#noop"}})
	order, err := spec.Order()
	if err != nil {
		b.Fatal(err)
	}
	id := createLayered(b, sc, spec, order)
	fl, err := sc.GetFlow(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	slow := slowest(b, rc)
	if _, err := sc.StartFlow(ctx, id); err != nil {
		b.Fatal(err)
	}
	if f, err := sc.WaitFlow(ctx, id, 30*time.Minute); err != nil || f.Status != model.FlowFinished {
		b.Fatalf("flow %d: %+v, %v", id, f, err)
	}
	worst, what, over := slow()
	// the flow's jobs in creation order: the root first, the join last
	jobs := fl.Jobs
	field := func(jid uint32, name string) int64 {
		v, err := rcx.HGet(ctx, keys.Job(fl.CallerID, jid), name).Int64()
		if err != nil {
			b.Fatalf("job %d: %s: %v", jid, name, err)
		}
		return v
	}
	root, join := jobs[0], jobs[len(jobs)-1]
	rootEnd := field(root, "finished_at_us") / 1000
	var lastDispatched, lastEnd int64
	for _, jid := range jobs[1 : len(jobs)-1] {
		lastDispatched = max(lastDispatched, field(jid, "dispatched_at_ms"))
		lastEnd = max(lastEnd, field(jid, "finished_at_us"))
	}
	fanOut := lastDispatched - rootEnd
	fanIn := float64(field(join, "started_at_us")-lastEnd) / 1000
	fmt.Printf("FANOUT 10,000 dependents: all dispatched %d ms after the root's end; FANIN 10,000 dependencies: the join started %.2f ms after the last one's end; slowest Redis command %v (%s; %d over 10 ms)\n",
		fanOut, fanIn, worst, what, over)
	if fanOut > 50 {
		b.Errorf("fan-out: the last dependent dispatched %d ms after the root's end (at most 50)", fanOut)
	}
	if fanIn > 5 {
		b.Errorf("fan-in: the join started %.2f ms after its last dependency's end (at most 5)", fanIn)
	}
	if over > 0 {
		b.Errorf("%d Redis commands over 10 ms, the slowest %v (%s)", over, worst, what)
	}
}

func us(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }

// createLayered creates spec's flow as SubmitFlow does, without starting it.
func createLayered(b *testing.B, sc *hero.Client, spec hero.FlowSpec, order []int) uint32 {
	ctx := context.Background()
	st, err := sc.BeginFlow(ctx, len(spec.Jobs), 0)
	if err != nil {
		b.Fatal(err)
	}
	byName := make(map[string]int, len(spec.Jobs))
	for i, fj := range spec.Jobs {
		byName[fj.Name] = i
	}
	ids := make([]uint32, len(spec.Jobs))
	for k, i := range order {
		ids[i] = st.FirstJob + uint32(k)
	}
	type chunk struct{ from, to int }
	work := make(chan chunk)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			var first error
			for c := range work {
				if first != nil {
					continue // drain: the sender never blocks
				}
				batch := make([]*model.Job, 0, c.to-c.from)
				for _, i := range order[c.from:c.to] {
					j := spec.Jobs[i].Job
					j.ID = ids[i]
					for _, d := range spec.Jobs[i].Depends {
						j.Dependends = append(j.Dependends, ids[byName[d]])
					}
					batch = append(batch, &j)
				}
				_, ierrs, err := sc.CreateFlowJobs(ctx, st.FlowID, batch)
				for _, e := range ierrs {
					if e != nil && err == nil {
						err = e
					}
				}
				first = err
			}
			errs <- first
		}()
	}
	for from := 0; from < len(order); from += 500 {
		work <- chunk{from, min(from+500, len(order))}
	}
	close(work)
	for range 4 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	jobs := make([]uint32, len(order))
	for k, i := range order {
		jobs[k] = ids[i]
	}
	if _, err := sc.CreateFlow(ctx, &model.Flow{ID: st.FlowID, Jobs: jobs}); err != nil {
		b.Fatal(err)
	}
	return st.FlowID
}
