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

// guard ends ctx when the session's credential is revoked (checked every recheck)
// or the session expires.
func (c *Console) guard(ctx context.Context, s *session) (context.Context, func() error) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(c.recheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if c.now().Unix() >= s.Exp {
					cancel(errExpiredSession)
					return
				}
				if err := c.stillValid(ctx, s); err == errRevoked {
					cancel(err)
					return
				}
			}
		}
	}()
	return ctx, func() error { cancel(nil); return context.Cause(ctx) }
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
	ctx, stop := c.guard(r.Context(), s)
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

// logTail is how often an open log view reads on while its job runs (the runner
// appends to the log without an event per line).
const logTail = 300 * time.Millisecond

type logChunk struct {
	Logs       string `json:"logs"`
	NextOffset int64  `json:"next_offset"`
	Complete   bool   `json:"complete"`
}

// logStream streams a job's log from offset until the job ended and all of it was
// sent.
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
	id := s.identity()
	read := func(ctx context.Context, off int64) (*logChunk, error) {
		out, err := c.b.Call(ctx, id, "job.logs", map[string]any{"context_id": ids[0], "caller_id": ids[1], "id": ids[2], "offset": off})
		if err != nil {
			return nil, err
		}
		var ch logChunk
		return &ch, json.Unmarshal(out, &ch)
	}
	first, err := read(r.Context(), 0)
	if err != nil {
		failAPI(w, err)
		return
	}
	fl, ok := sseStart(w)
	if !ok {
		return
	}
	ctx, stop := c.guard(r.Context(), s)
	defer func() { _ = stop() }()
	t := time.NewTicker(logTail)
	defer t.Stop()
	for ch := first; ; {
		if ch.Logs != "" || ch.Complete {
			if sseSend(w, "", "log", ch) != nil {
				return
			}
			fl.Flush()
		}
		if ch.Complete {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, err := read(ctx, ch.NextOffset)
		if err != nil {
			_ = sseSend(w, "", "end", map[string]string{"error": err.Error()})
			fl.Flush()
			return
		}
		ch = next
	}
}
