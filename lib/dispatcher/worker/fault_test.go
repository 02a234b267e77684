package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/dispatcher"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// TestRedisRestartWhileJobsFinish (issue 17): Redis goes down (both ways) while 16
// jobs run and stays down while they end (3 s, and 10 s). The worker neither panics
// nor stops: once Redis is back every job's end is written, each job ran once (one end
// line in its ledger file), and a job queued after the restart runs too. Before the
// fix, the claim loop's blocking pop dereferenced a nil connection after a failed
// reconnect, and an end that could not be written was left claimed.
func TestRedisRestartWhileJobsFinish(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make test-quick): this test takes Redis down for seconds, twice; make test runs it")
	}
	for _, tc := range []struct {
		how  string
		down time.Duration
	}{{redistest.DownShutdown, 3 * time.Second}, {redistest.DownKill, 10 * time.Second}} {
		t.Run(fmt.Sprintf("%s-%s", tc.how, tc.down), func(t *testing.T) {
			if _, err := os.Stat("/usr/bin/redis-cli"); err != nil {
				t.Skip("redis-cli not installed: the job scripts of this test use it")
			}
			rs := redistest.Start(t, redistest.Options{ExtraArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}})
			h := &harness{t: t, rdb: rs.Client(t, 0), keys: dispatcher.NewKeys(""), logs: &syncBuffer{}}
			h.port = rs.Addr[strings.LastIndex(rs.Addr, ":")+1:]
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("worker logs:\n%s", h.logs.String())
				}
			})
			opt, _ := redis.ParseURL(rs.URL)
			opt.MaxRetries = -1
			h.worker(Params{Redis: redis.NewClient(opt), Workers: sh("ft"), Concurrency: 16, BlockTimeout: time.Second})
			ledger := t.TempDir()
			const n = 16
			ids := make([]string, n)
			for i := range ids {
				ids[i] = dispatcher.NewJobID()
				// start line, a signal while Redis is up, then the end comes while it is down
				script := fmt.Sprintf(`echo start >> %s/$HERO_JOB_ID; %s LPUSH test:started x >/dev/null; %s BLPOP test:go 30 >/dev/null; sleep 1; echo end >> %s/$HERO_JOB_ID`, ledger, rc, rc, ledger)
				h.seedJob(ids[i], "ft", script, "concurrent", "true")
				h.push("ft", ids[i])
			}
			for range n {
				h.signal("started", time.Minute)
			}
			// Release the jobs, then take Redis down while they sleep and end.
			if err := h.rdb.LPush(context.Background(), "test:go", strings.Split(strings.Repeat("x,", n-1)+"x", ",")).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rs.Down(tc.how); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.down) // the outage under test
			if err := rs.Up(); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if r := h.reply(id, 60*time.Second); r != "" {
					t.Errorf("job %s replied %q, want its (empty) output", id, r)
				}
				if f := h.hash(id); f["status"] != "finished" {
					t.Errorf("job %s: status %q error %q", id, f["status"], f["error"])
				}
				b, _ := os.ReadFile(filepath.Join(ledger, id))
				if got := string(b); got != "start\nend\n" {
					t.Errorf("job %s ledger %q: want one start and one end", id, got)
				}
			}
			// The worker still serves.
			after := dispatcher.NewJobID()
			h.seedJob(after, "ft", "echo after")
			h.push("ft", after)
			if r := h.reply(after, time.Minute); r != "after\n" {
				t.Errorf("job queued after the restart replied %q", r)
			}
		})
	}
}
