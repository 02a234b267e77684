package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// A flow created as a unit: flow.begin reserves the flow's id and a range of job ids
// of its caller and records a stage (keys.FlowStage) with an expiry in coord:expire;
// the flow's jobs are created with the flow's id (flow_id) and ids in the range, each
// batch renewing the expiry; flow.create stores the flow and drops the stage. A stage
// that is not renewed in time (its client gone: killed, cut off) or that flow.abort
// ends is swept: its jobs are deleted a chunk at a time (StageSweepChunk), so that an
// interrupted creation leaves nothing outside a flow.

// StageSweepChunk is how many job ids of a stage one sweep call goes through: each
// call stays well under a millisecond of Redis time.
const StageSweepChunk = 500

// stageHold is how long a stage being stored (flow.create) or swept is held back from
// the sweep: the store takes one call, a sweep some; a process that died in between
// leaves the stage to be taken up after it.
const stageHold = 2 * time.Minute

// Stage is a flow's creation in progress: its flow id, the range of its jobs' ids
// (FirstJob to LastJob, all of its caller) and when it expires unless renewed.
type Stage struct {
	FlowID      uint32
	CallerID    uint32
	FirstJob    uint32
	LastJob     uint32
	ExpiresAtMs int64
}

// Jobs is the number of jobs the stage was begun for.
func (s Stage) Jobs() int { return int(s.LastJob-s.FirstJob) + 1 }

// BeginFlow begins a flow of n jobs of a caller created as a unit (see Stage); ttl is
// how long the stage lives without a renewal.
func (d *DB) BeginFlow(ctx context.Context, callerID uint32, n int, ttl time.Duration) (Stage, error) {
	if callerID == 0 {
		return Stage{}, &model.ValidationError{Object: "flow", Field: "caller_id", Msg: "must be set (the actor creating the flow)"}
	}
	if n < 1 || n > model.MaxFlowJobs {
		return Stage{}, &model.ValidationError{Object: "flow", Field: "jobs", Msg: fmt.Sprintf("jobs must be 1 to %d, got %d", model.MaxFlowJobs, n)}
	}
	r, err := (&flowStageBeginArgs{FlowSeqKey: keys.FlowSeq, JobSeqKey: keys.JobSeq(callerID), Ctx: idArg(d.ContextID), Caller: idArg(callerID),
		N: int64(n), TTLMs: ttl.Milliseconds(), NowMs: time.Now().UnixMilli()}).run(ctx, d)
	if err != nil {
		return Stage{}, scriptErr(err, "begin flow")
	}
	return Stage{FlowID: uint32(r.Flow), CallerID: callerID, FirstJob: uint32(r.First), LastJob: uint32(r.Last), ExpiresAtMs: r.Expires}, nil
}

// TouchFlowStage checks that a flow's stage is open and the caller's, renews its
// expiry, and returns it (the range the jobs' ids must be in). ErrNotFound: no such
// stage (never begun, or expired and swept).
func (d *DB) TouchFlowStage(ctx context.Context, flowID, callerID uint32) (Stage, error) {
	r, err := (&flowStageTouchArgs{StageKey: keys.FlowStage(flowID), Ctx: idArg(d.ContextID), Flow: idArg(flowID), Caller: idArg(callerID), NowMs: time.Now().UnixMilli()}).run(ctx, d)
	if err != nil {
		return Stage{}, scriptErr(err, fmt.Sprintf("flow %d begun with flow.begin in context %d (none, or it expired)", flowID, d.ContextID))
	}
	return Stage{FlowID: flowID, CallerID: callerID, FirstJob: uint32(r.First), LastJob: uint32(r.Last)}, nil
}

// stageCommit marks a flow's stage as being stored (open=false) or opens it again
// after a refused store (open=true); ok false: the flow has no stage.
func (d *DB) stageCommit(ctx context.Context, flowID, callerID uint32, open bool) (Stage, bool, error) {
	op := "commit"
	if open {
		op = "open"
	}
	r, err := (&flowStageCommitArgs{StageKey: keys.FlowStage(flowID), Ctx: idArg(d.ContextID), Flow: idArg(flowID), Caller: idArg(callerID),
		NowMs: time.Now().UnixMilli(), Op: op, HoldMs: stageHold.Milliseconds()}).run(ctx, d)
	if err != nil {
		return Stage{}, false, scriptErr(err, fmt.Sprintf("flow %d's stage", flowID))
	}
	if r.Staged == 0 {
		return Stage{}, false, nil
	}
	if len(r.IDs) != 2 {
		return Stage{}, false, fmt.Errorf("flow %d's stage: a range of %d ids", flowID, len(r.IDs))
	}
	return Stage{FlowID: flowID, CallerID: callerID, FirstJob: uint32(r.IDs[0]), LastJob: uint32(r.IDs[1])}, true, nil
}

// SweepFlowStage goes through the next chunk of a flow's stage (flow_stage_sweep.lua):
// an expired stage's jobs are deleted, a stored flow's stage dropped, a renewed one
// left; force (flow.abort) sweeps an open stage now. more: call again.
func (d *DB) SweepFlowStage(ctx context.Context, flowID uint32, force bool) (more bool, deleted int, err error) {
	r, err := (&flowStageSweepArgs{StageKey: keys.FlowStage(flowID), FlowKey: keys.Flow(flowID), Ctx: idArg(d.ContextID), FlowID: idArg(flowID),
		NowMs: time.Now().UnixMilli(), Force: force, Chunk: StageSweepChunk, HoldMs: stageHold.Milliseconds()}).run(ctx, d)
	if err != nil {
		return false, 0, scriptErr(err, fmt.Sprintf("flow %d's stage", flowID))
	}
	return r.More == 1, int(r.Deleted), nil
}

