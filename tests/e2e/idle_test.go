package e2e

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Idle cost (issue 20): what a stack costs when nothing happens must not grow with the
// number of contexts it serves.

// idleStack starts a stack on a redis-server of its own (databases databases), with
// contexts 1..n, each with runner 1 (declaring no script type: the runner process
// announces its types where it serves, which tells the test it does), and returns
// once the runner serves every context.
func idleStack(tb testing.TB, n, databases int, opt harness.StackOptions) (*redistest.Server, *harness.Stack, *harness.Client) {
	tb.Helper()
	srv, err := redistest.StartServer(redistest.Options{Databases: databases})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Stop)
	s := harness.StartStack(tb, binDir, srv.URL, opt)
	s.CreateActor(tb, 1)
	op, c := s.Operator(), s.Client(1)
	// JSON-RPC batches: thousands of contexts one request at a time take a while.
	for start := 1; start <= n; start += 200 {
		var contexts, runners []map[string]any
		for id := start; id < start+200 && id <= n; id++ {
			contexts = append(contexts, map[string]any{"jsonrpc": "2.0", "id": id, "method": "context.create",
				"params": map[string]any{"context": map[string]any{"id": id, "admins": []int{1}}}})
			runners = append(runners, map[string]any{"jsonrpc": "2.0", "id": id, "method": "runner.create",
				"params": map[string]any{"context_id": id, "runner": map[string]any{"id": 1}}})
		}
		batchCall(tb, op, contexts)
		batchCall(tb, c, runners)
	}
	// Served: runner 1's process announced its script types in every context.
	rc := srv.Client(tb, 0)
	count := redis.NewScript(`local n = 0
for db = 1, tonumber(ARGV[1]) do
  redis.call('SELECT', db)
  if redis.call('HLEN', 'coord:script_types') > 0 then n = n + 1 end
end
return n`)
	if !waitUntil(time.Duration(n/10+60)*time.Second, func() bool {
		got, err := count.Run(context.Background(), rc, nil, n).Int()
		return err == nil && got == n
	}) {
		tb.Fatalf("the runner does not serve all %d contexts", n)
	}
	return srv, s, c
}

// batchCall sends one JSON-RPC batch and fails on any error in it.
func batchCall(tb testing.TB, c *harness.Client, calls []map[string]any) {
	tb.Helper()
	body, _ := json.Marshal(calls)
	req, err := c.NewRequest(body)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := harness.HTTPClient().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var out []struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		tb.Fatalf("batch answer %.300q: %v", b, err)
	}
	for _, r := range out {
		if r.Error != nil {
			tb.Fatalf("batch call: %s", r.Error.Message)
		}
	}
}

// redisInfo reads one field of INFO.
func redisInfo(tb testing.TB, rc *redis.Client, section, field string) int64 {
	tb.Helper()
	info, err := rc.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	tb.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// idleCommands counts the commands Redis processed over d, but for the two INFO
// calls that measure it.
func idleCommands(tb testing.TB, rc *redis.Client, d time.Duration) int64 {
	tb.Helper()
	before := redisInfo(tb, rc, "stats", "total_commands_processed")
	time.Sleep(d) // a measuring window, not a wait for something
	after := redisInfo(tb, rc, "stats", "total_commands_processed")
	return after - before - 1 // the first INFO is counted in after
}

// TestIdleCostFlat: an idle stack serving 200 contexts sends Redis no more commands
// than a bound that does not depend on the number of contexts. Per-context work on
// a timer (a heartbeat per context, a lease sweep of every context, an idle claim
// that looks into every context, a refresh of every context) breaks it at once: at
// 200 contexts each of them alone costs hundreds of commands a second.
func TestIdleCostFlat(t *testing.T) {
	if os.Getenv("HERO_E2E_REDIS") != "" {
		t.Skip("runs on a redis-server of its own")
	}
	const n = 200
	srv, s, _ := idleStack(t, n, 256, harness.StackOptions{})
	// The window covers the runner's idle wait (5 s), heartbeats (1 s) and lease
	// sweeps (lease/3 = 1 s) several times over.
	const window = 6 * time.Second
	cmds := idleCommands(t, srv.Client(t, 0), window)
	rate := float64(cmds) / window.Seconds()
	t.Logf("idle, %d contexts: %d Redis commands in %v (%.1f/s)", n, cmds, window, rate)
	// A flat stack sends ~10 commands a second whatever the number of contexts.
	const bound = 50.0
	if rate > bound {
		t.Errorf("idle stack with %d contexts: %.1f Redis commands/s, over %v/s: per-context work on a timer", n, rate, bound)
	}
	if out := s.Exited(); len(out) > 0 {
		t.Fatalf("services exited: %v", out)
	}
}
