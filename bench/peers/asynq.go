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

// asynqFigures runs the asynq side of each workload against the Redis at addr with asynq's defaults but a concurrency of workers, and
// returns its figures by name.
// cpu reads the CPU time used so far by this process (producers and workers) and by
// the redis-server.
func asynqFigures(addr string, n, producers, workers int, cpu func() (self, redis time.Duration)) (map[string]float64, error) {
	out := map[string]float64{}
	opt := asynq.RedisClientOpt{Addr: addr}
	// (a) n no-op tasks, each enqueued on its own by the producers, until all ran.
	var done atomic.Int64
	all := make(chan struct{})
	target := int64(n)
	rate, err := withServer(opt, workers, func(mux *asynq.ServeMux) {
		mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
			if done.Add(1) == target {
				close(all)
			}
			return nil
		})
	}, func(c *asynq.Client) (float64, error) {
		start := time.Now()
		self0, redis0 := cpu()
		defer func() {
			self1, redis1 := cpu()
			perJob := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
			out["a_cpu_us_per_job"] = perJob(self1 - self0 + redis1 - redis0)
			out["a_cpu_us_redis"] = perJob(redis1 - redis0)
			out["a_cpu_us_client"] = perJob(self1 - self0)
		}()
		if _, err := parallel(n, producers, func(int) error {
			_, err := c.Enqueue(asynq.NewTask("noop", nil))
			return err
		}); err != nil {
			return 0, err
		}
		select {
		case <-all:
		case <-time.After(10 * time.Minute):
			return 0, fmt.Errorf("asynq: %d of %d tasks ran in 10 minutes", done.Load(), n)
		}
		return float64(n) / time.Since(start).Seconds(), nil
	})
	if err != nil {
		return nil, err
	}
	out["a_jobs_per_s"] = rate

	// (c) enqueue and wait for the handler's end (signalled in process: asynq has no
	// run-and-await call), at 16 and at 128 clients.
	var mu sync.Mutex
	waiting := map[string]chan struct{}{}
	_, err = withServer(opt, workers, func(mux *asynq.ServeMux) {
		mux.HandleFunc("await", func(_ context.Context, t *asynq.Task) error {
			mu.Lock()
			ch := waiting[string(t.Payload())]
			mu.Unlock()
			if ch != nil {
				close(ch)
			}
			return nil
		})
	}, func(c *asynq.Client) (float64, error) {
		var seq atomic.Int64
		run := func(int) error {
			id := fmt.Sprint(seq.Add(1))
			ch := make(chan struct{})
			mu.Lock()
			waiting[id] = ch
			mu.Unlock()
			if _, err := c.Enqueue(asynq.NewTask("await", []byte(id))); err != nil {
				return err
			}
			<-ch
			return nil
		}
		lat, err := parallel(4000, 16, run)
		if err != nil {
			return 0, err
		}
		out["c_run16_p50_ms"], out["c_run16_p99_ms"] = pct(lat, 0.5), pct(lat, 0.99)
		start := time.Now()
		if _, err := parallel(10000, 128, run); err != nil {
			return 0, err
		}
		out["c_run128_jobs_per_s"] = 10000 / time.Since(start).Seconds()
		return 0, nil
	})
	if err != nil {
		return nil, err
	}

	// (d) a chain of 200: each handler enqueues the next; the hop is the next
	// handler's start after this one's end (microseconds, one process's clock).
	const chain = 30 // each hop waits for asynq's idle poll (~1 s): 30 of them take half a minute
	ends := make([]time.Time, chain)
	starts := make([]time.Time, chain)
	last := make(chan struct{})
	next := asynq.NewClient(opt)
	defer func() { _ = next.Close() }()
	_, err = withServer(opt, workers, func(mux *asynq.ServeMux) {
		mux.HandleFunc("hop", func(_ context.Context, t *asynq.Task) error {
			var i int
			_, _ = fmt.Sscan(string(t.Payload()), &i)
			starts[i] = time.Now()
			if i+1 == chain {
				close(last)
				return nil
			}
			_, err := next.Enqueue(asynq.NewTask("hop", []byte(fmt.Sprint(i+1))))
			ends[i] = time.Now()
			return err
		})
	}, func(c *asynq.Client) (float64, error) {
		if _, err := c.Enqueue(asynq.NewTask("hop", []byte("0"))); err != nil {
			return 0, err
		}
		select {
		case <-last:
		case <-time.After(10 * time.Minute):
			return 0, fmt.Errorf("asynq: the chain did not end in 10 minutes")
		}
		var hops []float64
		for i := 1; i < chain; i++ {
			hops = append(hops, float64(starts[i].Sub(ends[i-1]).Microseconds()))
		}
		out["d_hop_p50_us"], out["d_hop_p99_us"] = pct(hops, 0.5), pct(hops, 0.99)
		return 0, nil
	})
	return out, err
}

// withServer runs an asynq server with the handlers, calls body with a client, and
// shuts the server down.
func withServer(opt asynq.RedisClientOpt, workers int, handlers func(*asynq.ServeMux), body func(*asynq.Client) (float64, error)) (float64, error) {
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: workers, LogLevel: asynq.WarnLevel})
	mux := asynq.NewServeMux()
	handlers(mux)
	if err := srv.Start(mux); err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	c := asynq.NewClient(opt)
	defer func() { _ = c.Close() }()
	return body(c)
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
