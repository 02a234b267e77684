package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
)

// asynqRun runs asynq's side of the workloads once: a redis-server of its own with the
// same settings as this stack's (redis.go), its workers in a process of their own
// (worker.go; poll 0: asynq's defaults, else its polls at that interval), and its
// producers and clients here. It returns the figures by name.
func asynqRun(redisPath string, p params, poll time.Duration) (map[string]float64, error) {
	rs, err := startRedis(redisPath)
	if err != nil {
		return nil, err
	}
	defer rs.stop()
	w, err := startWorker(workerConfig{addr: rs.addr, user: asynqUser, password: rs.asynqPass, workers: p.workers, poll: poll, chain: asynqChain}, p.procs)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	w.check = rs.checkACLLog
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: rs.addr, Username: asynqUser, Password: rs.asynqPass})
	defer func() { _ = c.Close() }()
	out := map[string]float64{}
	cpu := func() map[string]time.Duration {
		// (one read of each process's times: its whole and its part in the kernel)
		client, clientSys := selfTimes()
		worker, workerSys := procTimes(w.pid())
		redis, redisSys := procTimes(rs.pid())
		return map[string]time.Duration{"client": client, "worker": worker, "redis": redis, "kernel": clientSys + workerSys + redisSys}
	}
	for _, phase := range []func() error{
		func() error { return rs.settings(out) },
		func() error { return asynqIndependent(c, w, p, cpu, rs.aofSize, out) },
		func() error { return asynqAwait(c, w, cpu, out) },
		func() error { return asynqChainHops(c, w, out) },
		rs.checkACLLog,
	} {
		if err := phase(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// asynqChain is (d)'s chain length on asynq's side: with asynq's defaults each hop
// waits for its idle poll (~1 s), so 30 of them take half a minute.
const asynqChain = 30

// asynqIndependent is (a): a warm-up of p.warmup tasks through the same path, then
// p.n no-op tasks, each enqueued on its own by p.producers producers, until all ran.
// aofSize reads the append-only file's size (what Redis wrote to it per job).
func asynqIndependent(c *asynq.Client, w *worker, p params, cpu func() map[string]time.Duration, aofSize func() int64, out map[string]float64) error {
	enqueue := func(int) error {
		_, err := c.Enqueue(asynq.NewTask("noop", nil))
		return err
	}
	if p.warmup > 0 {
		if _, err := parallel(p.warmup, p.producers, enqueue); err != nil {
			return err
		}
		if err := w.count(p.warmup); err != nil {
			return err
		}
	}
	cpu0, aof0, start := cpu(), aofSize(), time.Now()
	if _, err := parallel(p.n, p.producers, enqueue); err != nil {
		return err
	}
	submitted := time.Since(start)
	if err := w.count(p.warmup + p.n); err != nil {
		return err
	}
	took := time.Since(start)
	if aof1 := aofSize(); aof0 >= 0 && aof1 >= 0 {
		out["a_aof_bytes_per_job"] = float64(aof1-aof0) / float64(p.n)
	}
	out["a_jobs_per_s"] = float64(p.n) / took.Seconds()
	out["a_submit_per_s"] = float64(p.n) / submitted.Seconds()
	cpuPerJob(out, "a_cpu_us_", cpu0, cpu(), p.n)
	return nil
}

// asynqAwait is (c): enqueue a task and wait for its handler's signal (asynq has no
// run-and-await call; the worker process writes the task's payload to its pipe, which
// this process reads), at 16 clients (latency) and at 128 (throughput).
func asynqAwait(c *asynq.Client, w *worker, cpu func() map[string]time.Duration, out map[string]float64) error {
	var seq atomic.Int64
	run := func(int) error {
		id := fmt.Sprint(seq.Add(1))
		ch := w.await(id)
		if _, err := c.Enqueue(asynq.NewTask("await", []byte(id))); err != nil {
			return err
		}
		select {
		case <-ch:
			return nil
		case <-time.After(10 * time.Minute):
			return fmt.Errorf("asynq: task %s did not run in 10 minutes", id)
		}
	}
	lat, err := parallel(4000, 16, run)
	if err != nil {
		return err
	}
	out["c_run16_p50_ms"], out["c_run16_p99_ms"] = pct(lat, 0.5), pct(lat, 0.99)
	cpu0, start := cpu(), time.Now()
	if _, err := parallel(10000, 128, run); err != nil {
		return err
	}
	out["c_run128_jobs_per_s"] = 10000 / time.Since(start).Seconds()
	cpuPerJob(out, "c_run128_cpu_us_", cpu0, cpu(), 10000)
	return nil
}

// asynqChainHops is (d): a chain of asynqChain tasks, each enqueued by the one before's
// handler; the worker process measures each hop.
func asynqChainHops(c *asynq.Client, w *worker, out map[string]float64) error {
	if _, err := c.Enqueue(asynq.NewTask("hop", []byte("0"))); err != nil {
		return err
	}
	hops, err := w.chain()
	if err != nil {
		return err
	}
	out["d_hop_p50_us"], out["d_hop_p99_us"] = pct(hops, 0.5), pct(hops, 0.99)
	return nil
}

// cpuPerJob sets <prefix><part> to each part's CPU from cpu0 to cpu1 per job of n, and
// <prefix>per_job to their sum.
func cpuPerJob(out map[string]float64, prefix string, cpu0, cpu1 map[string]time.Duration, n int) {
	var all time.Duration
	for part := range cpu1 {
		d := cpu1[part] - cpu0[part]
		if part != "kernel" { // (a share of the others', not a part of its own)
			all += d
		}
		out[prefix+part] = float64(d.Microseconds()) / float64(n)
	}
	out[prefix+"per_job"] = float64(all.Microseconds()) / float64(n)
}

// parallel makes n calls from conc goroutines and returns each call's latency (ms).
func parallel(n, conc int, call func(i int) error) ([]float64, error) {
	lat := make([]float64, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	var failed atomic.Bool
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := call(i); err != nil {
					once.Do(func() { first = err; failed.Store(true) })
					return
				}
				lat[i] = float64(time.Since(t0).Microseconds()) / 1000
			}
		}()
	}
	wg.Wait()
	return lat, first
}

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[int(p*float64(len(s)-1))]
}

// ctxTimeout is a context for one administrative call.
func ctxTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}
