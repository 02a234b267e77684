package retry

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	for _, e := range Examples() {
		if got := Decide(e.Attempt, e.Backoff); got != e.Want {
			t.Errorf("%s: %+v, want %+v", e.Name, got, e.Want)
		}
	}
}

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	p := Policy{Base: 100 * ms, Cap: time.Second}
	top := func(n int64) int64 { return n - 1 } // the highest jitter
	cases := []struct {
		name    string
		p       Policy
		attempt uint32
		rnd     func(int64) int64
		want    time.Duration
	}{
		{"first failure: half the base, no jitter drawn", p, 1, func(int64) int64 { return 0 }, 50 * ms},
		{"first failure: the base at most", p, 1, top, 100 * ms},
		{"doubles", p, 2, top, 200 * ms},
		{"doubles again", p, 3, top, 400 * ms},
		{"capped", p, 5, top, time.Second},
		{"capped far out (no overflow)", p, 200, top, time.Second},
		{"no jitter function: the whole delay", p, 2, nil, 200 * ms},
		{"no base: no delay", Policy{}, 3, top, 0},
		{"cap below the base", Policy{Base: time.Second, Cap: 300 * ms}, 1, top, 300 * ms},
	}
	for _, c := range cases {
		if got := c.p.Backoff(c.attempt, c.rnd); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestOutcomeNames(t *testing.T) {
	for o, want := range map[Outcome]string{Done: "done", Retry: "retry", Failed: "failed"} {
		if o.String() != want {
			t.Errorf("%d: %q, want %q", o, o.String(), want)
		}
	}
}
