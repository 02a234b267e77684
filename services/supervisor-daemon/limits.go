package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/time/rate"
)

// callerLimits are the per-caller limits of the public API, kept in this replica's
// memory (each replica limits on its own): a token bucket of calls (a JSON-RPC batch
// costs one token per call in it), and a cap on calls that wait — job.run, flow.wait,
// dispatcher.run_job, Watch — held at once.
type callerLimits struct {
	rate     rate.Limit // calls per second; 0: no limit
	burst    int
	maxWaits int // 0: no cap

	mu      sync.Mutex
	callers map[string]*callerState
	swept   time.Time

	limited *prometheus.CounterVec
	waiting prometheus.Gauge
}

type callerState struct {
	bucket *rate.Limiter
	waits  int
	seen   time.Time
}

func newCallerLimits(perSecond float64, burst, maxWaits int, reg prometheus.Registerer) *callerLimits {
	f := promauto.With(reg)
	return &callerLimits{
		rate: rate.Limit(perSecond), burst: burst, maxWaits: maxWaits, callers: map[string]*callerState{}, swept: time.Now(),
		limited: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_api_rate_limited_total",
			Help: "API calls refused by a per-caller limit, by limit (rate: --rate-limit, waits: --max-waits-per-caller)."}, []string{"limit"}),
		waiting: f.NewGauge(prometheus.GaugeOpts{Name: "hero_api_waiting_calls",
			Help: "Waiting calls (job.run, flow.wait, dispatcher.run_job, Watch) in progress."}),
	}
}

// tooManyError is a refused call with the time after which a retry can succeed.
type tooManyError struct {
	Msg        string
	RetryAfter time.Duration
}

func (e *tooManyError) Error() string { return e.Msg }

func (l *callerLimits) state(key string, now time.Time) *callerState {
	if now.Sub(l.swept) > time.Minute {
		// Forget callers idle for a minute with a full bucket: the map stays as small
		// as the set of recent callers.
		for k, c := range l.callers {
			if c.waits == 0 && now.Sub(c.seen) > time.Minute {
				delete(l.callers, k)
			}
		}
		l.swept = now
	}
	c := l.callers[key]
	if c == nil {
		c = &callerState{bucket: rate.NewLimiter(l.rate, l.burst)}
		l.callers[key] = c
	}
	c.seen = now
	return c
}

// allow takes n tokens for the caller, or says when to retry.
func (l *callerLimits) allow(key string, n int) error {
	if l.rate <= 0 {
		return nil
	}
	now := time.Now()
	l.mu.Lock()
	r := l.state(key, now).bucket.ReserveN(now, n)
	l.mu.Unlock()
	if !r.OK() {
		l.limited.WithLabelValues("rate").Inc()
		return &tooManyError{Msg: fmt.Sprintf("too many requests: %d calls at once is more than the burst of %d (--rate-burst)", n, l.burst), RetryAfter: time.Second}
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		l.limited.WithLabelValues("rate").Inc()
		return &tooManyError{Msg: fmt.Sprintf("too many requests: more than %g calls per second; retry after %v", float64(l.rate), d.Round(time.Millisecond)), RetryAfter: d}
	}
	return nil
}

// wait takes one of the caller's waiting slots; release gives it back.
func (l *callerLimits) wait(key string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.state(key, time.Now())
	if l.maxWaits > 0 && c.waits >= l.maxWaits {
		l.limited.WithLabelValues("waits").Inc()
		return nil, &tooManyError{Msg: fmt.Sprintf("too many requests: %d waiting calls (job.run, flow.wait, Watch) are open already (--max-waits-per-caller)", c.waits), RetryAfter: time.Second}
	}
	c.waits++
	l.waiting.Inc()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			c.waits--
			c.seen = time.Now()
			l.mu.Unlock()
			l.waiting.Dec()
		})
	}, nil
}
