package store

import (
	"context"
	"fmt"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// A flow's schedule (docs/scheduling.md): each run of a tick creates a flow of the
// schedule's template as flow.begin, job.create_batch and flow.create would (a stage
// that the retention sweeps if the creation is cut short), under the tick's
// uniqueness key (lua/sched_flow.lua), so that however often the tick's run is tried
// (a scheduler that died before recording it, a second scheduler, a backfill or a
// trigger of the same tick) one flow is made. Starting it is the caller's (the
// scheduler's start, which a retried start leaves as it is).

// scheduleStageTTL is how long a flow run's creation lives between two of its calls
// before the retention deletes what it made.
const scheduleStageTTL = time.Minute

// FlowRun is the run of a flow's schedule for one tick.
type FlowRun struct {
	// Flow is the tick's flow (nil: its run is a job, Job). A flow of status
	// dispatched is created and not started yet.
	Flow *model.Flow
	// Job is the tick's run when it is a job "<caller>:<id>" (the schedule's run of
	// that tick from before it became a flow's).
	Job string
	// Existing: the run was made before (by this tick's run tried earlier, elsewhere).
	Existing bool
	// UnderWay: the run's creation is under way elsewhere (Flow holds its id only);
	// ask again later.
	UnderWay bool
}

// MakeFlowRun makes (or finds) the flow of a flow's schedule's tick: created with
// every job of the template, as a unit, not started. An error leaves nothing made
// (what was made is deleted, or left to the retention when the deletion fails too).
func (s *Store) MakeFlowRun(ctx context.Context, sc *model.Schedule, tick time.Time, actor string) (FlowRun, error) {
	if sc.Flow == nil {
		return FlowRun{}, fmt.Errorf("schedule %s has no flow", sc.ID)
	}
	order, err := sc.Flow.Order()
	if err != nil {
		return FlowRun{}, err
	}
	db, err := s.Ctx(sc.ContextID)
	if err != nil {
		return FlowRun{}, err
	}
	r, err := (&schedFlowArgs{UniqueKey: keys.Unique(RunUniqueKey(sc.ContextID, sc.ID, tick)), FlowSeqKey: keys.FlowSeq, JobSeqKey: keys.JobSeq(sc.CallerID),
		Ctx: idArg(sc.ContextID), Caller: idArg(sc.CallerID), N: int64(len(order)), TTLMs: scheduleStageTTL.Milliseconds(), NowMs: time.Now().UnixMilli(),
		UniqueTTLMs: RunUniqueTTL.Milliseconds()}).run(ctx, db)
	if err != nil {
		return FlowRun{}, scriptErr(err, fmt.Sprintf("schedule %s's run of %d", sc.ID, tick.UnixMilli()))
	}
	switch r.State {
	case "job":
		return FlowRun{Job: r.Run, Existing: true}, nil
	case "staging":
		return FlowRun{Flow: &model.Flow{ID: parseU32(r.Run), ContextID: sc.ContextID}, Existing: true, UnderWay: true}, nil
	case "stored":
		f, err := db.LoadFlow(ctx, parseU32(r.Run))
		if err != nil {
			return FlowRun{}, err
		}
		return FlowRun{Flow: f, Existing: true}, nil
	}
	flowID := parseU32(r.Run)
	f, err := s.createFlowRun(ctx, db, sc, tick, order, flowID, uint32(r.First), actor)
	if err != nil {
		// Nothing of a refused run stays: its stage (and with it the key's claim) goes.
		if _, aerr := db.SweepFlowStageAll(context.WithoutCancel(ctx), flowID, true); aerr != nil {
			return FlowRun{}, fmt.Errorf("%w (flow %d's jobs are deleted when its creation expires: %v)", err, flowID, aerr)
		}
		return FlowRun{}, err
	}
	return FlowRun{Flow: f}, nil
}

// createFlowRun creates the jobs of a begun flow run (their ids from first, in the
// template's order) a chunk a call, then the flow.
func (s *Store) createFlowRun(ctx context.Context, db *DB, sc *model.Schedule, tick time.Time, order []int, flowID, first uint32, actor string) (*model.Flow, error) {
	jobs := sc.Flow.Instance(order, first, sc.CallerID, sc.ContextID, sc.ID, tick.UnixMilli())
	ids := make([]uint32, len(jobs))
	for at := 0; at < len(jobs); at += StageSweepChunk {
		part := jobs[at:min(at+StageSweepChunk, len(jobs))]
		res, err := s.CreateStagedJobs(ctx, sc.ContextID, flowID, sc.CallerID, part, actor)
		if err != nil {
			return nil, err
		}
		for k, r := range res {
			if r.Err != nil {
				return nil, fmt.Errorf("schedule %s: job %q of its flow: %w", sc.ID, sc.Flow.Jobs[order[at+k]].Name, r.Err)
			}
			ids[at+k] = part[k].ID
		}
	}
	f, _, err := s.CreateFlow(ctx, &model.Flow{ID: flowID, CallerID: sc.CallerID, ContextID: sc.ContextID, Jobs: ids, EnvVars: sc.Flow.EnvVars,
		ScheduleID: sc.ID, ScheduleTickMs: tick.UnixMilli()}, actor)
	return f, err
}
