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
		CreatedAtMs: s.CreatedAtMs, UpdatedAtMs: s.UpdatedAtMs}
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
		CreatedAtMs: s.CreatedAtMs, UpdatedAtMs: s.UpdatedAtMs}
	if sp := ScheduleSpecFromPB(s.Spec); sp != nil {
		out.Spec = *sp
	}
	if s.Job != nil {
		out.Job, _ = json.Marshal(JobFromPB(s.Job))
	}
	return out
}
