package store_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// Pages cover every job once, newest first, even with many jobs created in the same
// millisecond and jobs created while paging; the status filter uses its own index.
func TestPagination(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 4)
	const n = 1234
	for i := 1; i <= n; i++ {
		if _, _, err := s.CreateJob(ctx, &model.Job{ID: uint32(i), CallerID: 7, ContextID: 4, Script: "true", ScriptType: "sh"}, "7"); err != nil {
			t.Fatal(err)
		}
	}
	// Many share a creation ms; make sure of some exact ties too.
	c4 := srv.Client(t, 4)
	for i := 1; i <= 50; i++ {
		c4.ZAdd(ctx, keys.JobIndex, redis.Z{Score: 1, Member: fmt.Sprintf("7:%d", i)})
	}
	seen := map[string]int{}
	var order []float64
	cursor := ""
	pages := 0
	for {
		members, next, err := db.Page(ctx, keys.JobIndex, cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, m := range members {
			seen[m]++
			order = append(order, c4.ZScore(ctx, keys.JobIndex, m).Val())
		}
		if pages == 3 {
			// A job created mid-listing is newer than the cursor: not in later pages.
			if _, _, err := s.CreateJob(ctx, &model.Job{ID: 99999, CallerID: 7, ContextID: 4, Script: "true", ScriptType: "sh"}, "7"); err != nil {
				t.Fatal(err)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != n {
		t.Fatalf("listed %d distinct jobs, want %d", len(seen), n)
	}
	for m, c := range seen {
		if c != 1 {
			t.Fatalf("%s listed %d times", m, c)
		}
	}
	if !sort.SliceIsSorted(order, func(i, j int) bool { return order[i] > order[j] }) {
		t.Fatal("not newest first")
	}
	if pages != (n+99)/100 {
		t.Errorf("%d pages for %d jobs", pages, n)
	}
	// Status index: dispatched has them all; started none.
	members, _, _ := db.Page(ctx, keys.StatusIndex(keys.JobIndex, "dispatched"), "", 1000)
	if len(members) != 1000 {
		t.Errorf("dispatched index page: %d", len(members))
	}
	if err := db.SetJobStatus(ctx, 7, 5, model.JobStarted); err != nil {
		t.Fatal(err)
	}
	started, _, _ := db.Page(ctx, keys.StatusIndex(keys.JobIndex, "started"), "", 10)
	if len(started) != 1 || started[0] != "7:5" {
		t.Errorf("started index: %v", started)
	}
	if c4.ZScore(ctx, keys.StatusIndex(keys.JobIndex, "dispatched"), "7:5").Err() != redis.Nil {
		t.Error("job 5 still in the dispatched index")
	}
	if _, _, err := db.Page(ctx, keys.JobIndex, "garbage", 10); err == nil {
		t.Error("a bad cursor must be an error")
	}
}

// BenchmarkListMillionJobs lists a context of 1,000,000 jobs page by page (1000 per
// page), checks each job is listed once, and reports the page latency.
func BenchmarkListMillionJobs(b *testing.B) {
	if os.Getenv("HERO_BENCH") == "" {
		b.Skip("set HERO_BENCH=1 (make bench)")
	}
	s := open(b)
	ctx := context.Background()
	db, err := s.Ctx(6)
	if err != nil {
		b.Fatal(err)
	}
	c6 := srv.Client(b, 6)
	const n = 1_000_000
	base := time.Now().UnixMilli()
	for start := 1; start <= n; start += 10000 {
		pipe := c6.Pipeline()
		for i := start; i < start+10000 && i <= n; i++ {
			j := model.Job{ID: uint32(i), CallerID: 1, ContextID: 6, Script: "true", ScriptType: "sh", Status: model.JobFinished,
				CreatedAt: base / 1000, UpdatedAt: base / 1000, Result: map[string]string{"output": "ok\n"}}
			pipe.HSet(ctx, keys.Job(1, uint32(i)), model.HashFields(&j)...)
			// 25 jobs per millisecond: realistic ties.
			pipe.ZAdd(ctx, keys.JobIndex, redis.Z{Score: float64(base + int64(i/25)), Member: "1:" + strconv.Itoa(i)})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		seen := make([]bool, n+1)
		var lat []time.Duration
		cursor := ""
		for {
			t0 := time.Now()
			members, next, err := db.Page(ctx, keys.JobIndex, cursor, 1000)
			if err != nil {
				b.Fatal(err)
			}
			jobs, err := db.LoadJobMembers(ctx, members)
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
			for _, j := range jobs {
				if seen[j.ID] {
					b.Fatalf("job %d listed twice", j.ID)
				}
				seen[j.ID] = true
			}
			if next == "" {
				break
			}
			cursor = next
		}
		for i := 1; i <= n; i++ {
			if !seen[i] {
				b.Fatalf("job %d never listed", i)
			}
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms/page")
		b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms/page")
		fmt.Printf("listing 1,000,000 jobs, 1000 per page (%d pages, each job once): page p50 %v, p99 %v, max %v\n", len(lat), p50.Round(time.Microsecond*10), p99.Round(time.Microsecond*10), lat[len(lat)-1].Round(time.Microsecond*10))
	}
}
