package store

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/internal/luagen/luaconv"
	"github.com/hero-coordinator/hero/lib/retry"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// The completion scripts' retry_decide (lua/lib_complete.lua) decides every example of
// lib/retry as retry.Decide does: the rules have one source, and the Lua copy is
// held to it.
func TestRetryDecideMatchesThePolicy(t *testing.T) {
	src, err := luaFiles.ReadFile("lua/lib_complete.lua")
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?s)local function retry_decide\(.*?\nend\n`).Find(src)
	if fn == nil {
		t.Fatal("lua/lib_complete.lua defines no retry_decide")
	}
	rdb := redistest.Start(t).Client(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := string(fn) + `return retry_decide(ARGV[1] == '1', tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1', ARGV[5] == '1', tonumber(ARGV[6]), tonumber(ARGV[7]))`
	for _, e := range retry.Examples() {
		a := e.Attempt
		var ra any = ""
		if a.RetryAfter > 0 {
			ra = a.RetryAfter.Milliseconds()
		}
		got, err := rdb.Eval(ctx, script, nil, luaconv.Bool(a.Succeeded), a.Number, a.Retries, luaconv.Bool(a.Fatal), luaconv.Bool(a.StopRequested), ra, e.Backoff.Milliseconds()).Int64()
		retried := err == nil
		if err != nil && err != redis.Nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		want := retry.Decide(a, e.Backoff)
		if retried != (want.Outcome == retry.Retry) || retried && time.Duration(got)*time.Millisecond != want.Delay {
			t.Errorf("%s: Lua retried %v after %d ms; retry.Decide: %v after %v", e.Name, retried, got, want.Outcome, want.Delay)
		}
	}
}
