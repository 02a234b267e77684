package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Server-sent events: a context's event stream (resumed from Last-Event-ID after a
// reconnect, as the browser's EventSource sends it) and a job's log.

func sseStart(w http.ResponseWriter) (http.Flusher, bool) {
	fl, ok := w.(http.Flusher)
	if !ok {
		fail(w, http.StatusInternalServerError, "streaming is not supported on this connection")
		return nil, false
	}
	// A stream lasts: no write deadline, and no read deadline (--http-read-timeout),
	// whose passing would cancel the request's context under HTTP/1.1.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	return fl, true
}

func sseSend(w http.ResponseWriter, id, event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if id != "" {
		if _, err := fmt.Fprintf(w, "id: %s\n", id); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	return err
}

// guard ends ctx when the session's credential or its role in ctxID is taken away,
// or the session expires. The stream is one of the API's open streams (Backend.Guard):
// the notice of the change (a new key, a revoked secret, a context's roles changed)
// ends it at once, and the API's periodic check of open streams is its safety net.
// stop returns why the stream was ended (nil: it was not).
func (c *Console) guard(r *http.Request, s *session, ctxID uint32, method string) (context.Context, func() error) {
	ctx, cancel := context.WithCancelCause(r.Context())
	gctx, remove := c.b.Guard(ctx, s.identity(), ctxID, method, r.RemoteAddr, func(ctx context.Context) error { return c.stillValid(ctx, s) })
	expiry := time.AfterFunc(time.Unix(s.Exp, 0).Sub(c.now()), func() { cancel(errExpiredSession) })
	return gctx, func() error {
		expiry.Stop()
		var cause error
		if gctx.Err() != nil && r.Context().Err() == nil {
			cause = context.Cause(gctx)
		}
		remove()
		cancel(nil)
		return cause
	}
}

// events streams a context's events (flow_id: one flow's) from after, or from
// Last-Event-ID, or from now.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	ctxID, err := queryUint(r, "context_id", true)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	flowID, err := queryUint(r, "flow_id", false)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	after := r.URL.Query().Get("after")
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		after = last
	}
	s := sessionOf(r)
	id := s.identity()
	// The authorization and the position are checked before the stream starts, so
	// that a refusal is an HTTP error the page can show.
	// "From now" is the newest event id read here, before the stream answers: an
	// event after the page sees the stream open is never missed.
	pos, err := c.b.Call(r.Context(), id, "events.read", map[string]any{"context_id": ctxID, "after": orNow(after), "limit": 1})
	if err != nil {
		failAPI(w, err)
		return
	}
	if after == "" {
		var now struct {
			Next string `json:"next"`
		}
		if err := json.Unmarshal(pos, &now); err != nil {
			fail(w, http.StatusInternalServerError, err.Error())
			return
		}
		after = now.Next
	}
	fl, ok := sseStart(w)
	if !ok {
		return
	}
	ctx, stop := c.guard(r, s, ctxID, "events.read")
	err = c.b.Follow(ctx, id, ctxID, after, func(evs []Event) error {
		for _, e := range evs {
			if flowID != 0 && e.FlowID != flowID {
				continue
			}
			if err := sseSend(w, e.ID, "ev", e.Data); err != nil {
				return err
			}
		}
		fl.Flush()
		return nil
	})
	if cause := stop(); cause != nil {
		_ = sseSend(w, "", "end", map[string]string{"error": cause.Error()})
	} else if err != nil && r.Context().Err() == nil {
		_ = sseSend(w, "", "end", map[string]string{"error": err.Error()})
	}
	fl.Flush()
}

func orNow(after string) string {
	if after == "" {
		return "$"
	}
	return after
}

// logWatchTTL is how long a tail's mark on a job's log lasts (Backend.MarkLog); an
// open tail renews it at half of it, and reads the log again then: the safety net
// for an append notice missed (supervisor-daemon's subscription made again).
const logWatchTTL = 30 * time.Second

type logChunk struct {
	Logs       string `json:"logs"`
	NextOffset int64  `json:"next_offset"`
	Complete   bool   `json:"complete"`
}

