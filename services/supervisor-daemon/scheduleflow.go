package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// A flow's schedule (docs/scheduling.md): schedule.create or schedule.update with flow
// (a flow file's jobs by name, each naming the jobs it depends on) instead of job;
// each run creates a flow of the template as a unit and starts it
// (store.MakeFlowRun; the scheduler's ticks, and here schedule.trigger and
// schedule.backfill).

// flowTemplateIn is schedule.create's flow.
type flowTemplateIn struct {
	EnvVars map[string]string `json:"env_vars"`
	Jobs    []templateJobIn   `json:"jobs"`
}

// templateJobIn is one job of a flowTemplateIn: job is job.submit's job, without id
// or dependencies (depends names the jobs of the template it depends on).
type templateJobIn struct {
	Name    string   `json:"name"`
	Depends []string `json:"depends"`
	Job     *jobIn   `json:"job"`
}

// scheduleRunResult is schedule.trigger's answer: the run's job, or its flow.
type scheduleRunResult struct {
	Job      *model.Job  `json:"job,omitempty"`
	Flow     *model.Flow `json:"flow,omitempty"`
	Existing bool        `json:"existing"`
}

// scheduleFlow checks a schedule's flow template as flow submission would (its names
// and dependencies, each job as job.submit checks it, its size) and keeps it as the
// schedule's (its caller the runs' caller); the schedule's job goes. An error names
// the job and its field (flow.jobs[i].…).
func (s *service) scheduleFlow(ctx context.Context, p Principal, c *model.Context, db *store.DB, sc *model.Schedule, in *flowTemplateIn) error {
	if len(in.Jobs) > s.maxFlowJobs {
		return invalidParams("flow.jobs", "a flow of %d jobs is more than this server's limit of %d (--max-flow-jobs)", len(in.Jobs), s.maxFlowJobs)
	}
	t := &model.FlowTemplate{EnvVars: in.EnvVars, Jobs: make([]model.TemplateJob, len(in.Jobs))}
	var caller uint32
	for i, tj := range in.Jobs {
		t.Jobs[i] = model.TemplateJob{Name: tj.Name, Depends: tj.Depends}
		if tj.Job == nil {
			return invalidParams(fmt.Sprintf("flow.jobs[%d].job", i), "flow job %d (%q) has no job", i+1, tj.Name)
		}
		if len(tj.Job.Depends)+len(tj.Job.Dependends)+len(tj.Job.Dependencies) > 0 {
			return invalidParams(fmt.Sprintf("flow.jobs[%d].depends", i), "flow job %d (%q): its dependencies are the names in depends, not job ids", i+1, tj.Name)
		}
		j, err := standaloneJob(ctx, p, c, db, tj.Job, sc.ContextID)
		if err == nil && j.ID != 0 {
			err = invalidParams("job.id", "a schedule's job takes no id: each run gets its own")
		}
		if err == nil && caller != 0 && j.CallerID != caller {
			err = invalidParams("job.caller_id", "caller %d: every job of a flow is one caller's (%d)", j.CallerID, caller)
		}
		if err != nil {
			return inTemplateJob(i, tj.Name, err)
		}
		caller = j.CallerID
		t.Jobs[i].Job = *j
	}
	if _, err := t.Order(); err != nil {
		return err
	}
	sc.Flow, sc.Job, sc.CallerID = t, nil, caller
	return nil
}

// inTemplateJob names the template's job i in a refusal of it.
func inTemplateJob(i int, name string, err error) error {
	ae := toAPIError(err)
	if ae.Code != codeInvalidParams {
		return err
	}
	field, _ := ae.Data["field"].(string)
	return invalidParams(fmt.Sprintf("flow.jobs[%d].%s", i, strings.TrimPrefix(field, "job.")), "flow job %d (%q): %s", i+1, name, strings.TrimPrefix(ae.Msg, "invalid params: "))
}

// scheduleFlowRuns makes the flows of ticks of a flow's schedule and starts them: a
// run made before (the tick's run exists) is counted existing, and started if its
// maker died before it did.
func (s *service) scheduleFlowRuns(ctx context.Context, sc *model.Schedule, ticks []time.Time) ([]scheduleRunResult, error) {
	out := make([]scheduleRunResult, len(ticks))
	actor := "schedule:" + sc.ID
	for i, t := range ticks {
		run, err := s.store.MakeFlowRun(ctx, sc, t, actor)
		if err != nil {
			return nil, err
		}
		out[i] = scheduleRunResult{Flow: run.Flow, Existing: run.Existing}
		if run.Flow == nil || run.UnderWay || run.Flow.Status != model.FlowDispatched {
			continue // a job's run (the schedule's before it became a flow's), or not to start here
		}
		r, err := s.scheduler.StartFlow(ctx, &herov1.SchedulerStartFlowRequest{ContextId: sc.ContextID, FlowId: run.Flow.ID, Actor: actor})
		if err != nil {
			return nil, err
		}
		if f := protoconv.FlowFromPB(r.GetFlow()); f != nil {
			out[i].Flow = f
		}
	}
	return out, nil
}
