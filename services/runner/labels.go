package main

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// resolved keeps what a key resolves to (a metric vector's children for a label
// value): a job's metrics are then a lookup in a map read without a lock, not the
// vector's check and hash of its label values on every job. Keys are label values,
// bounded as the labels are (executors, script types). A new key copies the map.
type resolved[T any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]T]
}

// get returns what key resolved to, resolving it the first time.
func (r *resolved[T]) get(key string, resolve func(key string) T) T {
	if m := r.m.Load(); m != nil {
		if v, ok := (*m)[key]; ok {
			return v
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.m.Load()
	if old != nil {
		if v, ok := (*old)[key]; ok {
			return v
		}
	}
	next := make(map[string]T, 1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	v := resolve(key)
	next[key] = v
	r.m.Store(&next)
	return v
}

// handlerCallCounters are an executor's hero_handler_calls_total children, by outcome.
type handlerCallCounters struct {
	byOutcome map[string]prometheus.Counter
}

// outcomes of hero_handler_calls_total (besides the protocol's statuses, "failed": no
// outcome).
var handlerCallOutcomes = []string{"success", "retry", "timeout", "error", "failed"}

func newHandlerCallCounters(vec *prometheus.CounterVec, executor string) handlerCallCounters {
	c := handlerCallCounters{byOutcome: make(map[string]prometheus.Counter, len(handlerCallOutcomes))}
	for _, o := range handlerCallOutcomes {
		c.byOutcome[o] = vec.WithLabelValues(executor, o)
	}
	return c
}

// typeCounters are a script type's children of hero_jobs_started_total and
// hero_jobs_finished_total, resolved once per type (jobCounters).
type typeCounters struct {
	started, finished prometheus.Counter
}

// jobCounters returns script type st's started and finished counters.
func (r *runner) jobCounters(st string) typeCounters {
	return r.m.byType.get(st, func(st string) typeCounters {
		return typeCounters{started: r.m.started.WithLabelValues(st), finished: r.m.finished.WithLabelValues(st)}
	})
}
