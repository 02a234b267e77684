package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// BenchmarkTenThousandContexts measures the choice of one SELECT-multiplexed pool per
// Redis server (what the store does) against one client per context DB (the obvious
// alternative): the same work — an HSET and an HGETALL in each of 10,000 contexts,
// from 64 goroutines — and the number of connections each opens.
func BenchmarkTenThousandContexts(b *testing.B) {
	const contexts = 10000
	srv10k := redistest.Start(b, redistest.Options{Databases: contexts + 1, ExtraArgs: []string{"--maxclients", "12000"}})
	ctx := context.Background()
	connected := func() int {
		c := redis.NewClient(&redis.Options{Addr: srv10k.Addr})
		defer func() { _ = c.Close() }()
		info := c.Info(ctx, "clients").Val()
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
				n, _ := strconv.Atoi(v)
				return n - 1
			}
		}
		return -1
	}
	work := func(do func(id uint32) error) (time.Duration, error) {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := 0; w < 64; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for id := uint32(w + 1); id <= contexts; id += 64 {
					if err := do(id); err != nil {
						errs <- err
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		return time.Since(start), <-errs
	}
	b.Run("multiplexed-pool", func(b *testing.B) {
		st, err := store.Open(ctx, store.Options{URL: srv10k.URL, PoolSize: 32})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		for i := 0; i < b.N; i++ {
			d, err := work(func(id uint32) error {
				db, err := st.Ctx(id)
				if err != nil {
					return err
				}
				_, err = db.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.HSet(ctx, "bench:obj", "v", id)
					p.HGetAll(ctx, "bench:obj")
					return nil
				})
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(contexts)/d.Seconds(), "contexts/s")
		}
		b.ReportMetric(float64(connected()), "connections")
		fmt.Printf("multiplexed pool: %d connections for %d contexts\n", connected(), contexts)
	})
	b.Run("client-per-context", func(b *testing.B) {
		clients := make([]*redis.Client, contexts+1)
		for id := 1; id <= contexts; id++ {
			clients[id] = redis.NewClient(&redis.Options{Addr: srv10k.Addr, DB: id, PoolSize: 1})
		}
		defer func() {
			for _, c := range clients[1:] {
				_ = c.Close()
			}
		}()
		for i := 0; i < b.N; i++ {
			d, err := work(func(id uint32) error {
				_, err := clients[id].Pipelined(ctx, func(p redis.Pipeliner) error {
					p.HSet(ctx, "bench:obj", "v", id)
					p.HGetAll(ctx, "bench:obj")
					return nil
				})
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(contexts)/d.Seconds(), "contexts/s")
		}
		b.ReportMetric(float64(connected()), "connections")
		fmt.Printf("client per context: %d connections for %d contexts\n", connected(), contexts)
	})
}
