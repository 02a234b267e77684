package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// The cap of a context's event stream (approximately, XADD MAXLEN ~) is
// EventsPerJob events for each job the context keeps (coord:idx:jobs), and never less
// than EventsMaxLen: a flow of 100,000 jobs writes about four events a job, which a
// fixed cap would cut while its watchers still read them. The retention's trim
// (trim_events.lua) drops the events of what is no longer kept.
const (
	EventsMaxLen = 100000
	EventsPerJob = 16
)

// Event is one state change in a context, appended to its stream coord:events.
type Event struct {
	ID        string `json:"id"`
	TimeMs    int64  `json:"time_ms"`
	Type      string `json:"type"`  // object.verb: job.created, job.started, flow.finished, …
	Actor     string `json:"actor"` // acting actor id ("7", or "7 via operator:<fingerprint>"), "operator:<fingerprint>", or a service name
	ContextID uint32 `json:"context_id"`
	FlowID    uint32 `json:"flow_id,omitempty"`
	JobID     uint32 `json:"job_id,omitempty"`
	CallerID  uint32 `json:"caller_id,omitempty"`
	Status    string `json:"status,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

// Actor names for events written by the services themselves.
const (
	ActorOperator  = "operator" // with ":<fingerprint>" of the secret
	ActorScheduler = "scheduler"
	ActorRouter    = "router"
	ActorRunner    = "runner"
)

// Fields returns the stream entry's field/value list. It holds no time (TimeMs is not
// written): the entry's id does (`<ms>-<seq>`, Redis's clock when it is added), which
// a read gives as the event's time_ms (issue 49: a time field was ~10 B of each of a
// job's four events).
func (e *Event) Fields() []any {
	f := []any{"type", model.EventType(e.Type).Stored(), "actor", e.Actor}
	if e.FlowID != 0 {
		f = append(f, "flow_id", strconv.FormatUint(uint64(e.FlowID), 10))
	}
	if e.JobID != 0 {
		f = append(f, "job_id", strconv.FormatUint(uint64(e.JobID), 10))
	}
	if e.CallerID != 0 {
		f = append(f, "caller_id", strconv.FormatUint(uint64(e.CallerID), 10))
	}
	if e.Status != "" && e.Status != impliedStatus[e.Type] {
		f = append(f, "status", e.Status)
	}
	if e.Detail != "" {
		f = append(f, "detail", e.Detail)
	}
	return f
}

// impliedStatus is the status of the job events whose type says it: a stream entry of
// one of them stores no status (an earlier version's, an empty one), and a read gives
// it back (issue 49: ~25 B of a job's four events). Every writer of these types gives
// them this status.
var impliedStatus = map[string]string{
	"job.dispatched": "dispatched", "job.started": "started", "job.finished": "finished", "job.failed": "error",
}

// impliedDetail is the detail of a job.dispatched event of a job's first attempt, which
// the scripts store empty (lua/lib_dispatch.lua, release_dependents.lua): a read gives
// it back. Every writer of the type writes "attempt <n>".
const impliedDetail = "attempt 1"

// AddEvent queues the XADD of an event on a pipeline of the context's DB. It trims
// nothing: a fixed cap here would cut the events of a large flow; the scripts' XADDs
// cap the stream (EventsPerJob) and the retention trims it.
func AddEvent(ctx context.Context, p redis.Pipeliner, e *Event) {
	p.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, Values: e.Fields()})
}

// storedCreatedDispatched is the stored type of a stream entry, or of a record of a
// storedMany entry, that holds two events of one job, its job.created and its
// job.dispatched of a first attempt (flow 0, details empty: a read gives them back).
// As a record it is what a submission writes for each of its jobs but the call's first
// (lua/lib_state.lua's ev_later): it takes two sequence numbers, the job.created's
// first. As an entry it is what a submission of several jobs wrote for each one's but
// the first's before storedMany: still read (entries of an earlier version); its id is
// the job.dispatched's, the job.created's the one sequence number before, which the
// script left free.
const storedCreatedDispatched = "cd"

// storedMany is the stored type of a stream entry that holds several job events of one
// script call (lua/lib_state.lua's ev_flush: a submission's, a claim's, a finish's): an
// XADD for all but the call's first instead of one each. Its id is its last event's;
// its n events take the n sequence numbers up to it (the script leaves them free), in
// order (a record of storedCreatedDispatched is two events). Its fields are every job event's, in their order: actor (the events' actor,
// unless a record gives one), flow_id, job_id and caller_id empty, and detail, the
// records, each "<type> <flow> <job> <caller> <actor length> <detail length> " then the
// actor and the detail (an actor of length 0: the entry's).
const storedMany = "m"

// eventsOf decodes stream entries into events, oldest first: an entry of
// storedMany gives its events, one of storedCreatedDispatched two. Events at or before
// the position after (an event id; "", "0": none) are left out — the first events of an
// entry read before whose last one was not — and at most limit are returned (limit <= 0:
// all).
func eventsOf(ctxID uint32, msgs []redis.XMessage, after string, limit int) []Event {
	pos, filter := parseStreamID(after)
	out := make([]Event, 0, len(msgs))
	for _, m := range msgs {
		switch t, _ := m.Values["type"].(string); t {
		case storedMany:
			out = appendMany(out, ctxID, m, pos, filter)
		case storedCreatedDispatched:
			if id, ok := parseStreamID(m.ID); ok && id.seq > 0 {
				created := eventFromMessage(ctxID, m, string(model.EventJobCreated))
				created.ID = strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.seq-1, 10)
				if !filter || pos.less(streamID{id.ms, id.seq - 1}) {
					out = append(out, created)
				}
			}
			out = append(out, eventFromMessage(ctxID, m, string(model.EventJobDispatched)))
		default:
			out = append(out, eventFromMessage(ctxID, m, ""))
		}
		if limit > 0 && len(out) >= limit {
			return out[:limit]
		}
	}
	return out
}

// EntryEvents are the events stream entries read raw (XRANGE or XREAD of keys.Events)
// hold, oldest first: what a tool or a test that reads the stream directly goes
// through, since one entry may hold several events of a script call (storedMany) and
// the frequent types are stored as codes.
func EntryEvents(ctxID uint32, msgs []redis.XMessage) []Event {
	return eventsOf(ctxID, msgs, "", 0)
}

// manyRecord is one event of a storedMany entry: its fields as an entry of its own
// would hold them.
type manyRecord struct{ typ, flow, job, caller, actor, detail string }

// parseMany splits the records of a storedMany entry's detail field; false when one is
// malformed (the records before it are returned).
func parseMany(e string) ([]manyRecord, bool) {
	var out []manyRecord
	for e != "" {
		var f [6]string
		for i := range f {
			var ok bool
			if f[i], e, ok = strings.Cut(e, " "); !ok {
				return out, false
			}
		}
		al, err1 := strconv.Atoi(f[4])
		dl, err2 := strconv.Atoi(f[5])
		if err1 != nil || err2 != nil || al < 0 || dl < 0 || al+dl > len(e) {
			return out, false
		}
		out = append(out, manyRecord{typ: f[0], flow: f[1], job: f[2], caller: f[3], actor: e[:al], detail: e[al : al+dl]})
		e = e[al+dl:]
	}
	return out, true
}

// manyEvents is how many events the records of a storedMany entry stand for.
func manyEvents(recs []manyRecord) uint64 {
	n := uint64(len(recs))
	for _, r := range recs {
		if r.typ == storedCreatedDispatched {
			n++
		}
	}
	return n
}

// manyCount is how many events an entry holds (storedMany: its records' events; one of
// storedCreatedDispatched: two; any other: one).
func manyCount(values map[string]any) uint64 {
	switch t, _ := values["type"].(string); t {
	case storedMany:
		e, _ := values["detail"].(string)
		recs, _ := parseMany(e)
		return max(manyEvents(recs), 1)
	case storedCreatedDispatched:
		return 2
	}
	return 1
}

// appendMany appends the events of storedMany entry m after the position pos (when
// filter) to out.
func appendMany(out []Event, ctxID uint32, m redis.XMessage, pos streamID, filter bool) []Event {
	id, ok := parseStreamID(m.ID)
	e, _ := m.Values["detail"].(string)
	recs, _ := parseMany(e)
	n := manyEvents(recs)
	if !ok || n > id.seq+1 {
		return out // not written by ev_flush
	}
	actor, _ := m.Values["actor"].(string)
	seq := id.seq + 1 - n // the first event's
	for _, r := range recs {
		if r.actor == "" {
			r.actor = actor
		}
		typs := [2]string{r.typ}
		if r.typ == storedCreatedDispatched {
			typs = [2]string{string(model.EventJobCreated), string(model.EventJobDispatched)}
		}
		for _, typ := range typs {
			if typ == "" {
				break
			}
			rid := streamID{id.ms, seq}
			seq++
			if filter && !pos.less(rid) {
				continue
			}
			ev := eventFromMessage(ctxID, redis.XMessage{ID: strconv.FormatUint(rid.ms, 10) + "-" + strconv.FormatUint(rid.seq, 10), Values: map[string]any{
				"type": typ, "actor": r.actor, "flow_id": r.flow, "job_id": r.job, "caller_id": r.caller, "detail": r.detail,
			}}, "")
			out = append(out, ev)
		}
	}
	return out
}

// eventFromMessage decodes a stream entry as one event, of the type typ when given
// (else the entry's).
func eventFromMessage(ctxID uint32, m redis.XMessage, typ string) Event {
	e := Event{ID: m.ID, ContextID: ctxID}
	get := func(k string) string {
		if v, ok := m.Values[k].(string); ok {
			return v
		}
		return ""
	}
	if typ == "" {
		typ = model.EventTypeOfStored(get("type"))
	}
	e.Type, e.Actor, e.Status, e.Detail = typ, get("actor"), get("status"), get("detail")
	if e.Status == "" {
		e.Status = impliedStatus[e.Type] // not stored (or stored empty): its type says it
	}
	if e.Detail == "" && e.Type == string(model.EventJobDispatched) {
		e.Detail = impliedDetail // a first attempt's, stored empty (issue 49: ~9 B of a job's events)
	}
	e.TimeMs, _ = strconv.ParseInt(get("time_ms"), 10, 64)
	if e.TimeMs == 0 {
		// written without one (every event since issue 49): the id's time
		if id, ok := parseStreamID(m.ID); ok {
			e.TimeMs = int64(id.ms)
		}
	}
	e.FlowID = parseU32(get("flow_id"))
	e.JobID = parseU32(get("job_id"))
	e.CallerID = parseU32(get("caller_id"))
	if e.Detail == "" && e.Type == string(model.EventJobCreated) && e.JobID != 0 && e.CallerID != 0 {
		// A job.created that names its job (job_id, caller_id) without a detail is a
		// submission's (lua/submit.lua), whose detail is the job's key: stored empty (~15 B
		// of the entry, a string less for the script to hand Redis). Every other writer
		// of the type gives it a detail, or no job_id.
		e.Detail = keys.Job(e.CallerID, e.JobID)
	}
	return e
}

func parseU32(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}

// ReadEvents returns up to limit events after the id ("0" or "" = from the start).
func (d *DB) ReadEvents(ctx context.Context, after string, limit int64) ([]Event, error) {
	if after == "" {
		after = "0"
	}
	var cmd *redis.XMessageSliceCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.XRangeN(ctx, keys.Events, "("+after, "+", limit)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read events of context %d: %w", d.ContextID, err)
	}
	return eventsOf(d.ContextID, cmd.Val(), after, int(limit)), nil
}

// NewestEvents returns the newest events (at most limit) written at or after since,
// oldest first: XREVRANGE, one command however long the stream.
func (d *DB) NewestEvents(ctx context.Context, since time.Time, limit int64) ([]Event, error) {
	var cmd *redis.XMessageSliceCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.XRevRangeN(ctx, keys.Events, "+", strconv.FormatInt(since.UnixMilli(), 10)+"-0", limit)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read events of context %d: %w", d.ContextID, err)
	}
	msgs := cmd.Val()
	slices.Reverse(msgs)
	out := eventsOf(d.ContextID, msgs, "", 0)
	if limit > 0 && len(out) > int(limit) {
		out = out[len(out)-int(limit):] // the newest (an entry of two events gave one more)
	}
	return out, nil
}

// WaitEvents blocks up to block for events after the id and returns them (none on
// timeout). It holds one connection of the context's server while it waits. A
// follower that waits again and again uses an EventReader instead.
func (d *DB) WaitEvents(ctx context.Context, after string, count int64, block time.Duration) ([]Event, error) {
	r := d.EventReader()
	defer func() { _ = r.Close() }()
	return r.Wait(ctx, after, count, block)
}

// EventReader follows a context's event stream on a connection of its own, which
// selects the context's database once (not once per wait). Close it when done.
type EventReader struct {
	d        *DB
	conn     *redis.Conn
	selected bool
}

// EventReader returns a reader of the context's events; it connects on first use.
func (d *DB) EventReader() *EventReader { return &EventReader{d: d} }

// Wait is WaitEvents on the reader's connection.
func (r *EventReader) Wait(ctx context.Context, after string, count int64, block time.Duration) ([]Event, error) {
	if after == "" {
		after = "0"
	}
	if r.conn == nil {
		r.conn = r.d.srv.mux.Conn()
	}
	if !r.selected {
		if err := r.conn.Select(ctx, r.d.n).Err(); err != nil {
			r.reset()
			return nil, err
		}
		r.selected = true
	}
	res, err := r.conn.XRead(ctx, &redis.XReadArgs{Streams: []string{keys.Events, after}, Count: count, Block: block}).Result()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		r.reset() // the connection may be broken or stale: the next wait starts afresh
		return nil, err
	}
	var out []Event
	for _, s := range res {
		out = append(out, eventsOf(r.d.ContextID, s.Messages, after, int(count))...)
	}
	return out, nil
}

func (r *EventReader) reset() {
	if r.conn != nil {
		_ = r.conn.Close()
	}
	r.conn, r.selected = nil, false
}

// Close returns the reader's connection.
func (r *EventReader) Close() error {
	r.reset()
	return nil
}

// LastEventID returns the id of the newest event ("0" when there is none).
func (d *DB) LastEventID(ctx context.Context) (string, error) {
	var cmd *redis.XMessageSliceCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.XRevRangeN(ctx, keys.Events, "+", "-", 1)
		return nil
	}); err != nil {
		return "", err
	}
	if len(cmd.Val()) == 0 {
		return "0", nil
	}
	return cmd.Val()[0].ID, nil
}

// ErrEventsTrimmed means that a reader's position is older than the oldest event kept:
// events after it may have been trimmed (by retention or the stream's cap), so reading
// on from there could miss some. The reader reloads the state it follows and reads on
// from a fresh position ("$"), or reads what is left from "0".
var ErrEventsTrimmed = errors.New("events trimmed")

// ErrBadEventID is an event id that is not "<ms>-<seq>".
var ErrBadEventID = errors.New("not an event id")

// CheckEventPosition returns ErrEventsTrimmed when the stream no longer holds the event
// `after` and events after it may be gone; "" "0" and "$" always pass.
func (d *DB) CheckEventPosition(ctx context.Context, after string) error {
	if after == "" || after == "0" || after == "$" {
		return nil
	}
	pos, ok := parseStreamID(after)
	if !ok {
		return fmt.Errorf("%w: %q (want <ms>-<seq>, as events carry)", ErrBadEventID, after)
	}
	var cmd *redis.XInfoStreamCmd
	_, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.XInfoStream(ctx, keys.Events)
		return nil
	})
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return nil // no stream: nothing was ever written, or the context is new
		}
		return fmt.Errorf("check event position in context %d: %w", d.ContextID, err)
	}
	info := cmd.Val()
	oldest := info.FirstEntry.ID
	if oldest == "" {
		// Empty: everything written was trimmed; gone if anything came after `after`.
		if last, ok := parseStreamID(info.LastGeneratedID); ok && pos.less(last) {
			return fmt.Errorf("%w: every event after %s was trimmed from context %d's stream", ErrEventsTrimmed, after, d.ContextID)
		}
		return nil
	}
	// (a position among the ids of the oldest entry's events, or the one just before
	// its first event, misses nothing: none can lie between; an entry of n events takes
	// the n ids up to its own)
	if first, ok := parseStreamID(oldest); ok && pos.less(first) && (pos.ms != first.ms || pos.seq+manyCount(info.FirstEntry.Values) < first.seq) {
		return fmt.Errorf("%w: event %s is no longer in context %d's stream (the oldest kept is %s); events after it may be gone", ErrEventsTrimmed, after, d.ContextID, oldest)
	}
	return nil
}

type streamID struct{ ms, seq uint64 }

func (a streamID) less(b streamID) bool { return a.ms < b.ms || (a.ms == b.ms && a.seq < b.seq) }

func parseStreamID(s string) (streamID, bool) {
	ms, seq, found := strings.Cut(s, "-")
	a, err1 := strconv.ParseUint(ms, 10, 64)
	var b uint64
	var err2 error
	if found {
		b, err2 = strconv.ParseUint(seq, 10, 64)
	}
	return streamID{a, b}, err1 == nil && err2 == nil
}
