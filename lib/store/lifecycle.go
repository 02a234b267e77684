package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// ErrConflict is an operation refused because of the object's state (a running flow
// cannot be deleted, …); the message says why and what to do.
var ErrConflict = errors.New("conflict")

// ConflictError names the object and the reason.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string   { return e.Msg }
func (e *ConflictError) Is(t error) bool { return t == ErrConflict }

// ---- cancel ----

// CancelFlow cancels a flow: jobs not started never start, running ones are stopped
// (their runners get a stop request at once), and the flow ends error with the
// reason. It returns the ids of the jobs being stopped. ended=true: the flow had
// ended already and nothing changed. A flow of more than cancelChunk jobs is
// cancelled in chunks (cancelFlowChunked), each call short; a cancel in chunks left
// under way is finished by the next CancelFlow or ResumeFlowWork.
func (d *DB) CancelFlow(ctx context.Context, flowID uint32, actor string, retention time.Duration) (stopping []uint32, ended bool, err error) {
	now := time.Now()
	reason := "cancelled by actor " + actor
	if strings.HasPrefix(actor, ActorOperator) {
		reason = "cancelled by " + actor // "operator:<fingerprint>"
	}
	w, err := d.loadFlowWork(ctx, flowID, false)
	if err != nil {
		return nil, false, err
	}
	if w.chunked {
		return d.cancelFlowChunked(ctx, flowID, w, actor, reason, retention)
	}
	r, err := (&cancelFlowArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), ResultsKey: keys.FlowResults(flowID),
		Ctx: int64(d.ContextID), Flow: int64(flowID), Actor: actor, NowS: now.Unix(), NowMs: now.UnixMilli(), Reason: reason,
		RetentionMs: retention.Milliseconds()}).run(ctx, d)
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOTFOUND") {
			return nil, false, notFound("flow %d in context %d", flowID, d.ContextID)
		}
		return nil, false, fmt.Errorf("cancel flow %d: %w", flowID, err)
	}
	if r.Cancelled == 0 {
		return nil, true, nil
	}
	return u32s(r.Stopping), false, nil
}

// ---- delete ----

// DeleteJob removes a job that belongs to no flow, with its log and messages.
func (d *DB) DeleteJob(ctx context.Context, callerID, id uint32, force bool, actor string) error {
	_, err := d.deleteJob(ctx, callerID, id, force, false, actor)
	return err
}

// DeleteEndedJob is retention's DeleteJob: the job is deleted, even forced, only while
// it is ended (finished or error); deleted false when it is not (a dlq.requeue made it
// run again since retention took its expiry).
func (d *DB) DeleteEndedJob(ctx context.Context, callerID, id uint32, actor string) (deleted bool, err error) {
	return d.deleteJob(ctx, callerID, id, true, true, actor)
}

func (d *DB) deleteJob(ctx context.Context, callerID, id uint32, force, ended bool, actor string) (bool, error) {
	n, err := (&deleteJobArgs{JobKey: keys.Job(callerID, id), Ctx: int64(d.ContextID), Caller: int64(callerID), ID: int64(id),
		Force: force, Ended: ended, Actor: actor, NowMs: time.Now().UnixMilli()}).run(ctx, d)
	return n == 1, scriptErr(err, fmt.Sprintf("job %d of caller %d in context %d", id, callerID, d.ContextID))
}

// DeleteFlow removes a flow with its jobs, their logs and messages, its DAG state and
// results. A running flow is refused unless force.
func (d *DB) DeleteFlow(ctx context.Context, flowID uint32, force bool, actor string) error {
	_, err := d.deleteFlow(ctx, flowID, force, false, actor)
	return err
}

// DeleteEndedFlow is retention's DeleteFlow: the flow is deleted, even forced, only
// while it is ended (finished or error), every chunk of a large one checking it;
// deleted false when it is not (a flow.retry made it run again since retention took
// its expiry: what a chunk deleted before stays deleted, and the retry, which a flow
// being deleted refuses, comes after it or not at all).
func (d *DB) DeleteEndedFlow(ctx context.Context, flowID uint32, actor string) (deleted bool, err error) {
	return d.deleteFlow(ctx, flowID, true, true, actor)
}

func (d *DB) deleteFlow(ctx context.Context, flowID uint32, force, ended bool, actor string) (bool, error) {
	if ok, err := d.deleteFlowJobs(ctx, flowID, force, ended); err != nil || !ok {
		return false, err
	}
	n, err := (&deleteFlowArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), ResultsKey: keys.FlowResults(flowID), MessagesKey: keys.FlowMessages(flowID),
		Ctx: int64(d.ContextID), Flow: int64(flowID), Force: force, Ended: ended, Actor: actor, NowMs: time.Now().UnixMilli()}).run(ctx, d)
	return n == 1, scriptErr(err, fmt.Sprintf("flow %d in context %d", flowID, d.ContextID))
}

