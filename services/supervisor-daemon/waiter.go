package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// waiter wakes job.run and flow.wait callers when their job or flow ends. One
// subscription to the coord:jobdone and coord:flowdone channels (per server,
// followNotices) serves every waiting call; the script that applies a job's end (the scheduler's, or the runner's finish
// with --apply-ends) publishes the job's reference when the job reaches its final
// state, and a flow's "<ctx>:<id>" when the flow does.
//
// The end of a job that job.run awaits (its hash holds awaited) comes with the job's
// hash as the end left it (lib/store ParseAwaitedNotice): the watch holds it (hash),
// and the call answers with it, without reading the job.
//
// An end that arrives before its call watches (the job ended between its submission and
// the watch) is kept among the last endedKept ends nobody waited for, and wakes the
// watch as it begins: job.run needs no read of the job after its submission to tell.
// The hashes of the last endedHashesKept of them are kept too (the others' calls read
// their jobs). An end missed altogether (the subscription reconnecting) is caught by
// the calls' safety checks.
type waiter struct {
	mu      sync.Mutex
	waiting map[waitKey][]*watch
	// ended: recent ends nobody waited for (ring holds their order), each with its
	// job's hash when its notice told it and it is among the last endedHashesKept
	// (hashRing holds their order)
	ended    map[waitKey][]string
	ring     []waitKey
	next     int // where the next one goes in ring
	hashRing []waitKey
	hashNext int
}

// watch is one call's wait: C receives when its job or flow ends.
type watch struct {
	C    chan struct{}
	hash []string // (waiter.mu) the ended job's hash, when a notice told it
}

// endedKept is how many recent ends nobody waited for the waiter keeps (~50 B each),
// endedHashesKept how many of their jobs' hashes (each at most the 16 KB a notice
// carries; a no-op handler job's ~0.7 KB).
const (
	endedKept       = 8192
	endedHashesKept = 256
)

// waitKey names what a call waits for: a job (flow left zero) or a flow (job left zero).
type waitKey struct {
	job  model.JobRef
	flow [2]uint32 // context, flow id
}

func jobKey(ref model.JobRef) waitKey      { return waitKey{job: ref} }
func flowKey(ctxID, flowID uint32) waitKey { return waitKey{flow: [2]uint32{ctxID, flowID}} }

func newWaiter() *waiter {
	return &waiter{waiting: map[waitKey][]*watch{}, ended: make(map[waitKey][]string, endedKept), ring: make([]waitKey, endedKept),
		hashRing: make([]waitKey, endedHashesKept)}
}

// watch returns a watch whose channel receives when k ends; at once when k ended a
// moment ago with nobody waiting.
func (w *waiter) watch(k waitKey) *watch {
	wt := &watch{C: make(chan struct{}, 1)}
	w.mu.Lock()
	w.waiting[k] = append(w.waiting[k], wt)
	if h, ok := w.ended[k]; ok {
		wt.hash = h
		wt.C <- struct{}{}
	}
	w.mu.Unlock()
	return wt
}

func (w *waiter) unwatch(k waitKey, wt *watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	list := w.waiting[k]
	for i, c := range list {
		if c == wt {
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

// hashOf is the ended job's hash (field/value items) the notice of wt's end told; nil
// when it told none (read the job).
func (w *waiter) hashOf(wt *watch) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return wt.hash
}

// notify wakes the watches of k, an end; hash (nil: none) is the ended job's, as its
// notice told it.
func (w *waiter) notify(k waitKey, hash []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wts := w.waiting[k]
	if len(wts) == 0 {
		w.remember(k, hash)
		return
	}
	for _, wt := range wts {
		if hash != nil {
			wt.hash = hash
		}
		select {
		case wt.C <- struct{}{}:
		default:
		}
	}
}

// remember keeps k among the recent ends nobody waited for, forgetting the oldest,
// with hash (a copy: the notice's strings share its whole payload) among the last
// endedHashesKept. w.mu is held.
func (w *waiter) remember(k waitKey, hash []string) {
	kept, ok := w.ended[k]
	if !ok {
		delete(w.ended, w.ring[w.next]) // the oldest (a key is in the ring once while kept)
		w.ring[w.next] = k
		w.next = (w.next + 1) % len(w.ring)
	}
	if hash == nil || kept != nil {
		w.ended[k] = kept
		return
	}
	own := make([]string, len(hash))
	for i, v := range hash {
		own[i] = strings.Clone(v)
	}
	// the oldest hash kept is dropped (its end stays)
	if old := w.hashRing[w.hashNext]; old != (waitKey{}) {
		if _, still := w.ended[old]; still {
			w.ended[old] = nil
		}
	}
	w.hashRing[w.hashNext] = k
	w.hashNext = (w.hashNext + 1) % len(w.hashRing)
	w.ended[k] = own
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
// runner's finish of several jobs tells them in one message), or awaited jobs with
// their hashes (lib/store ParseAwaitedNotice). A reference that cannot be read is
// logged and skipped.
func (w *waiter) received(channel, payload string, log zerolog.Logger) {
	if channel == keys.FlowDone {
		k, err := parseFlowDone(payload)
		if err != nil {
			log.Warn().Str("channel", channel).Str("payload", payload).Err(err).Msg("bad done notification")
			return
		}
		w.notify(k, nil)
		return
	}
	if store.IsAwaitedNotice(payload) {
		ended, err := store.ParseAwaitedNotice(payload)
		for _, e := range ended {
			w.notify(jobKey(e.Ref), e.Pairs)
		}
		if err != nil { // the jobs it could not tell are read by their calls' safety checks
			log.Warn().Str("channel", channel).Int("bytes", len(payload)).Err(err).Msg("bad done notification")
		}
		return
	}
	for p := range strings.FieldsSeq(payload) {
		ref, err := model.ParseJobRef(p)
		if err != nil {
			log.Warn().Str("channel", channel).Str("payload", p).Err(err).Msg("bad done notification")
			continue
		}
		w.notify(jobKey(ref), nil)
	}
}
