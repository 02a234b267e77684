package main

import (
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/lib/model"
)

func TestParseFlowDone(t *testing.T) {
	k, err := parseFlowDone("3:17")
	if err != nil || k != flowKey(3, 17) {
		t.Fatalf("3:17: %+v %v", k, err)
	}
	for _, bad := range []string{"", "3", "3:", ":17", "3:0", "3:x", "x:17", "3:17:1", "-1:17", "3:99999999999"} {
		if _, err := parseFlowDone(bad); err == nil || !strings.Contains(err.Error(), "is not <context>:<flow>") {
			t.Errorf("%q: %v, want an error naming the form", bad, err)
		}
	}
}

// A flow's end wakes the calls waiting for that flow, not a job with the same numbers,
// nor the same flow id in another context.
func TestWaiterKeepsFlowsAndJobsApart(t *testing.T) {
	w := newWaiter()
	flow := w.watch(flowKey(3, 17))
	other := w.watch(flowKey(4, 17))
	job := w.watch(jobKey(model.JobRef{ContextID: 3, CallerID: 17, ID: 17}))
	w.notify(flowKey(3, 17))
	select {
	case <-flow:
	default:
		t.Fatal("the flow's waiter was not woken")
	}
	select {
	case <-other:
		t.Fatal("a waiter of another context's flow was woken")
	case <-job:
		t.Fatal("a job's waiter was woken by a flow's end")
	default:
	}
	w.unwatch(flowKey(3, 17), flow)
	w.unwatch(flowKey(4, 17), other)
	w.unwatch(jobKey(model.JobRef{ContextID: 3, CallerID: 17, ID: 17}), job)
	if len(w.waiting) != 0 {
		t.Fatalf("waiters left after unwatch: %v", w.waiting)
	}
}
