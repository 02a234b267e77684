// Package retry is the one place that decides what follows a job's attempt: done, a
// retry after a delay, or the end as failed (the coordinator's dead-letter queue).
// The scheduler (services/scheduler) computes a failed run's delay with Policy; the
// completion scripts (lib/store/lua/lib_complete.lua, retry_decide) apply Decide's
// rules atomically to what the job's hash holds, with the delay and the retries
// passed to them as declared arguments; lib/dispatcher/worker decides its immediate
// retries with Decide. The same examples (Examples) test this package and the Lua
// function (lib/store TestRetryDecideMatchesThePolicy).
package retry

import "time"

// Policy is the backoff between attempts: exponential from Base, doubling each
// attempt, capped at Cap, with equal jitter (half fixed, half random).
type Policy struct {
	Base, Cap time.Duration
}

// Backoff is the delay before the attempt after attempt (1-based) failed. rnd(n)
// returns a number in [0, n) (math/rand/v2's Int64N); nil means no jitter (the upper
// bound).
func (p Policy) Backoff(attempt uint32, rnd func(int64) int64) time.Duration {
	d := p.Base
	for i := uint32(1); i < attempt && d < p.Cap; i++ {
		d *= 2
	}
	if d > p.Cap {
		d = p.Cap
	}
	if d <= 0 {
		return 0
	}
	half := d / 2
	if rnd == nil {
		return d
	}
	return half + time.Duration(rnd(int64(d-half)+1))
}

// Attempt is what is known of an attempt that ended.
type Attempt struct {
	Number    int  // the attempt, from 1
	Retries   int  // how many attempts may follow the first
	Succeeded bool // it ended well
	// Fatal: the run said no retry would help (a fatal end, a script that could not
	// start); StopRequested: someone asked the job to stop. Either ends it.
	Fatal, StopRequested bool
	// RetryAfter is the run's own wish for the delay (0: none): it wins over the
	// policy's backoff.
	RetryAfter time.Duration
}

// Outcome is what follows an attempt.
type Outcome int

// The outcomes.
const (
	Done   Outcome = iota // it succeeded
	Retry                 // another attempt, after Decision.Delay
	Failed                // no attempt follows: the job ends failed (the DLQ)
)

func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case Retry:
		return "retry"
	}
	return "failed"
}

// Decision is what follows an attempt, and when.
type Decision struct {
	Outcome Outcome
	Delay   time.Duration // before the retry
}

// Decide applies the rules: a success is done; a fatal end or a stop request fails
// the job; else it is retried while attempts are left (Number ≤ Retries), after the
// run's RetryAfter when it gave one, else after backoff; else it fails.
func Decide(a Attempt, backoff time.Duration) Decision {
	switch {
	case a.Succeeded:
		return Decision{Outcome: Done}
	case a.Fatal || a.StopRequested || a.Number > a.Retries:
		return Decision{Outcome: Failed}
	case a.RetryAfter > 0:
		return Decision{Outcome: Retry, Delay: a.RetryAfter}
	}
	return Decision{Outcome: Retry, Delay: backoff}
}

// Example is one case of the rules: an attempt, the backoff, and the decision.
type Example struct {
	Name    string
	Attempt Attempt
	Backoff time.Duration
	Want    Decision
}

// Examples are the cases of Decide's rules, each once: this package's table test and
// the test of the completion scripts' copy in Lua run them both.
func Examples() []Example {
	ms := time.Millisecond
	return []Example{
		{"success", Attempt{Number: 1, Retries: 2, Succeeded: true}, 100 * ms, Decision{Outcome: Done}},
		{"success on the last attempt", Attempt{Number: 3, Retries: 2, Succeeded: true}, 100 * ms, Decision{Outcome: Done}},
		{"failure with retries left", Attempt{Number: 1, Retries: 2}, 100 * ms, Decision{Outcome: Retry, Delay: 100 * ms}},
		{"failure of the last retry", Attempt{Number: 2, Retries: 2}, 100 * ms, Decision{Outcome: Retry, Delay: 100 * ms}},
		{"failure past the retries", Attempt{Number: 3, Retries: 2}, 100 * ms, Decision{Outcome: Failed}},
		{"failure without retries", Attempt{Number: 1, Retries: 0}, 100 * ms, Decision{Outcome: Failed}},
		{"fatal failure with retries left", Attempt{Number: 1, Retries: 2, Fatal: true}, 100 * ms, Decision{Outcome: Failed}},
		{"stop requested with retries left", Attempt{Number: 1, Retries: 2, StopRequested: true}, 100 * ms, Decision{Outcome: Failed}},
		{"retry-after wins over the backoff", Attempt{Number: 1, Retries: 2, RetryAfter: 7 * ms}, 100 * ms, Decision{Outcome: Retry, Delay: 7 * ms}},
		{"retry-after with no attempt left", Attempt{Number: 3, Retries: 2, RetryAfter: 7 * ms}, 100 * ms, Decision{Outcome: Failed}},
		{"retry-after of a fatal failure", Attempt{Number: 1, Retries: 2, Fatal: true, RetryAfter: 7 * ms}, 100 * ms, Decision{Outcome: Failed}},
		{"no backoff: retried at once", Attempt{Number: 1, Retries: 1}, 0, Decision{Outcome: Retry}},
		{"success of a run marked fatal", Attempt{Number: 1, Retries: 2, Succeeded: true, Fatal: true}, 100 * ms, Decision{Outcome: Done}},
		{"success with a stop requested", Attempt{Number: 1, Retries: 2, Succeeded: true, StopRequested: true}, 100 * ms, Decision{Outcome: Done}},
		{"stop requested with a retry-after", Attempt{Number: 1, Retries: 2, StopRequested: true, RetryAfter: 7 * ms}, 100 * ms, Decision{Outcome: Failed}},
		{"stop requested past the retries", Attempt{Number: 3, Retries: 2, StopRequested: true}, 100 * ms, Decision{Outcome: Failed}},
	}
}
