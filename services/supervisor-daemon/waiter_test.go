package main

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
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

// An end that arrives before its watch (a job that ended between its submission and
// job.run's watch) wakes the watch as it begins; the waiter keeps only the last
// endedKept such ends, forgetting the oldest first.
func TestWaiterKeepsRecentEndsForLateWatches(t *testing.T) {
	w := newWaiter()
	ref := func(id uint32) waitKey { return jobKey(model.JobRef{ContextID: 1, CallerID: 1, ID: id}) }
	woken := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	w.notify(ref(1))
	if ch := w.watch(ref(1)); !woken(ch) {
		t.Fatal("a watch after its job's end was not woken")
	}
	if ch := w.watch(ref(2)); woken(ch) {
		t.Fatal("a watch of a job that did not end was woken")
	}
	// ref(2) has a watcher now: its end goes to it, and is not kept.
	w.notify(ref(2))
	if _, kept := w.ended[ref(2)]; kept {
		t.Error("an end delivered to a waiting call was kept as well")
	}
	for id := uint32(3); id < 3+endedKept; id++ {
		w.notify(ref(id))
	}
	if len(w.ended) != endedKept {
		t.Fatalf("%d ends kept, want %d", len(w.ended), endedKept)
	}
	if ch := w.watch(ref(1)); woken(ch) {
		t.Error("the oldest end was not forgotten")
	}
	if ch := w.watch(ref(3 + endedKept - 1)); !woken(ch) {
		t.Error("the newest end was forgotten")
	}
}

// One coord:jobdone notice names every job a runner's finish ended: each one's waiter
// is woken; a reference that cannot be read is skipped, not the ones beside it.
func TestWaiterTakesSeveralJobsInOneNotice(t *testing.T) {
	w := newWaiter()
	ref := func(id uint32) waitKey { return jobKey(model.JobRef{ContextID: 2, CallerID: 1, ID: id}) }
	a, b, c := w.watch(ref(5)), w.watch(ref(6)), w.watch(ref(7))
	w.received(keys.JobDone, "2:1:5 bad 2:1:6", zerolog.Nop())
	for id, ch := range map[uint32]chan struct{}{5: a, 6: b} {
		select {
		case <-ch:
		default:
			t.Errorf("job 2:1:%d's waiter was not woken", id)
		}
	}
	select {
	case <-c:
		t.Error("job 2:1:7's waiter was woken by a notice that does not name it")
	default:
	}
	w.received(keys.FlowDone, "2:9", zerolog.Nop())
	if _, kept := w.ended[flowKey(2, 9)]; !kept {
		t.Error("a flow's notice was not taken")
	}
}
