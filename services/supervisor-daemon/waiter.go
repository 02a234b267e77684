package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// waiter wakes job.run and flow.wait callers when their job or flow ends. One
// subscription to the coord:jobdone and coord:flowdone channels (per server,
// followNotices) serves every waiting call; the script that applies a job's end (the scheduler's, or the runner's finish
// with --apply-ends) publishes the job's reference when the job reaches its final
// state, and a flow's "<ctx>:<id>" when the flow does.
//
// An end that arrives before its call watches (the job ended between its submission and
// the watch) is kept among the last endedKept ends nobody waited for, and wakes the
// watch as it begins: job.run needs no read of the job after its submission to tell.
// An end missed altogether (the subscription reconnecting) is caught by the calls'
// safety checks.
type waiter struct {
	mu      sync.Mutex
	waiting map[waitKey][]chan struct{}
	ended   map[waitKey]struct{} // recent ends nobody waited for, ring holds their order
	ring    []waitKey
	next    int // where the next one goes in ring
}

// endedKept is how many recent ends nobody waited for the waiter keeps (~50 B each).
const endedKept = 8192

// waitKey names what a call waits for: a job (flow left zero) or a flow (job left zero).
type waitKey struct {
	job  model.JobRef
	flow [2]uint32 // context, flow id
}

func jobKey(ref model.JobRef) waitKey      { return waitKey{job: ref} }
func flowKey(ctxID, flowID uint32) waitKey { return waitKey{flow: [2]uint32{ctxID, flowID}} }

func newWaiter() *waiter {
	return &waiter{waiting: map[waitKey][]chan struct{}{}, ended: make(map[waitKey]struct{}, endedKept), ring: make([]waitKey, endedKept)}
}

// watch returns a channel that receives when k ends; at once when k ended a moment ago
// with nobody waiting.
func (w *waiter) watch(k waitKey) chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.waiting[k] = append(w.waiting[k], ch)
	if _, ok := w.ended[k]; ok {
		ch <- struct{}{}
	}
	w.mu.Unlock()
	return ch
}

func (w *waiter) unwatch(k waitKey, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	list := w.waiting[k]
	for i, c := range list {
		if c == ch {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(w.waiting, k)
	} else {
		w.waiting[k] = list
	}
}

func (w *waiter) notify(k waitKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	chs := w.waiting[k]
	if len(chs) == 0 {
		w.remember(k)
		return
	}
	for _, ch := range chs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// remember keeps k among the recent ends nobody waited for, forgetting the oldest.
// w.mu is held.
func (w *waiter) remember(k waitKey) {
	if _, ok := w.ended[k]; ok {
		return
	}
	delete(w.ended, w.ring[w.next]) // the oldest (a key is in the ring once while kept)
	w.ring[w.next] = k
	w.ended[k] = struct{}{}
	w.next = (w.next + 1) % len(w.ring)
}

// parseFlowDone reads a coord:flowdone payload, "<ctx>:<flow>".
func parseFlowDone(s string) (waitKey, error) {
	c, f, ok := strings.Cut(s, ":")
	if !ok {
		return waitKey{}, fmt.Errorf("flow reference %q is not <context>:<flow>", s)
	}
	ctxID, err1 := strconv.ParseUint(c, 10, 32)
	flowID, err2 := strconv.ParseUint(f, 10, 32)
	if err1 != nil || err2 != nil || flowID == 0 {
		return waitKey{}, fmt.Errorf("flow reference %q is not <context>:<flow>", s)
	}
	return flowKey(uint32(ctxID), uint32(flowID)), nil
}

// received wakes the waiters of a notice on channel: on coord:flowdone a flow's
// "<ctx>:<flow>", on coord:jobdone one or more job references, space-separated (a
// runner's finish of several jobs tells them in one message). A reference that cannot
// be read is logged and skipped.
func (w *waiter) received(channel, payload string, log zerolog.Logger) {
	if channel == keys.FlowDone {
		k, err := parseFlowDone(payload)
		if err != nil {
			log.Warn().Str("channel", channel).Str("payload", payload).Err(err).Msg("bad done notification")
			return
		}
		w.notify(k)
		return
	}
	for p := range strings.FieldsSeq(payload) {
		ref, err := model.ParseJobRef(p)
		if err != nil {
			log.Warn().Str("channel", channel).Str("payload", p).Err(err).Msg("bad done notification")
			continue
		}
		w.notify(jobKey(ref))
	}
}
