package protoconv

import (
	"encoding/json"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// ScheduleSpecToPB converts a schedule's spec.
func ScheduleSpecToPB(s model.ScheduleSpec) *herov1.ScheduleSpec {
	return &herov1.ScheduleSpec{Cron: s.Cron, Every: s.Every, Timezone: s.Timezone, Jitter: s.Jitter}
}

// ScheduleSpecFromPB converts a schedule's spec (nil: none).
func ScheduleSpecFromPB(s *herov1.ScheduleSpec) *model.ScheduleSpec {
	if s == nil {
		return nil
	}
	return &model.ScheduleSpec{Cron: s.Cron, Every: s.Every, Timezone: s.Timezone, Jitter: s.Jitter}
}

// ScheduleToPB converts a schedule; its job template (JSON of a job) becomes a Job.
func ScheduleToPB(s *model.Schedule) *herov1.Schedule {
	if s == nil {
		return nil
	}
	out := &herov1.Schedule{Id: s.ID, ContextId: s.ContextID, CallerId: s.CallerID, Spec: ScheduleSpecToPB(s.Spec),
		Overlap: string(s.Overlap), CatchupWindow: s.CatchupWindow, Paused: s.Paused, Note: s.Note, NextTickMs: s.NextTickMs,
		LastTickMs: s.LastTickMs, LastRun: s.LastRun, Fired: s.Fired, Skipped: s.Skipped, Missed: s.Missed, LastError: s.LastError,
		CreatedAtMs: s.CreatedAtMs, UpdatedAtMs: s.UpdatedAtMs, LastFlow: s.LastFlow, Flow: FlowTemplateToPB(s.Flow)}
	if len(s.Job) > 0 {
		var j model.Job
		if json.Unmarshal(s.Job, &j) == nil {
			out.Job = JobToPB(&j)
		}
	}
	return out
}

// ScheduleFromPB converts a schedule; its Job becomes the job template's JSON.
func ScheduleFromPB(s *herov1.Schedule) *model.Schedule {
	if s == nil {
		return nil
	}
	out := &model.Schedule{ID: s.Id, ContextID: s.ContextId, CallerID: s.CallerId, Overlap: model.OverlapPolicy(s.Overlap),
		CatchupWindow: s.CatchupWindow, Paused: s.Paused, Note: s.Note, NextTickMs: s.NextTickMs, LastTickMs: s.LastTickMs,
		LastRun: s.LastRun, Fired: s.Fired, Skipped: s.Skipped, Missed: s.Missed, LastError: s.LastError,
		CreatedAtMs: s.CreatedAtMs, UpdatedAtMs: s.UpdatedAtMs, LastFlow: s.LastFlow, Flow: FlowTemplateFromPB(s.Flow)}
	if sp := ScheduleSpecFromPB(s.Spec); sp != nil {
		out.Spec = *sp
	}
	if s.Job != nil {
		out.Job, _ = json.Marshal(JobFromPB(s.Job))
	}
	return out
}

// FlowTemplateToPB converts a flow's schedule's template (nil: none).
func FlowTemplateToPB(t *model.FlowTemplate) *herov1.FlowTemplate {
	if t == nil {
		return nil
	}
	out := &herov1.FlowTemplate{EnvVars: t.EnvVars, Jobs: make([]*herov1.TemplateJob, len(t.Jobs))}
	for i := range t.Jobs {
		out.Jobs[i] = &herov1.TemplateJob{Name: t.Jobs[i].Name, Depends: t.Jobs[i].Depends, Job: JobToPB(&t.Jobs[i].Job)}
	}
	return out
}

// FlowTemplateFromPB converts a flow's schedule's template (nil: none).
func FlowTemplateFromPB(t *herov1.FlowTemplate) *model.FlowTemplate {
	if t == nil {
		return nil
	}
	out := &model.FlowTemplate{EnvVars: t.EnvVars, Jobs: make([]model.TemplateJob, len(t.Jobs))}
	for i, j := range t.Jobs {
		out.Jobs[i] = model.TemplateJob{Name: j.Name, Depends: j.Depends, Job: *JobFromPB(j.Job)}
	}
	return out
}

// QueueToPB converts a job queue (queue.list's item).
func QueueToPB(q model.Queue) *herov1.Queue {
	return &herov1.Queue{Queue: q.Queue, ScriptType: q.ScriptType, Executor: q.Executor, Depth: q.Depth, Pinned: q.Pinned,
		Runners: q.Runners, Paused: q.Paused, PausedAtMs: q.PausedAtMs, PausedBy: q.PausedBy, PauseNote: q.PauseNote}
}

// QueueFromPB converts a job queue.
func QueueFromPB(q *herov1.Queue) model.Queue {
	if q == nil {
		return model.Queue{}
	}
	return model.Queue{Queue: q.Queue, ScriptType: q.ScriptType, Executor: q.Executor, Depth: q.Depth, Pinned: q.Pinned,
		Runners: q.Runners, Paused: q.Paused, PausedAtMs: q.PausedAtMs, PausedBy: q.PausedBy, PauseNote: q.PauseNote}
}