func allTypesJSON() string {
	var parts []string
	for _, t := range model.ScriptTypes() {
		parts = append(parts, strconv.Quote(string(t)))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// DeleteRunner removes a runner record, its process heartbeats and its pinned queues.
// Jobs waiting in its pinned queues refuse the delete unless force.
func (d *DB) DeleteRunner(ctx context.Context, runnerID uint32, force bool, actor string) error {
	_, err := (&deleteRunnerArgs{RunnerKey: keys.Runner(runnerID), ProcsKey: keys.RunnerProcs(runnerID), Ctx: int64(d.ContextID), ID: int64(runnerID),
		Force: force, Actor: actor, NowMs: time.Now().UnixMilli(), Types: json.RawMessage(allTypesJSON())}).run(ctx, d)
	return scriptErr(err, fmt.Sprintf("runner %d in context %d", runnerID, d.ContextID))
}

// DeleteContext removes a context: every key of its database, and its entries in DB 0
// (registry, active flows, due work, delayed work and schedules, expiries, wake lists;
// read after the flush). A context with running flows is refused unless force.
func (s *Store) DeleteContext(ctx context.Context, ctxID uint32, force bool) error {
	db, err := s.Ctx(ctxID)
	if err != nil {
		return err
	}
	if _, err := s.LoadContext(ctx, ctxID); err != nil {
		return err
	}
	prefix := strconv.FormatUint(uint64(ctxID), 10) + ":"
	coord := s.Coord(ctxID) // its coordination entries; the registry is on the primary
	active, err := coord.SMembers(ctx, keys.ActiveFlows).Result()
	if err != nil {
		return err
	}
	var running []string
	for _, a := range active {
		if strings.HasPrefix(a, prefix) {
			running = append(running, a)
		}
	}
	if len(running) > 0 && !force {
		return &ConflictError{Msg: fmt.Sprintf("context %d has %d running flow(s); cancel them or delete with force", ctxID, len(running))}
	}
	// The context's tokens on its runners' wake lists go too: collect the runners before
	// the flush.
	var runners *redis.StringSliceCmd
	if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
		runners = p.ZRange(ctx, keys.RunnerIndex, 0, -1)
		return nil
	}); err != nil {
		return err
	}
	if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.FlushDBAsync(ctx)
		p.Publish(ctx, keys.AuthChanged, keys.Context(ctxID)) // open streams of the context end
		return nil
	}); err != nil {
		return fmt.Errorf("empty the database of context %d: %w", ctxID, err)
	}
	if err := dropContextEntries(ctx, coord, ctxID, runners.Val()); err != nil {
		return err
	}
	_, err = s.G().TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, keys.Contexts, strconv.FormatUint(uint64(ctxID), 10))
		p.Publish(ctx, keys.Control, "context-deleted:"+strconv.FormatUint(uint64(ctxID), 10))
		return nil
	})
	return err
}

// dropContextEntries removes a deleted context's entries of its server's DB 0 (coord),
// read after its database's flush (a flow started, or work delayed or scheduled,
// since DeleteContext's check is gone with the database, and its entries go with it):
// active flows, due retries and releases, delayed starts, schedules, expiries, remote
// deliveries due, its tokens on its runners' wake lists (shared with the server's
// other contexts), the runners' context sets, the busy set.
func dropContextEntries(ctx context.Context, coord *redis.Client, ctxID uint32, runners []string) error {
	id := strconv.FormatUint(uint64(ctxID), 10)
	prefix := id + ":"
	var wake []string
	for _, r := range runners {
		if n, err := strconv.ParseUint(r, 10, 32); err == nil {
			for _, t := range model.ScriptTypes() {
				wake = append(wake, keys.WakeRunner(uint32(n), keys.Queue(string(t))), keys.WakeRunner(uint32(n), keys.PinnedQueue(uint32(n), string(t))))
			}
		}
	}
	active, _ := coord.SMembers(ctx, keys.ActiveFlows).Result()
	zsets := map[string][]string{}
	for _, k := range []string{keys.Due, keys.Expire, keys.RemoteDue, keys.Delayed, keys.ScheduleDue} {
		zsets[k], _ = coord.ZRange(ctx, k, 0, -1).Result()
	}
	// a zset's members of the context: "<ctx>:…", coord:due's "retry:<ctx>:…" and
	// "release:<ctx>:…", coord:remote_due's "<ctx>|…"
	ofContext := func(key, m string) bool {
		switch key {
		case keys.Due:
			return strings.HasPrefix(m, "retry:"+prefix) || strings.HasPrefix(m, "release:"+prefix)
		case keys.RemoteDue:
			return strings.HasPrefix(m, id+"|")
		}
		return strings.HasPrefix(m, prefix)
	}
	_, err := coord.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range active {
			if strings.HasPrefix(m, prefix) {
				p.SRem(ctx, keys.ActiveFlows, m)
			}
		}
		for k, members := range zsets {
			for _, m := range members {
				if ofContext(k, m) {
					p.ZRem(ctx, k, m)
				}
			}
		}
		for _, w := range wake {
			p.LRem(ctx, w, 0, ctxID) // the context's tokens only
		}
		for _, r := range runners {
			if n, err := strconv.ParseUint(r, 10, 32); err == nil {
				p.SRem(ctx, keys.RunnerContexts(uint32(n)), ctxID)
			}
		}
		p.ZRem(ctx, keys.Busy, ctxID)
		return nil
	})
	return err
}

