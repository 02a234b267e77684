package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// Schedules (docs/scheduling.md): a schedule is the hash coord:sched:<id> of its
// context, indexed in coord:scheds; while active it has an entry in coord:sched_due
// (DB 0 of its server) at its next fire time, which wakes the schedulers' due loop as
// coord:delayed does. Every change is lua/sched.lua.

// RunUniqueTTL is how long a run's uniqueness key (its schedule and tick) is kept: in
// that time a tick's run is made once however often it is tried (a scheduler that
// died before recording it, a second scheduler, a backfill of the same tick).
const RunUniqueTTL = time.Hour

// RunUniqueKey names the run of a schedule's tick.
func RunUniqueKey(ctxID uint32, id string, tick time.Time) string {
	return fmt.Sprintf("sched:%d:%s:%d", ctxID, id, tick.UnixMilli())
}

// TickOutcome is what a tick did (lua/sched.lua, op tick).
type TickOutcome string

const (
	TickFired    TickOutcome = "fired"
	TickSkipped  TickOutcome = "skipped"
	TickBuffered TickOutcome = "buffered"
	TickMissed   TickOutcome = "missed"
	TickStale    TickOutcome = "stale" // another scheduler handled it
	TickPaused   TickOutcome = "paused"
	TickGone     TickOutcome = "gone"
)

