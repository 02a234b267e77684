package console

import (
	"net/http"
	"slices"
	"sort"
	"strconv"
	"time"
)

// The queues page and its charts. The queues' depths are read now (Backend.Queues);
// the charts are the context's own event stream of the last hour, read in bounded
// pages (at most maxStatsEvents events: a busier hour shows its newest part) and
// counted per minute: jobs started, finished and failed, the median hop latency
// (a job's dispatch to its start) and the waiting depth, walked back from now's
// depth by the dispatches and starts of each minute.

const (
	statsWindow    = time.Hour
	statsBucket    = time.Minute
	maxStatsEvents = 50000
)

// StatEvent is the part of an event the charts count.
type StatEvent struct {
	TimeMs   int64
	Type     string
	CallerID uint32
	JobID    uint32
}

// QueueDepth is a queue's waiting items in a context.
type QueueDepth struct {
	Queue  string `json:"queue"`
	Depth  int64  `json:"depth"`
	Paused *bool  `json:"paused,omitempty"` // nil: not known (no queue.list)
}

type bucket struct {
	StartMs  int64 `json:"start_ms"`
	Started  int   `json:"started"`
	Finished int   `json:"finished"`
	Failed   int   `json:"failed"`
	HopMs    int64 `json:"hop_ms"` // the median dispatch-to-start latency of the jobs started (-1: none)
	Depth    int64 `json:"depth"`  // waiting at the bucket's end
	dispatch int
}

// series counts evs (oldest first) into the minutes of [from, now), depthNow the
// waiting items now.
func series(evs []StatEvent, from, now time.Time, depthNow int64) []bucket {
	n := int(now.Sub(from)/statsBucket) + 1
	out := make([]bucket, n)
	hops := make([][]int64, n)
	for i := range out {
		out[i].StartMs = from.Add(time.Duration(i) * statsBucket).UnixMilli()
	}
	type ref struct{ caller, job uint32 }
	dispatched := map[ref]int64{}
	for _, e := range evs {
		i := int((e.TimeMs - from.UnixMilli()) / statsBucket.Milliseconds())
		if i < 0 || i >= n {
			continue
		}
		b := &out[i]
		switch e.Type {
		case "job.dispatched", "job.requeued", "job.released":
			b.dispatch++
			dispatched[ref{e.CallerID, e.JobID}] = e.TimeMs
		case "job.started":
			b.Started++
			if t, ok := dispatched[ref{e.CallerID, e.JobID}]; ok {
				hops[i] = append(hops[i], e.TimeMs-t)
				delete(dispatched, ref{e.CallerID, e.JobID})
			}
		case "job.finished":
			b.Finished++
		case "job.failed", "job.dead_lettered":
			b.Failed++
		}
	}
	depth := depthNow
	for i := n - 1; i >= 0; i-- {
		out[i].Depth = max(depth, 0)
		depth -= int64(out[i].dispatch - out[i].Started)
		out[i].HopMs = -1
		if h := hops[i]; len(h) > 0 {
			slices.Sort(h)
			out[i].HopMs = h[len(h)/2]
		}
	}
	return out
}

// stats answers a context's queues (depth now, paused when known) and the last hour
// counted per minute.
func (c *Console) stats(w http.ResponseWriter, r *http.Request) {
	ctxID, err := queryUint(r, "context_id", true)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	id := sessionOf(r).identity()
	queues, running, err := c.b.Queues(r.Context(), id, ctxID)
	if err != nil {
		failAPI(w, err)
		return
	}
	sort.Slice(queues, func(i, j int) bool { return queues[i].Queue < queues[j].Queue })
	var waiting int64
	for _, q := range queues {
		waiting += q.Depth
	}
	now := c.now()
	from := now.Add(-statsWindow).Truncate(statsBucket)
	evs, err := c.b.EventsSince(r.Context(), id, ctxID, from, maxStatsEvents)
	if err != nil {
		failAPI(w, err)
		return
	}
	full := len(evs) < maxStatsEvents
	if !full && len(evs) > 0 {
		// The newest maxStatsEvents: the charts start at the first whole minute they cover.
		from = time.UnixMilli(evs[0].TimeMs).Truncate(statsBucket).Add(statsBucket)
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": queues, "running": running, "waiting": waiting,
		"from_ms": from.UnixMilli(), "now_ms": now.UnixMilli(), "complete": full, "events": len(evs),
		"bucket_s": strconv.Itoa(int(statsBucket / time.Second)), "series": series(evs, from, now, waiting),
		"queue_actions": c.b.Has("queue.pause") && c.b.Has("queue.resume")})
}
