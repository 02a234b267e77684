package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// layeredFlow is the acceptance's flow shape: layers of width jobs, each job of a
// layer after the first depending on two jobs of the layer before.
func layeredFlow(layers, width int) hero.FlowSpec {
	var spec hero.FlowSpec
	name := func(l, i int) string { return "l" + strconv.Itoa(l) + "." + strconv.Itoa(i) }
	for l := range layers {
		for i := range width {
			fj := hero.FlowJob{Name: name(l, i), Job: model.Job{ScriptType: "sh", Script: "true"}}
			if l > 0 {
				fj.Depends = []string{name(l-1, i), name(l-1, (i+1)%width)}
			}
			spec.Jobs = append(spec.Jobs, fj)
		}
	}
	return spec
}

// slowest resets Redis's slow log (threshold 10 ms) and returns a function that gives
// the slowest command logged since, and how many passed the threshold.
func slowest(b *testing.B, rc *redis.Client) func() (time.Duration, string, int) {
	ctx := context.Background()
	if err := rc.ConfigSet(ctx, "slowlog-log-slower-than", "10000").Err(); err != nil {
		b.Fatal(err)
	}
	if err := rc.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		b.Fatal(err)
	}
	return func() (time.Duration, string, int) {
		logs, err := rc.SlowLogGet(ctx, 128).Result()
		if err != nil {
			b.Fatal(err)
		}
		var worst time.Duration
		var what string
		for _, l := range logs {
			if l.Duration > worst {
				worst, what = l.Duration, strings.Join(l.Args[:min(2, len(l.Args))], " ")
			}
		}
		return worst, what, len(logs)
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
// 100 jobs (each depending on two of the layer before), through the public API with
// signed calls: created as a unit (flow.begin, job.create_batch of 500 with flow_id,
// four at once, flow.create), read page by page (flow.dag, 10,000 a page) and counted
// (flow.counts), then deleted (flow.delete, chunks of 500). Each phase reports its
// time per job, the Redis memory per job after the creation, and Redis's slowest
// command (SLOWLOG, threshold 10 ms). The flows are not run here.
func BenchmarkBigFlowLifecycle(b *testing.B) {
	s, c := benchStack(b)
	_ = s
	rc := redisOf(ctx1).Client(b, 0)
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sc.Close() })
	ctx := context.Background()
	for _, layers := range []int{100, 1000} {
		spec := layeredFlow(layers, 100)
		n := len(spec.Jobs)
		order, err := spec.Order()
		if err != nil {
			b.Fatal(err)
		}
		mem0 := usedMemory(b, rc)
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
		if err := sc.DeleteFlow(ctx, id, false); err != nil {
			b.Fatal(err)
		}
		del := time.Since(t0)
		dw, dwhat, dn := slow()
		fmt.Printf("BIGFLOW %d jobs: create %.1f µs/job (%.2f s), %.0f B/job in Redis; dag read %.1f µs/job (%d pages), counts %.2f ms; delete %.1f µs/job\n",
			n, us(create, n), create.Seconds(), perJob, us(read, n), (n+9999)/10000, float64(count.Microseconds())/1000, us(del, n))
		fmt.Printf("BIGFLOW %d jobs: slowest Redis command: create %v (%s; %d over 10 ms), read %v (%s; %d), delete %v (%s; %d)\n",
			n, cw, cwhat, cn, rw, rwhat, rn, dw, dwhat, dn)
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