// logStream streams a job's log from offset until the job ended and all of it was
// sent. It reads on when the log grows (the runner's append tells supervisor-daemon
// while the log is marked as tailed) and when an event of the job arrives (its end),
// not on a timer.
func (c *Console) logStream(w http.ResponseWriter, r *http.Request) {
	var ids [3]uint32
	for i, name := range []string{"context_id", "caller_id", "id"} {
		v, err := queryUint(r, name, true)
		if err != nil {
			fail(w, http.StatusBadRequest, err.Error())
			return
		}
		ids[i] = v
	}
	s := sessionOf(r)
	t := &logTail{c: c, id: s.identity(), ctxID: ids[0], caller: ids[1], job: ids[2]}
	// Watched before the first read: what is appended or happens after it is told.
	appends, unwatch := c.b.LogAppends(t.ctxID, t.caller, t.job)
	defer unwatch()
	if err := c.b.MarkLog(r.Context(), t.id, t.ctxID, t.caller, t.job, logWatchTTL); err != nil {
		failAPI(w, err)
		return
	}
	pos, err := c.eventsNow(r.Context(), t.id, t.ctxID)
	if err != nil {
		failAPI(w, err)
		return
	}
	first, err := t.read(r.Context(), 0)
	if err != nil {
		failAPI(w, err)
		return
	}
	fl, ok := sseStart(w)
	if !ok {
		return
	}
	ctx, stop := c.guard(r, s, t.ctxID, "job.logs")
	err = t.run(ctx, w, fl, first, appends, c.jobEvents(ctx, t.id, t.ctxID, t.job, pos))
	if cause := stop(); cause != nil {
		err = cause
	}
	if err != nil && r.Context().Err() == nil {
		_ = sseSend(w, "", "end", map[string]string{"error": err.Error()})
		fl.Flush()
	}
}

// logTail is an open log view's job.
type logTail struct {
	c                  *Console
	id                 Identity
	ctxID, caller, job uint32
}

func (t *logTail) read(ctx context.Context, off int64) (*logChunk, error) {
	out, err := t.c.b.Call(ctx, t.id, "job.logs", map[string]any{"context_id": t.ctxID, "caller_id": t.caller, "id": t.job, "offset": off})
	if err != nil {
		return nil, err
	}
	var ch logChunk
	return &ch, json.Unmarshal(out, &ch)
}

// run sends the log from first on, reading on at each append and event, until the
// job ended and its log was sent (nil), ctx ends (nil) or a read fails.
func (t *logTail) run(ctx context.Context, w http.ResponseWriter, fl http.Flusher, first *logChunk, appends <-chan struct{}, events <-chan struct{}) error {
	renew := time.NewTicker(logWatchTTL / 2)
	defer renew.Stop()
	for ch := first; ; {
		if ch.Logs != "" || ch.Complete {
			if sseSend(w, "", "log", ch) != nil {
				return nil
			}
			fl.Flush()
		}
		if ch.Complete {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-appends:
		case <-events:
		case <-renew.C:
			if err := t.c.b.MarkLog(ctx, t.id, t.ctxID, t.caller, t.job, logWatchTTL); err != nil {
				return ctxErr(ctx, err)
			}
		}
		next, err := t.read(ctx, ch.NextOffset)
		if err != nil {
			return ctxErr(ctx, err)
		}
		ch = next
	}
}

// ctxErr is err unless ctx ended (then the end is not an error).
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// jobEvents receives at each event of job jobID in context ctxID after pos, until ctx
// ends.
func (c *Console) jobEvents(ctx context.Context, id Identity, ctxID, jobID uint32, pos string) <-chan struct{} {
	events := make(chan struct{}, 1)
	go func() {
		_ = c.b.Follow(ctx, id, ctxID, pos, func(evs []Event) error {
			for _, e := range evs {
				if e.JobID == jobID {
					wake(events)
				}
			}
			return nil
		})
	}()
	return events
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// eventsNow is the id of a context's newest event, as id may read it.
func (c *Console) eventsNow(ctx context.Context, id Identity, ctxID uint32) (string, error) {
	out, err := c.b.Call(ctx, id, "events.read", map[string]any{"context_id": ctxID, "after": "$", "limit": 1})
	if err != nil {
		return "", err
	}
	var now struct {
		Next string `json:"next"`
	}
	if err := json.Unmarshal(out, &now); err != nil {
		return "", err
	}
	return now.Next, nil
}
