package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// Delayed work (docs/scheduling.md): a job submitted with a run time is stored
// scheduled (lua/submit.lua) and a flow started with one is scheduled
// (lua/schedule_flow.lua); both enter coord:delayed (DB 0 of the server that holds the
// context) with their due time, and a publication on coord:delayedwake re-arms the
// schedulers' timers. A scheduler reads the due entries (DueDelayed) without taking
// them: a job's release is its dispatch (lua/dispatch.lua with coord:delayed), which
// dispatches it only while it is still scheduled and removes its entry in the same
// step; a flow's is its start, which starts a scheduled flow once, after which its
// entry is dropped (DropDelayed). Of several schedulers, the first release does it;
// the others change nothing, and a scheduler that dies between reading and releasing
// leaves the entry for the next.

// DelayedItem is an entry of coord:delayed that is due.
type DelayedItem struct {
	ContextID uint32
	Kind      string // "job", "flow", "limit" or "keyrate"
	CallerID  uint32 // a job's
	JobID     uint32 // a job's
	FlowID    uint32 // a flow's
	Queue     string // a job queue's that a rate limit parked (kind "limit")
	Key       string // a concurrency key's whose rate held jobs back (kind "keyrate")
	DueMs     int64
	Member    string
}

// parseDelayed reads an entry of coord:delayed: "<ctx>:job:<caller>:<id>",
// "<ctx>:flow:<id>", "<ctx>:limit:<queue>" or "<ctx>:keyrate:<key>"
// (lua/lib_limit.lua).
func parseDelayed(m string, due int64) (DelayedItem, bool) {
	parts := strings.Split(m, ":")
	it := DelayedItem{Member: m, DueMs: due}
	switch {
	case len(parts) >= 3 && parts[1] == "limit":
		it.Kind, it.ContextID, it.Queue = "limit", parseU32(parts[0]), strings.Join(parts[2:], ":")
	case len(parts) >= 3 && parts[1] == "keyrate":
		it.Kind, it.ContextID, it.Key = "keyrate", parseU32(parts[0]), strings.Join(parts[2:], ":")
	case len(parts) == 4 && parts[1] == "job":
		it.Kind, it.ContextID, it.CallerID, it.JobID = "job", parseU32(parts[0]), parseU32(parts[2]), parseU32(parts[3])
	case len(parts) == 3 && parts[1] == "flow":
		it.Kind, it.ContextID, it.FlowID = "flow", parseU32(parts[0]), parseU32(parts[2])
	default:
		return it, false
	}
	return it, it.ContextID != 0
}

// DueDelayed returns up to limit entries of coord:delayed due by now, from every
// server, earliest first per server; it removes none. An entry that names nothing
// readable is removed.
func (s *Store) DueDelayed(ctx context.Context, now time.Time, limit int) ([]DelayedItem, error) {
	var out []DelayedItem
	err := s.dueEach(ctx, keys.Delayed, now, limit, func(srv *Server, name string, score int64) bool {
		it, ok := parseDelayed(name, score)
		if !ok {
			srv.fixed.ZRem(ctx, keys.Delayed, name)
			return false
		}
		out = append(out, it)
		return true
	})
	return out, err
}

// NextDelayed returns when the earliest delayed work is due (zero time if none).
func (s *Store) NextDelayed(ctx context.Context) (time.Time, error) {
	return s.nextDue(ctx, keys.Delayed)
}

// DelayedCount is the number of entries of coord:delayed over every server.
func (s *Store) DelayedCount(ctx context.Context) (int64, error) {
	var n int64
	for _, srv := range s.servers {
		c, err := srv.fixed.ZCard(ctx, keys.Delayed).Result()
		if err != nil {
			return 0, fmt.Errorf("count %s at %s: %w", keys.Delayed, srv.Name, err)
		}
		n += c
	}
	return n, nil
}

// DropDelayed removes an entry of coord:delayed (a flow's, once started or ended).
func (s *Store) DropDelayed(ctx context.Context, it DelayedItem) error {
	if err := s.Coord(it.ContextID).ZRem(ctx, keys.Delayed, it.Member).Err(); err != nil {
		return fmt.Errorf("drop %s from %s: %w", it.Member, keys.Delayed, err)
	}
	return nil
}

// WakeLimited releases a job queue that a rate limit parked (an entry of kind
// "limit", lua/limit_wake.lua): while the entry is due it goes, and the queue's
// runners get a wake token. An entry of kind "keyrate" releases the jobs that a
// concurrency key's rate held back, one per token the key's bucket has
// (lua/key_rate_wake.lua). It reports whether this call released it.
func (d *DB) WakeLimited(ctx context.Context, it DelayedItem) (bool, error) {
	if it.Kind == "keyrate" {
		n, err := (&keyRateWakeArgs{HeldKey: keys.ConcurrencyRateHeld(it.Key), Ctx: u32str(d.ContextID), Key: it.Key, Member: it.Member, NowMs: time.Now().UnixMilli()}).run(ctx, d)
		if err != nil {
			return false, fmt.Errorf("release the jobs of concurrency key %s of context %d held by its rate: %w", it.Key, d.ContextID, err)
		}
		return n >= 0, nil
	}
	n, err := (&limitWakeArgs{QueueKey: it.Queue, Ctx: u32str(d.ContextID), Member: it.Member, NowMs: time.Now().UnixMilli()}).run(ctx, d)
	if err != nil {
		return false, fmt.Errorf("wake %s of context %d after its rate limit: %w", it.Queue, d.ContextID, err)
	}
	return n == 1, nil
}

