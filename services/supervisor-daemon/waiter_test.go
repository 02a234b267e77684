package main

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

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
	w.notify(flowKey(3, 17), nil)
	select {
	case <-flow.C:
	default:
		t.Fatal("the flow's waiter was not woken")
	}
	select {
	case <-other.C:
		t.Fatal("a waiter of another context's flow was woken")
	case <-job.C:
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
	woken := func(wt *watch) bool {
		select {
		case <-wt.C:
			return true
		default:
			return false
		}
	}
	w.notify(ref(1), nil)
	if ch := w.watch(ref(1)); !woken(ch) {
		t.Fatal("a watch after its job's end was not woken")
	}
	if ch := w.watch(ref(2)); woken(ch) {
		t.Fatal("a watch of a job that did not end was woken")
	}
	// ref(2) has a watcher now: its end goes to it, and is not kept.
	w.notify(ref(2), nil)
	if _, kept := w.ended[ref(2)]; kept {
		t.Error("an end delivered to a waiting call was kept as well")
	}
	for id := uint32(3); id < 3+endedKept; id++ {
		w.notify(ref(id), nil)
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
	for id, wt := range map[uint32]*watch{5: a, 6: b} {
		select {
		case <-wt.C:
		default:
			t.Errorf("job 2:1:%d's waiter was not woken", id)
		}
	}
	select {
	case <-c.C:
		t.Error("job 2:1:7's waiter was woken by a notice that does not name it")
	default:
	}
	w.received(keys.FlowDone, "2:9", zerolog.Nop())
	if _, kept := w.ended[flowKey(2, 9)]; !kept {
		t.Error("a flow's notice was not taken")
	}
}

// A notice of awaited jobs wakes each one's watch with the job's hash (hashOf); a
// plain notice of the same end after it leaves the hash; the jobs before a fault of
// the notice are told; a watch woken by a plain notice holds no hash (its call reads
// the job).
func TestWaiterHandsTheToldHash(t *testing.T) {
	w := newWaiter()
	ref := func(id uint32) waitKey { return jobKey(model.JobRef{ContextID: 2, CallerID: 1, ID: id}) }
	a, b, c := w.watch(ref(5)), w.watch(ref(6)), w.watch(ref(7))
	w.received(keys.JobDone, awaitedNotice("2:1:5", []string{"status", "finished"}, "2:1:6", []string{"status", "error"})+"2:1:7 x\n", zerolog.Nop())
	for id, want := range map[uint32]string{5: "finished", 6: "error"} {
		wt := map[uint32]*watch{5: a, 6: b}[id]
		select {
		case <-wt.C:
		default:
			t.Fatalf("job 2:1:%d's watch was not woken", id)
		}
		if h := w.hashOf(wt); len(h) != 2 || h[0] != "status" || h[1] != want {
			t.Errorf("job 2:1:%d's hash %q, want status %s", id, h, want)
		}
	}
	select {
	case <-c.C:
		t.Error("a job the notice could not tell was woken")
	default:
	}
	w.received(keys.JobDone, "2:1:5 2:1:7", zerolog.Nop())
	if h := w.hashOf(a); len(h) != 2 || h[1] != "finished" {
		t.Errorf("a plain notice after the told one left job 2:1:5's hash %q", h)
	}
	<-c.C
	if h := w.hashOf(c); h != nil {
		t.Errorf("a plain notice gave job 2:1:7's watch a hash: %q", h)
	}
}

// A told end that comes before its watch is kept with its hash, a copy (the notice's
// strings share its payload), for the last endedHashesKept such ends; an older one
// keeps its end (the watch is woken, its call reads the job) without its hash.
func TestWaiterKeepsRecentHashesForLateWatches(t *testing.T) {
	w := newWaiter()
	ref := func(id uint32) waitKey { return jobKey(model.JobRef{ContextID: 1, CallerID: 1, ID: id}) }
	notice := func(id uint32) string {
		return awaitedNotice(fmt.Sprintf("1:1:%d", id), []string{"status", "finished"})
	}
	first := notice(1)
	w.received(keys.JobDone, first, zerolog.Nop())
	wt := w.watch(ref(1))
	<-wt.C
	h := w.hashOf(wt)
	if len(h) != 2 || h[1] != "finished" {
		t.Fatalf("a watch after its told end: hash %q", h)
	}
	base, at := uintptr(unsafe.Pointer(unsafe.StringData(first))), uintptr(unsafe.Pointer(unsafe.StringData(h[1])))
	if at >= base && at < base+uintptr(len(first)) {
		t.Error("the kept hash shares the notice's memory")
	}
	w.unwatch(ref(1), wt)
	for id := uint32(2); id < 2+endedHashesKept; id++ {
		w.received(keys.JobDone, notice(id), zerolog.Nop())
	}
	old := w.watch(ref(1))
	select {
	case <-old.C:
	default:
		t.Fatal("an end whose hash was dropped was forgotten")
	}
	if h := w.hashOf(old); h != nil {
		t.Errorf("%d later hashes kept, and the oldest's still: %q", endedHashesKept, h)
	}
	last := w.watch(ref(1 + endedHashesKept))
	<-last.C
	if h := w.hashOf(last); len(h) != 2 {
		t.Errorf("the newest hash was dropped: %q", h)
	}
	kept := 0
	for _, h := range w.ended {
		if h != nil {
			kept++
		}
	}
	if kept != endedHashesKept {
		t.Errorf("%d hashes kept, want %d", kept, endedHashesKept)
	}
}

// awaitedNotice is a coord:jobdone notice of awaited jobs as the finish script writes
// it: jobs alternates each job's reference and its hash's items (strings of at most
// 63 bytes, none a canonical integer: the listpack entries this writes).
func awaitedNotice(jobs ...any) string {
	var b strings.Builder
	b.WriteString("=")
	for i := 0; i+1 < len(jobs); i += 2 {
		d := listpackDump(jobs[i+1].([]string))
		fmt.Fprintf(&b, "%s %d\n%s", jobs[i].(string), len(d), d)
	}
	return b.String()
}

// listpackDump is a DUMP of a hash held in a listpack, as Redis 7 makes one (its RDB
// version and checksum left zero: lib/store HashFromDump does not read them).
func listpackDump(items []string) string {
	var lp []byte
	for _, v := range items {
		lp = append(lp, 0x80|byte(len(v)))
		lp = append(lp, v...)
		lp = append(lp, byte(1+len(v))) // the entry's length, backwards
	}
	total := 6 + len(lp) + 1
	head := []byte{byte(total), byte(total >> 8), byte(total >> 16), byte(total >> 24), byte(len(items)), byte(len(items) >> 8)}
	lp = append(append(head, lp...), 0xff)
	return "\x10" + string([]byte{0x40 | byte(len(lp)>>8), byte(len(lp))}) + string(lp) + strings.Repeat("\x00", 10)
}