func (d *DB) sched(ctx context.Context, id, op string, args ...any) ([]any, error) {
	sargs := make([]string, len(args))
	for i, a := range args {
		sargs[i] = fmt.Sprint(a)
	}
	res, err := (&schedArgs{SchedKey: keys.Schedule(id), IndexKey: keys.Schedules, Ctx: u32str(d.ContextID), ID: id, Op: op,
		Now: time.Now().UnixMilli(), Args: sargs}).run(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: %s: %w", id, op, err)
	}
	vals, _ := res.([]any)
	if len(vals) == 0 {
		return nil, fmt.Errorf("schedule %s: %s: unexpected reply %v", id, op, res)
	}
	return vals, nil
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// PutSchedule creates (create) or replaces the settings of a schedule, with its next
// tick: an ExistsError when a created one exists, ErrNotFound when an updated one does not.
func (d *DB) PutSchedule(ctx context.Context, s *model.Schedule, create bool, next, fire time.Time) error {
	flow := ""
	if s.Flow != nil {
		flow = model.EncodeField(s.Flow)
	}
	fields := []any{"id", s.ID, "context_id", d.ContextID, "caller_id", s.CallerID, "spec", model.EncodeField(s.Spec),
		"job", string(s.Job), "flow", flow, "overlap", string(s.Overlap), "catchup_window", s.CatchupWindow}
	if create && s.Paused {
		// created paused in the same step (a pause after the put left it firing when
		// the call ended between the two)
		fields = append(fields, "paused", "1", "note", s.Note)
	}
	vals, err := d.sched(ctx, s.ID, "put", append([]any{boolArg(create), next.UnixMilli(), fire.UnixMilli()}, fields...)...)
	if err != nil {
		return err
	}
	switch str(vals[0]) {
	case "exists":
		return &ExistsError{What: "schedule " + s.ID}
	case "gone":
		return notFound("schedule %s", s.ID)
	}
	return nil
}

// LoadSchedule reads a schedule; ErrNotFound when there is none.
func (d *DB) LoadSchedule(ctx context.Context, id string) (*model.Schedule, error) {
	h, err := d.HGetAll(ctx, keys.Schedule(id))
	if err != nil {
		return nil, fmt.Errorf("load schedule %s: %w", id, err)
	}
	if len(h) == 0 {
		return nil, notFound("schedule %s", id)
	}
	var s model.Schedule
	if err := model.FromHash(keys.Schedule(id), h, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ScheduleIDs lists the context's schedules by creation.
func (d *DB) ScheduleIDs(ctx context.Context) ([]string, error) {
	var cmd *redis.StringSliceCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.ZRange(ctx, keys.Schedules, 0, -1)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return cmd.Val(), nil
}

// TickResult is what Tick did: its outcome; for a fired tick the tick whose run is to
// be made (Fired: under buffer_one, the buffered one when its wait is over, the tick
// given being buffered in its place) and, under cancel_previous, the previous run to
// stop (its job "<caller>:<id>", or its flow).
type TickResult struct {
	Outcome  TickOutcome
	Fired    time.Time
	PrevJob  string
	PrevFlow uint32
}

// Tick handles one tick of a schedule: fire (or missed, outside its catch-up window)
// when tick is still its next tick; next and fire are the tick after it and that
// one's fire time.
func (d *DB) Tick(ctx context.Context, id string, tick, next, fire time.Time, missed bool) (TickResult, error) {
	mode := "fire"
	if missed {
		mode = "missed"
	}
	vals, err := d.sched(ctx, id, "tick", tick.UnixMilli(), next.UnixMilli(), fire.UnixMilli(), mode)
	if err != nil {
		return TickResult{}, err
	}
	out := TickResult{Outcome: TickOutcome(str(vals[0]))}
	if len(vals) > 2 {
		out.PrevJob = str(vals[1])
		ms, _ := strconv.ParseInt(str(vals[2]), 10, 64)
		out.Fired = time.UnixMilli(ms)
	}
	if len(vals) > 3 {
		out.PrevFlow = parseU32(str(vals[3]))
	}
	return out, nil
}

// TickRan records the run a fired tick made ("<caller>:<id>"; "" with why when it
// could not be made). false: the tick is no longer pending (recorded already).
func (d *DB) TickRan(ctx context.Context, id string, tick time.Time, run, why string) (bool, error) {
	vals, err := d.sched(ctx, id, "ran", tick.UnixMilli(), run, why, "")
	if err != nil {
		return false, err
	}
	return str(vals[0]) == "ok", nil
}

// TickRanFlow records the flow a fired tick of a flow's schedule made (TickRan's).
func (d *DB) TickRanFlow(ctx context.Context, id string, tick time.Time, flowID uint32) (bool, error) {
	vals, err := d.sched(ctx, id, "ran", tick.UnixMilli(), "", "", flowID)
	if err != nil {
		return false, err
	}
	return str(vals[0]) == "ok", nil
}

// FireBuffered fires a schedule's buffered tick once its last run has ended: the tick,
// or zero when there is none or the run goes on.
func (d *DB) FireBuffered(ctx context.Context, id string) (time.Time, error) {
	vals, err := d.sched(ctx, id, "buffer")
	if err != nil || str(vals[0]) != "fired" || len(vals) < 2 {
		return time.Time{}, err
	}
	ms, _ := strconv.ParseInt(str(vals[1]), 10, 64)
	return time.UnixMilli(ms), nil
}

// PauseSchedule pauses a schedule with a note: no tick fires until it is resumed.
func (d *DB) PauseSchedule(ctx context.Context, id, note string) error {
	vals, err := d.sched(ctx, id, "pause", note)
	if err == nil && str(vals[0]) == "gone" {
		return notFound("schedule %s", id)
	}
	return err
}

// ResumeSchedule resumes a paused schedule from its next tick after now (the ticks
// of the pause are not caught up).
func (d *DB) ResumeSchedule(ctx context.Context, id, note string, next, fire time.Time) error {
	vals, err := d.sched(ctx, id, "resume", note, next.UnixMilli(), fire.UnixMilli())
	if err == nil && str(vals[0]) == "gone" {
		return notFound("schedule %s", id)
	}
	return err
}

// DeleteSchedule deletes a schedule (its runs stay).
func (d *DB) DeleteSchedule(ctx context.Context, id string) error {
	vals, err := d.sched(ctx, id, "delete")
	if err != nil {
		return err
	}
	if n, _ := vals[0].(int64); n == 0 {
		return notFound("schedule %s", id)
	}
	return nil
}

// DueSchedule is an entry of coord:sched_due that is due.
type DueSchedule struct {
	ContextID uint32
	ID        string
}

// DueSchedules returns up to limit schedules due by now, from every server (it
// removes none: each tick is taken by lua/sched.lua).
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]DueSchedule, error) {
	var out []DueSchedule
	err := s.dueEach(ctx, keys.ScheduleDue, now, limit, func(_ *Server, m string, _ int64) bool {
		c, id, ok := strings.Cut(m, ":")
		if ctxID := parseU32(c); ok && ctxID != 0 {
			out = append(out, DueSchedule{ctxID, id})
			return true
		}
		return false
	})
	return out, err
}

// NextSchedule is when the earliest schedule is due (zero if none).
func (s *Store) NextSchedule(ctx context.Context) (time.Time, error) {
	return s.nextDue(ctx, keys.ScheduleDue)
}