// ReleaseDelayed dispatches delayed standalone jobs of one caller that are due (the
// same dispatch as any standalone job's, lua/dispatch.lua, made a release by
// coord:delayed): a job no longer scheduled (stopped, or released by another
// scheduler) is not dispatched, and its entry goes.
func (d *DB) ReleaseDelayed(ctx context.Context, callerID uint32, jobs []*model.Job, actor string) ([]Dispatched, error) {
	return d.dispatchMany(ctx, 0, callerID, jobs, actor, 0, "", keys.Delayed, false)
}

// ScheduleFlow makes a created flow scheduled, to start at runAt. A flow already
// scheduled, started or ended is refused (an error wrapping ErrConflict that names its
// status).
func (d *DB) ScheduleFlow(ctx context.Context, flowID uint32, runAt time.Time, actor string) error {
	now := time.Now()
	res, err := (&scheduleFlowArgs{FlowKey: keys.Flow(flowID), Ctx: u32str(d.ContextID), Flow: u32str(flowID), Actor: actor,
		NowS: i64s(now.Unix()), NowMs: i64s(now.UnixMilli()), RunAt: i64s(runAt.UnixMilli())}).run(ctx, d)
	if err != nil {
		if strings.Contains(err.Error(), "NOTFOUND") {
			return notFound("flow %d", flowID)
		}
		return fmt.Errorf("schedule flow %d: %w", flowID, err)
	}
	vals, _ := res.([]any)
	if len(vals) >= 2 {
		if ok, _ := vals[0].(int64); ok == 0 {
			st, _ := vals[1].(string)
			return fmt.Errorf("%w: flow %d is %s, not created (flow.start with run_at schedules a created flow)", ErrConflict, flowID, st)
		}
	}
	return nil
}

// CancelScheduled ends a delayed job that was not dispatched yet (job.stop): status
// error, "cancelled", never run. ok=false with its status when the job is not
// scheduled (nothing changed).
func (d *DB) CancelScheduled(ctx context.Context, callerID, id uint32, actor string) (ok bool, status model.JobStatus, err error) {
	now := time.Now()
	res, err := (&cancelScheduledArgs{JobKey: keys.Job(callerID, id), Ctx: u32str(d.ContextID), Caller: u32str(callerID), ID: u32str(id), Actor: actor,
		NowS: i64s(now.Unix()), NowMs: i64s(now.UnixMilli()), Reason: "cancelled"}).run(ctx, d)
	if err != nil {
		if strings.Contains(err.Error(), "NOTFOUND") {
			return false, "", notFound("job %d:%d", callerID, id)
		}
		return false, "", fmt.Errorf("cancel scheduled job %d:%d: %w", callerID, id, err)
	}
	vals, _ := res.([]any)
	if len(vals) == 0 {
		return false, "", fmt.Errorf("cancel scheduled job: unexpected reply %v", res)
	}
	if n, _ := vals[0].(int64); n == 1 {
		return true, model.JobError, nil
	}
	st := ""
	if len(vals) > 1 {
		st, _ = vals[1].(string)
	}
	return false, model.JobStatus(st), nil
}

func u32str(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
func i64s(v int64) string    { return strconv.FormatInt(v, 10) }

// PauseFlow pauses (op "pause") or resumes (op "resume") a started flow
// (lua/pause_flow.lua): paused, none of its ready jobs is dispatched; resumed, the
// scheduler dispatches them (the flow enters coord:delayed, due now). changed=false
// when it was paused (or not paused) already; an error wrapping ErrConflict when the
// flow is not started.
func (d *DB) PauseFlow(ctx context.Context, flowID uint32, op, actor, note string) (changed bool, err error) {
	res, err := (&pauseFlowArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), Ctx: u32str(d.ContextID), Flow: u32str(flowID), Op: op,
		Actor: actor, NowMs: time.Now().UnixMilli(), Note: note}).run(ctx, d)
	if err != nil {
		if strings.Contains(err.Error(), "NOTFOUND") {
			return false, notFound("flow %d", flowID)
		}
		return false, fmt.Errorf("%s flow %d: %w", op, flowID, err)
	}
	vals, _ := res.([]any)
	if len(vals) == 0 {
		return false, fmt.Errorf("%s flow %d: unexpected reply %v", op, flowID, res)
	}
	switch n, _ := vals[0].(int64); n {
	case 0:
		st := ""
		if len(vals) > 1 {
			st, _ = vals[1].(string)
		}
		return false, fmt.Errorf("%w: flow %d is %s; only a started flow pauses and resumes", ErrConflict, flowID, st)
	case 2:
		return false, nil
	}
	return true, nil
}