// ---- retention ----

// Expired is an object whose retention ended.
type Expired struct {
	ContextID uint32
	Kind      string // "flow", "job" or "stage" (a flow's creation: SweepFlowStageAll)
	FlowID    uint32
	CallerID  uint32
	JobID     uint32
	member    string
}

// PopExpired takes up to limit objects whose retention ended (they leave the
// coord:expire of their server).
func (s *Store) PopExpired(ctx context.Context, now time.Time, limit int) ([]Expired, error) {
	var e errs
	var out []Expired
	for _, m := range s.popDue(ctx, keys.Expire, now, limit, &e) {
		parts := strings.Split(m, ":")
		switch {
		case len(parts) == 3 && parts[1] == "flow":
			out = append(out, Expired{ContextID: parseU32(parts[0]), Kind: "flow", FlowID: parseU32(parts[2]), member: m})
		case len(parts) == 3 && parts[1] == "stage":
			out = append(out, Expired{ContextID: parseU32(parts[0]), Kind: "stage", FlowID: parseU32(parts[2]), member: m})
		case len(parts) == 4 && parts[1] == "job":
			out = append(out, Expired{ContextID: parseU32(parts[0]), Kind: "job", CallerID: parseU32(parts[2]), JobID: parseU32(parts[3]), member: m})
		}
	}
	if len(out) == 0 && e.first != nil {
		return nil, fmt.Errorf("pop expired objects: %w", e.first)
	}
	return out, nil
}

// NextExpiry returns when the earliest retention ends (zero if none).
func (s *Store) NextExpiry(ctx context.Context) (time.Time, error) {
	return s.nextDue(ctx, keys.Expire)
}

// ExpireAt sets when retention deletes an object of a context (member as in
// coord:expire: "flow:<id>" or "job:<caller>:<id>"), in its server's DB 0.
func (s *Store) ExpireAt(ctx context.Context, ctxID uint32, member string, at time.Time) error {
	return s.Coord(ctxID).ZAdd(ctx, keys.Expire, redis.Z{Score: float64(at.UnixMilli()),
		Member: strconv.FormatUint(uint64(ctxID), 10) + ":" + member}).Err()
}

// TrimEvents drops a context's events older than the cutoff, except those of the
// flows and jobs it still keeps (see lua/trim_events.lua).
func (d *DB) TrimEvents(ctx context.Context, before time.Time) error {
	_, err := (&trimEventsArgs{EventsKey: keys.Events, FlowsKey: keys.FlowIndex, JobsKey: keys.JobIndex, Cutoff: before.UnixMilli()}).run(ctx, d)
	return err
}

// ---- helpers ----

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// scriptErr maps a script's NOTFOUND/CONFLICT replies onto the store's errors.
func scriptErr(err error, what string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "NOTFOUND"):
		return notFound("%s", what)
	case strings.HasPrefix(msg, "CONFLICT "):
		return &ConflictError{Msg: strings.TrimPrefix(msg, "CONFLICT ")}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// SetJobStatus changes a job's status (and other fields), keeping the status
// indexes right.
func (d *DB) SetJobStatus(ctx context.Context, callerID, id uint32, st model.JobStatus, fields ...any) error {
	_, err := (&setJobStatusArgs{JobKey: keys.Job(callerID, id), Caller: int64(callerID), ID: int64(id), St: string(st), Fields: fields}).run(ctx, d)
	return err
}

// SetSchedulerSettings records the scheduler's default retention (0: forever) and its
// safety sweep's interval in DB 0 of every server (keys.SchedulerSettings), where the
// finish script of a runner that applies job ends itself (Finish.Apply) reads them: it
// applies an end only when the object's retention is at least the sweep's interval,
// so that the scheduler's expiry timer (which waits at most that long) finds the
// deadline in time. The scheduler writes them at its start and at each sweep.
func (s *Store) SetSchedulerSettings(ctx context.Context, retention, sweep time.Duration) error {
	for _, srv := range s.servers {
		if err := srv.Coord().HSet(ctx, keys.SchedulerSettings, "retention_ms", retention.Milliseconds(), "sweep_ms", sweep.Milliseconds()).Err(); err != nil {
			return fmt.Errorf("record the scheduler's settings: %w", err)
		}
	}
	return nil
}
