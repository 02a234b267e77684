package hero

import (
	"context"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Schedules (docs/scheduling.md): a schedule makes a run of its job (a Submit as its
// creator's), or of its flow (a flow of the template's jobs, created as a unit and
// started), on each tick of its spec, once however many schedulers run.

// ScheduleSettings are a schedule's settings: all of them for CreateSchedule (Spec,
// and Job or Flow, required), the ones to change for UpdateSchedule (nil or empty:
// unchanged; Job or Flow replaces the schedule's job or flow).
type ScheduleSettings struct {
	Spec *model.ScheduleSpec // a cron expression (with a time zone) or an interval; jitter
	Job  *model.Job          // the template of each run (no id)
	// Flow, instead of Job: each run creates a flow of its jobs (by name, each naming
	// the ones it depends on; a flow file's, as `heroctl flow submit` reads it) with
	// its Env, and starts it. Its ID, CreationTTL and Progress are not used.
	Flow          *FlowSpec
	Overlap       model.OverlapPolicy // skip (the default), buffer_one, allow_all, cancel_previous
	CatchupWindow *time.Duration      // missed ticks within it run after an outage (default 1 min; 0: all)
	Paused        bool                // CreateSchedule only: create it paused, with Note
	Note          string
}

func (c *Client) scheduleRequest(id string, s ScheduleSettings) *herov1.ScheduleRequest {
	r := &herov1.ScheduleRequest{ContextId: c.cfg.Context, Id: id, Overlap: string(s.Overlap), Paused: s.Paused, Note: s.Note}
	if s.Spec != nil {
		r.Spec = protoconv.ScheduleSpecToPB(*s.Spec)
	}
	if s.Job != nil {
		r.Job = c.jobPB(s.Job)
	}
	if s.Flow != nil {
		r.Flow = &herov1.FlowTemplate{EnvVars: s.Flow.Env, Jobs: make([]*herov1.TemplateJob, len(s.Flow.Jobs))}
		for i := range s.Flow.Jobs {
			fj := &s.Flow.Jobs[i]
			r.Flow.Jobs[i] = &herov1.TemplateJob{Name: fj.Name, Depends: fj.Depends, Job: c.jobPB(&fj.Job)}
		}
	}
	if s.CatchupWindow != nil {
		w := s.CatchupWindow.String()
		r.CatchupWindow = &w
	}
	return r
}

// scheduleCall is one of the calls that answer with a schedule.
func (c *Client) scheduleCall(ctx context.Context, call func(context.Context) (*herov1.Schedule, error)) (*model.Schedule, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	s, err := call(ctx)
	if err != nil {
		return nil, err
	}
	return protoconv.ScheduleFromPB(s), nil
}

// CreateSchedule creates schedule id (admins).
func (c *Client) CreateSchedule(ctx context.Context, id string, s ScheduleSettings) (*model.Schedule, error) {
	return c.scheduleCall(ctx, func(ctx context.Context) (*herov1.Schedule, error) {
		return c.api.CreateSchedule(ctx, c.scheduleRequest(id, s))
	})
}

// UpdateSchedule changes the settings s sets; the next tick is counted from now (admins).
func (c *Client) UpdateSchedule(ctx context.Context, id string, s ScheduleSettings) (*model.Schedule, error) {
	return c.scheduleCall(ctx, func(ctx context.Context) (*herov1.Schedule, error) {
		return c.api.UpdateSchedule(ctx, c.scheduleRequest(id, s))
	})
}

// GetSchedule loads a schedule with its next tick and its counts.
func (c *Client) GetSchedule(ctx context.Context, id string) (*model.Schedule, error) {
	return c.scheduleCall(ctx, func(ctx context.Context) (*herov1.Schedule, error) {
		return c.api.GetSchedule(ctx, &herov1.ScheduleRef{ContextId: c.cfg.Context, Id: id})
	})
}

// ListSchedules lists the context's schedules.
func (c *Client) ListSchedules(ctx context.Context) ([]*model.Schedule, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.ListSchedules(ctx, &herov1.ListSchedulesRequest{ContextId: c.cfg.Context})
	if err != nil {
		return nil, err
	}
	out := make([]*model.Schedule, len(r.Items))
	for i, s := range r.Items {
		out[i] = protoconv.ScheduleFromPB(s)
	}
	return out, nil
}

// PauseSchedule pauses a schedule with a note: no tick fires until ResumeSchedule.
func (c *Client) PauseSchedule(ctx context.Context, id, note string) (*model.Schedule, error) {
	return c.scheduleCall(ctx, func(ctx context.Context) (*herov1.Schedule, error) {
		return c.api.PauseSchedule(ctx, &herov1.ScheduleRef{ContextId: c.cfg.Context, Id: id, Note: note})
	})
}

// ResumeSchedule resumes a schedule from its next tick after now (the pause's ticks
// are not caught up).
func (c *Client) ResumeSchedule(ctx context.Context, id, note string) (*model.Schedule, error) {
	return c.scheduleCall(ctx, func(ctx context.Context) (*herov1.Schedule, error) {
		return c.api.ResumeSchedule(ctx, &herov1.ScheduleRef{ContextId: c.cfg.Context, Id: id, Note: note})
	})
}

// DeleteSchedule deletes a schedule; its runs stay.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	_, err := c.api.DeleteSchedule(ctx, &herov1.ScheduleRef{ContextId: c.cfg.Context, Id: id})
	return err
}

// TriggerSchedule makes a run of the schedule now, whatever its spec or pause: its
// job, or (a flow's schedule) its flow, Submitted.Flow.
func (c *Client) TriggerSchedule(ctx context.Context, id string) (*Submitted, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.TriggerSchedule(ctx, &herov1.ScheduleRef{ContextId: c.cfg.Context, Id: id})
	if err != nil {
		return nil, err
	}
	out := &Submitted{Existing: r.Existing}
	if r.Job != nil {
		out.Job = jobOf(r.Job)
	}
	if r.Flow != nil {
		out.Flow = flowOf(r.Flow)
	}
	return out, nil
}

// BackfillSchedule makes the runs of the schedule's ticks in [from, to) (at most
// 10,000); a tick whose run exists is not made again (existing counts them).
func (c *Client) BackfillSchedule(ctx context.Context, id string, from, to time.Time) (runs, existing int, err error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.BackfillSchedule(ctx, &herov1.BackfillScheduleRequest{ContextId: c.cfg.Context, Id: id,
		From: from.UTC().Format(time.RFC3339Nano), To: to.UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return 0, 0, err
	}
	return int(r.Runs), int(r.Existing), nil
}
