package store_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A rate limit's count over time, with the time made up: between claims the test
// moves the bucket's last refill (at_ms) back by a step's milliseconds, as if they
// had passed (the real ones, seconds at 3 jobs an hour, add less than a hundredth of
// a token). At 3 jobs an hour and a burst of 2, over some 40 simulated hours of
// uneven steps, each claim starts exactly what the bucket holds (its whole tokens,
// capped at the burst), no more and no fewer: a token lost or made at a wake would
// show (at 50/s over 30 s, 5 % is 75 starts). A claim that starts none parks the
// queue in coord:delayed due when the bucket's next token comes, by the bucket's own
// clock (not later: the scheduler wakes the queue then), and a claim that much later
// starts one.
func TestRunLimitRateCount(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	const rate, per = 3, 3600000.0 // 3 an hour, per in ms
	const burst = 2
	if err := db.SetLimit(ctx, &model.RunLimit{Scope: "context", Rate: rate, Per: "1h", Burst: burst}); err != nil {
		t.Fatal(err)
	}
	submitN(t, s, 200, "", 0, "")
	rdb, coord := srv.Client(t, 1), srv.Client(t, 0)
	bucket := keys.LimitBucket("context")
	// pass makes ms of the bucket's time pass (none before a start wrote it).
	pass := func(ms int64) {
		t.Helper()
		if rdb.Exists(ctx, bucket).Val() == 1 {
			if err := rdb.HIncrBy(ctx, bucket, "at_ms", -ms).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	claim := func() int {
		t.Helper()
		got, err := db.ClaimStarts(ctx, "queue:sh", "w1", time.Minute, make([]string, 8), store.Wake{})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range got {
			if x.Outcome != store.StartRun {
				t.Fatalf("claim %s: outcome %v, %v", x.Claim.Item, x.Outcome, x.Err)
			}
		}
		return len(got)
	}
	tokens := float64(burst) // the bucket as the test counts it
	// steps in ms (1,200,000: a token); the tokens' fractions stay clear of a whole
	// one by more than the real time can add
	steps := []int64{0, 300000, 420000, 1200000, 60000, 780000, 2460000, 400020, 400020, 399960, 1140000, 60, 1800000, 150000, 1050000, 540000, 660000, 3600000}
	started := 0
	for round := 0; round < 6; round++ {
		for _, ms := range steps {
			pass(ms)
			tokens = math.Min(burst, tokens+float64(ms)*rate/per)
			want := min(8, int(math.Floor(tokens+1e-6)))
			if n := claim(); n != want {
				t.Fatalf("round %d, after %d ms: %d started, want %d (the bucket holds %.4f)", round, ms, n, want, tokens)
			}
			tokens -= float64(want)
			started += want
			if want > 0 {
				continue
			}
			// parked until the bucket's next token, by its own clock
			b, err := rdb.HMGet(ctx, bucket, "tokens", "at_ms").Result()
			if err != nil {
				t.Fatal(err)
			}
			have, _ := strconv.ParseFloat(fmt.Sprint(b[0]), 64)
			at, _ := strconv.ParseInt(fmt.Sprint(b[1]), 10, 64)
			next := at + int64(math.Ceil((1-have)*per/rate))
			due, err := coord.ZScore(ctx, keys.Delayed, "1:limit:queue:sh").Result()
			if err != nil {
				t.Fatalf("a claim stopped by the rate parked nothing in %s: %v", keys.Delayed, err)
			}
			if d := int64(due); d < next-1 || d > next+1 {
				t.Fatalf("the parked queue is due at %d, %d ms from the bucket's next token (%d)", d, d-next, next)
			}
			coord.ZRem(ctx, keys.Delayed, "1:limit:queue:sh") // as the scheduler's wake does
			need := int64(math.Ceil((1 - tokens) * per / rate))
			pass(need)
			tokens += float64(need) * rate / per
			if n := claim(); n != 1 {
				t.Fatalf("at its next token's time the queue's claim started %d, want 1 (the bucket holds %.4f)", n, tokens)
			}
			tokens--
			started++
		}
	}
	if started < 6*len(steps)/2 {
		t.Fatalf("only %d started", started)
	}
	t.Logf("%d jobs started over %d simulated steps", started, 6*len(steps))
}
