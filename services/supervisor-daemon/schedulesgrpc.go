package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The schedules' gRPC methods: each calls the JSON-RPC method's handler (schedules.go).

func scheduleParamsFromPB(r *herov1.ScheduleRequest) scheduleParams {
	in := scheduleParams{ContextID: r.ContextId, ID: r.Id, Spec: protoconv.ScheduleSpecFromPB(r.Spec), Overlap: r.Overlap,
		CatchupWindow: r.CatchupWindow, Paused: r.Paused, Note: r.Note}
	if r.Job != nil {
		in.Job = jobInFromPB(r.Job)
	}
	if r.Flow != nil {
		in.Flow = &flowTemplateIn{EnvVars: r.Flow.EnvVars, Jobs: make([]templateJobIn, len(r.Flow.Jobs))}
		for i, j := range r.Flow.Jobs {
			in.Flow.Jobs[i] = templateJobIn{Name: j.Name, Depends: j.Depends, Job: jobInFromPB(j.Job)}
		}
	}
	return in
}

func scheduleRef(r *herov1.ScheduleRef) scheduleRefParams {
	return scheduleRefParams{ContextID: r.ContextId, ID: r.Id, Note: r.Note}
}

func (c *coordinatorServer) CreateSchedule(ctx context.Context, r *herov1.ScheduleRequest) (*herov1.Schedule, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.Schedule, error) {
		s, err := c.s.scheduleCreate(ctx, p, scheduleParamsFromPB(r))
		return protoconv.ScheduleToPB(s), err
	})
}

func (c *coordinatorServer) UpdateSchedule(ctx context.Context, r *herov1.ScheduleRequest) (*herov1.Schedule, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.Schedule, error) {
		s, err := c.s.scheduleUpdate(ctx, p, scheduleParamsFromPB(r))
		return protoconv.ScheduleToPB(s), err
	})
}

func (c *coordinatorServer) GetSchedule(ctx context.Context, r *herov1.ScheduleRef) (*herov1.Schedule, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.Schedule, error) {
		s, err := c.s.scheduleLoad(ctx, p, scheduleRef(r))
		return protoconv.ScheduleToPB(s), err
	})
}

func (c *coordinatorServer) ListSchedules(ctx context.Context, r *herov1.ListSchedulesRequest) (*herov1.ListSchedulesResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListSchedulesResponse, error) {
		l, err := c.s.scheduleList(ctx, p, scheduleListParams{ContextID: r.ContextId})
		if err != nil {
			return nil, err
		}
		out := &herov1.ListSchedulesResponse{Items: make([]*herov1.Schedule, len(l.Items))}
		for i, s := range l.Items {
			out.Items[i] = protoconv.ScheduleToPB(s)
		}
		return out, nil
	})
}

func (c *coordinatorServer) PauseSchedule(ctx context.Context, r *herov1.ScheduleRef) (*herov1.Schedule, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.Schedule, error) {
		s, err := c.s.schedulePause(ctx, p, scheduleRef(r))
		return protoconv.ScheduleToPB(s), err
	})
}

func (c *coordinatorServer) ResumeSchedule(ctx context.Context, r *herov1.ScheduleRef) (*herov1.Schedule, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.Schedule, error) {
		s, err := c.s.scheduleResume(ctx, p, scheduleRef(r))
		return protoconv.ScheduleToPB(s), err
	})
}

func (c *coordinatorServer) DeleteSchedule(ctx context.Context, r *herov1.ScheduleRef) (*herov1.DeleteResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DeleteResponse, error) {
		_, err := c.s.scheduleDelete(ctx, p, scheduleRef(r))
		return &herov1.DeleteResponse{Deleted: err == nil}, err
	})
}

func (c *coordinatorServer) TriggerSchedule(ctx context.Context, r *herov1.ScheduleRef) (*herov1.SubmitJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.SubmitJobResponse, error) {
		x, err := c.s.scheduleTrigger(ctx, p, scheduleRef(r))
		if err != nil {
			return nil, err
		}
		return &herov1.SubmitJobResponse{Job: protoconv.JobToPB(x.Job), Flow: protoconv.FlowToPB(x.Flow), Existing: x.Existing}, nil
	})
}

func (c *coordinatorServer) BackfillSchedule(ctx context.Context, r *herov1.BackfillScheduleRequest) (*herov1.BackfillScheduleResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.BackfillScheduleResponse, error) {
		x, err := c.s.scheduleBackfill(ctx, p, backfillParams{ContextID: r.ContextId, ID: r.Id, From: r.From, To: r.To})
		if err != nil {
			return nil, err
		}
		return &herov1.BackfillScheduleResponse{Runs: uint32(x.Runs), Existing: uint32(x.Existing)}, nil
	})
}