// SweepFlowStageAll calls SweepFlowStage until the stage is done with; it returns the
// jobs deleted.
func (d *DB) SweepFlowStageAll(ctx context.Context, flowID uint32, force bool) (int, error) {
	total := 0
	for {
		more, n, err := d.SweepFlowStage(ctx, flowID, force)
		total += n
		if err != nil || !more {
			return total, err
		}
		force = false // swept already: the next calls go on with it
	}
}

// idArg is an id as a script's string argument.
func idArg(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// CreateStagedJobs creates jobs of a flow begun with BeginFlow (all of one context and
// caller, the stage's): the stage is renewed, each job gets the flow's id and must
// have an id in the stage's range (else its item is a ValidationError), then they are
// created as CreateJobs creates them.
func (s *Store) CreateStagedJobs(ctx context.Context, ctxID, flowID, callerID uint32, jobs []*model.Job, actor string) ([]JobCreated, error) {
	db, err := s.Ctx(ctxID)
	if err != nil {
		return nil, err
	}
	st, err := db.TouchFlowStage(ctx, flowID, callerID)
	if err != nil {
		return nil, err
	}
	out := make([]JobCreated, len(jobs))
	var ok []*model.Job
	var at []int
	for i, j := range jobs {
		if j.ID < st.FirstJob || j.ID > st.LastJob || j.CallerID != callerID || j.ContextID != ctxID {
			out[i].Err = &model.ValidationError{Object: "job", ID: strconv.FormatUint(uint64(j.ID), 10), Field: "id",
				Msg: fmt.Sprintf("id %d is not one flow.begin gave flow %d (%d to %d of caller %d)", j.ID, flowID, st.FirstJob, st.LastJob, callerID)}
			continue
		}
		j.FlowID = flowID
		ok, at = append(ok, j), append(at, i)
	}
	var made []uint32
	for k, r := range s.CreateJobs(ctx, ok, actor) {
		out[at[k]] = r
		if r.Err == nil && r.Created {
			made = append(made, r.Job.ID)
		}
	}
	if err := db.dropIfStageEnded(ctx, flowID, callerID, made, actor); err != nil {
		return nil, err
	}
	return out, nil
}

// dropIfStageEnded deletes the staged jobs just made when their stage ended between
// its touch and their creation (flow.abort, or its expiry: its sweep may have passed
// their ids already, which left them outside any flow for good) and the flow was not
// stored: the stage neither open nor being stored, or gone. A stage that ends after
// this read is swept after them. The call is refused then, naming the stage.
func (d *DB) dropIfStageEnded(ctx context.Context, flowID, callerID uint32, made []uint32, actor string) error {
	if len(made) == 0 {
		return nil
	}
	var state *redis.StringCmd
	var stored *redis.IntCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		state = p.HGet(ctx, keys.FlowStage(flowID), "state")
		stored = p.Exists(ctx, keys.Flow(flowID))
		return nil
	}); err != nil {
		return fmt.Errorf("flow %d's stage: %w", flowID, err)
	}
	if st := state.Val(); st == "open" || st == "storing" || stored.Val() == 1 {
		return nil
	}
	for _, id := range made {
		if err := d.DeleteJob(ctx, callerID, id, true, actor); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return &ConflictError{Msg: fmt.Sprintf("flow %d begun with flow.begin in context %d ended (aborted, or expired) while its jobs were created; they are deleted", flowID, d.ContextID)}
}

// commitStage is CreateFlow's part for a flow begun with BeginFlow: the stage is
// marked as being stored, and the flow must list every job of its range. done (nil
// when the flow has no stage) ends it after the store: a stored flow drops the stage,
// a refused one opens it again.
func (d *DB) commitStage(ctx context.Context, f *model.Flow) (done func(stored bool), err error) {
	if f.ID == 0 {
		return nil, nil
	}
	st, staged, err := d.stageCommit(ctx, f.ID, f.CallerID, false)
	if err != nil || !staged {
		return nil, err
	}
	done = func(stored bool) {
		// Best effort: a stage left behind is the sweep's (stored: dropped, else swept
		// after the hold).
		if stored {
			_, _, _ = d.SweepFlowStage(context.WithoutCancel(ctx), f.ID, false)
			return
		}
		_, _, _ = d.stageCommit(context.WithoutCancel(ctx), f.ID, f.CallerID, true)
	}
	bad := func(format string, a ...any) (func(bool), error) {
		done(false)
		return nil, &model.ValidationError{Object: "flow", ID: strconv.FormatUint(uint64(f.ID), 10), Field: "jobs", Msg: fmt.Sprintf(format, a...)}
	}
	if len(f.Jobs) != st.Jobs() {
		return bad("lists %d jobs; flow.begin began the flow for %d (ids %d to %d)", len(f.Jobs), st.Jobs(), st.FirstJob, st.LastJob)
	}
	for _, id := range f.Jobs {
		if id < st.FirstJob || id > st.LastJob {
			return bad("job %d is not one flow.begin gave the flow (%d to %d)", id, st.FirstJob, st.LastJob)
		}
	}
	return done, nil
}
