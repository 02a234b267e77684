package main

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A handler call's counters are resolved once per executor and count where the
// vector's own children count; an outcome outside the known ones still counts.
func TestHandlerCallCountersResolvedOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	em := newExecutorMetrics(reg)
	resolves := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				em.call("go", "success")
			}
		}()
	}
	wg.Wait()
	em.call("go", "failed")
	em.call("py", "success")
	em.call("go", "odd")
	for _, c := range []struct {
		exec, outcome string
		want          float64
	}{{"go", "success", 800}, {"go", "failed", 1}, {"py", "success", 1}, {"go", "odd", 1}, {"go", "retry", 0}} {
		if got := testutil.ToFloat64(em.calls.WithLabelValues(c.exec, c.outcome)); got != c.want {
			t.Errorf("hero_handler_calls_total{executor=%q,outcome=%q} = %v, want %v", c.exec, c.outcome, got, c.want)
		}
	}
	r := &resolved[int]{}
	for range 3 {
		if v := r.get("a", func(string) int { resolves++; return 7 }); v != 7 {
			t.Fatalf("get: %d", v)
		}
	}
	if v := r.get("b", func(string) int { resolves++; return 8 }); v != 8 || r.get("a", nil) != 7 || resolves != 2 {
		t.Fatalf("resolved %d times (want 2), b %d", resolves, v)
	}
	if n := testing.AllocsPerRun(100, func() { em.call("go", "success") }); n != 0 {
		t.Errorf("a resolved call's count: %v allocations", n)
	}
}
