package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Schedules (docs/scheduling.md): schedule.create|load|list|update|pause|resume|
// delete|trigger|backfill. A schedule's runs are job.submit's of its job as the
// creator's, or flows of its flow template (scheduleflow.go); the scheduler fires the
// ticks (services/scheduler, schedules.go).

type scheduleParams struct {
	ContextID     uint32              `json:"context_id"`
	ID            string              `json:"id"`
	Spec          *model.ScheduleSpec `json:"spec,omitempty"`
	Job           *jobIn              `json:"job,omitempty"`
	Flow          *flowTemplateIn     `json:"flow,omitempty"`
	Overlap       string              `json:"overlap,omitempty"`
	CatchupWindow *string             `json:"catchup_window,omitempty"`
	Paused        bool                `json:"paused,omitempty"`
	Note          string              `json:"note,omitempty"`
}

type scheduleRefParams struct {
	ContextID uint32 `json:"context_id"`
	ID        string `json:"id"`
	Note      string `json:"note,omitempty"`
}

type scheduleListParams struct {
	ContextID uint32 `json:"context_id"`
}

type backfillParams struct {
	ContextID uint32 `json:"context_id"`
	ID        string `json:"id"`
	From      string `json:"from"`
	To        string `json:"to"`
}

type backfillResult struct {
	Runs     int `json:"runs"`     // runs made
	Existing int `json:"existing"` // ticks whose run existed already (the schedule's, or an earlier backfill's)
}

// maxBackfill bounds the ticks of one schedule.backfill.
const maxBackfill = 10000

// defaultCatchup is a schedule's catch-up window unless it names one.
const defaultCatchup = "1m"

func (s *service) scheduleDB(ctx context.Context, p Principal, ctxID uint32, id string, need Role, method string) (*model.Context, *store.DB, error) {
	c, db, err := s.authorize(ctx, p, ctxID, need, method)
	if err != nil {
		return nil, nil, err
	}
	if !model.ValidScheduleID(id) {
		return nil, nil, invalidParams("id", "schedule id %q: 1 to 64 letters, digits, '_', '.', '-', starting with a letter or digit", id)
	}
	return c, db, nil
}

// checkSchedule validates a schedule's settings and returns its ticker.
func checkSchedule(sc *model.Schedule) (*model.Ticker, error) {
	tk, err := sc.Spec.Parse()
	if err != nil {
		return nil, err
	}
	if sc.Overlap == "" {
		sc.Overlap = model.OverlapSkip
	}
	ok := false
	for _, o := range model.OverlapPolicies() {
		ok = ok || o == sc.Overlap
	}
	if !ok {
		return nil, invalidParams("overlap", "overlap %q: one of skip, buffer_one, allow_all, cancel_previous", sc.Overlap)
	}
	if d, err := time.ParseDuration(sc.CatchupWindow); err != nil || d < 0 {
		return nil, invalidParams("catchup_window", "catchup_window %q is not a duration of 0 or more (0: every missed tick runs)", sc.CatchupWindow)
	}
	return tk, nil
}

func (s *service) scheduleCreate(ctx context.Context, p Principal, in scheduleParams) (*model.Schedule, error) {
	c, db, err := s.scheduleDB(ctx, p, in.ContextID, in.ID, RoleAdmin, "schedule.create")
	if err != nil {
		return nil, err
	}
	if in.Spec == nil {
		return nil, invalidParams("spec", "schedule.create needs spec ({cron} or {every}) and job or flow")
	}
	if (in.Job == nil) == (in.Flow == nil) {
		return nil, invalidParams("job", "schedule.create needs one of job (a job's schedule) and flow (a flow's schedule)")
	}
	sc := &model.Schedule{ID: in.ID, ContextID: in.ContextID, Spec: *in.Spec, Overlap: model.OverlapPolicy(in.Overlap), CatchupWindow: defaultCatchup}
	if in.CatchupWindow != nil {
		sc.CatchupWindow = *in.CatchupWindow
	}
	if err := s.scheduleRun(ctx, p, c, db, sc, in); err != nil {
		return nil, err
	}
	sc.Paused, sc.Note = in.Paused, in.Note // (stored by the create itself)
	if err := putSchedule(ctx, db, sc, true); err != nil {
		return nil, err
	}
	return db.LoadSchedule(ctx, sc.ID)
}

// scheduleRun keeps what in gives of a schedule's runs: its job, or its flow.
func (s *service) scheduleRun(ctx context.Context, p Principal, c *model.Context, db *store.DB, sc *model.Schedule, in scheduleParams) error {
	switch {
	case in.Job != nil && in.Flow != nil:
		return invalidParams("job", "give a schedule's job or its flow, not both")
	case in.Flow != nil:
		return s.scheduleFlow(ctx, p, c, db, sc, in.Flow)
	case in.Job != nil:
		return s.scheduleJob(ctx, p, c, db, sc, in.Job)
	}
	return nil
}

// scheduleJob checks a schedule's job as job.submit would and keeps it as the
// schedule's template (its caller the runs' caller); a flow it had goes.
func (s *service) scheduleJob(ctx context.Context, p Principal, c *model.Context, db *store.DB, sc *model.Schedule, in *jobIn) error {
	j, err := standaloneJob(ctx, p, c, db, in, sc.ContextID)
	if err != nil {
		return err
	}
	if j.ID != 0 {
		return invalidParams("job.id", "a schedule's job takes no id: each run gets its own")
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	sc.Job, sc.Flow, sc.CallerID = b, nil, j.CallerID
	return nil
}

func (s *service) scheduleUpdate(ctx context.Context, p Principal, in scheduleParams) (*model.Schedule, error) {
	c, db, err := s.scheduleDB(ctx, p, in.ContextID, in.ID, RoleAdmin, "schedule.update")
	if err != nil {
		return nil, err
	}
	sc, err := db.LoadSchedule(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if in.Spec != nil {
		sc.Spec = *in.Spec
	}
	if in.Overlap != "" {
		sc.Overlap = model.OverlapPolicy(in.Overlap)
	}
	if in.CatchupWindow != nil {
		sc.CatchupWindow = *in.CatchupWindow
	}
	if err := s.scheduleRun(ctx, p, c, db, sc, in); err != nil {
		return nil, err
	}
	if err := putSchedule(ctx, db, sc, false); err != nil {
		return nil, err
	}
	return db.LoadSchedule(ctx, sc.ID)
}

// putSchedule checks sc and stores it (created: a new one) with its next tick from now.
func putSchedule(ctx context.Context, db *store.DB, sc *model.Schedule, created bool) error {
	tk, err := checkSchedule(sc)
	if err != nil {
		return err
	}
	next := tk.Next(time.Now())
	return db.PutSchedule(ctx, sc, created, next, tk.Fire(sc.ID, next))
}

func (s *service) scheduleLoad(ctx context.Context, p Principal, in scheduleRefParams) (*model.Schedule, error) {
	_, db, err := s.scheduleDB(ctx, p, in.ContextID, in.ID, RoleReader, "schedule.load")
	if err != nil {
		return nil, err
	}
	return db.LoadSchedule(ctx, in.ID)
}

func (s *service) scheduleList(ctx context.Context, p Principal, in scheduleListParams) (*listResult[*model.Schedule], error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "schedule.list")
	if err != nil {
		return nil, err
	}
	ids, err := db.ScheduleIDs(ctx)
	if err != nil {
		return nil, err
	}
	out := &listResult[*model.Schedule]{Items: []*model.Schedule{}}
	for _, id := range ids {
		sc, err := db.LoadSchedule(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound): // deleted since the list was read
		case err != nil:
			return nil, err
		default:
			out.Items = append(out.Items, sc)
		}
	}
	return out, nil
}

func (s *service) schedulePause(ctx context.Context, p Principal, in scheduleRefParams) (*model.Schedule, error) {
	_, db, err := s.scheduleDB(ctx, p, in.ContextID, in.ID, RoleExecutor, "schedule.pause")
	if err != nil {
		return nil, err
	}
	if err := db.PauseSchedule(ctx, in.ID, in.Note); err != nil {
		return nil, err
	}
	return db.LoadSchedule(ctx, in.ID)
}

func (s *service) scheduleResume(ctx context.Context, p Principal, in scheduleRefParams) (*model.Schedule, error) {
	_, db, err := s.scheduleDB(ctx, p, in.ContextID, in.ID, RoleExecutor, "schedule.resume")
	if err != nil {
		return nil, err
	}
	sc, err := db.LoadSchedule(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	tk, err := sc.Spec.Parse()
	if err != nil {
		return nil, err
	}
	next := tk.Next(time.Now())
	if err := db.ResumeSchedule(ctx, in.ID, in.Note, next, tk.Fire(sc.ID, next)); err != nil {
		return nil, err
	}
	return db.LoadSchedule(ctx, in.ID)
}

func (s *service) scheduleDelete(ctx context.Context, p Principal, in scheduleRefParams) (*deleteResult, error) {
	_, db, err := s.scheduleDB(ctx, p, in.ContextID, in.ID, RoleAdmin, "schedule.delete")
	if err != nil {
		return nil, err
	}
	if err := db.DeleteSchedule(ctx, in.ID); err != nil {
		return nil, err
	}
	return &deleteResult{Deleted: true}, nil
}

// scheduleTrigger makes a run now, whatever the spec and the pause (its tick: now).
func (s *service) scheduleTrigger(ctx context.Context, p Principal, in scheduleRefParams) (*scheduleRunResult, error) {
	_, db, err := s.scheduleDB(ctx, p, in.ContextID, in.ID, RoleExecutor, "schedule.trigger")
	if err != nil {
		return nil, err
	}
	sc, err := db.LoadSchedule(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	now := []time.Time{time.Now()}
	if sc.Flow != nil {
		res, err := s.scheduleFlowRuns(ctx, sc, now)
		if err != nil {
			return nil, err
		}
		return &res[0], nil
	}
	res, err := s.scheduleRuns(ctx, sc, now)
	if err != nil {
		return nil, err
	}
	return &scheduleRunResult{Job: res[0].Job, Existing: res[0].Existing}, nil
}

// scheduleBackfill makes the runs of the ticks from FROM (included) to TO (excluded),
// at most maxBackfill; a tick whose run exists (the schedule made it, or a backfill
// did, within store.RunUniqueTTL) is not made again.
func (s *service) scheduleBackfill(ctx context.Context, p Principal, in backfillParams) (*backfillResult, error) {
	_, db, err := s.scheduleDB(ctx, p, in.ContextID, in.ID, RoleAdmin, "schedule.backfill")
	if err != nil {
		return nil, err
	}
	from, err1 := time.Parse(time.RFC3339Nano, in.From)
	to, err2 := time.Parse(time.RFC3339Nano, in.To)
	if err1 != nil || err2 != nil || !to.After(from) {
		return nil, invalidParams("from", "from %q and to %q must be RFC 3339 times, from before to", in.From, in.To)
	}
	sc, err := db.LoadSchedule(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	tk, err := sc.Spec.Parse()
	if err != nil {
		return nil, err
	}
	var ticks []time.Time
	for t := tk.Next(from.Add(-time.Millisecond)); !t.IsZero() && t.Before(to); t = tk.Next(t) {
		if len(ticks) == maxBackfill {
			return nil, invalidParams("to", "from %s to %s holds more than %d ticks; backfill a shorter span", in.From, in.To, maxBackfill)
		}
		ticks = append(ticks, t)
	}
	out := &backfillResult{}
	count := func(existing bool) {
		if existing {
			out.Existing++
		} else {
			out.Runs++
		}
	}
	for len(ticks) > 0 {
		n := min(len(ticks), maxSubmitBatch)
		if sc.Flow != nil {
			res, err := s.scheduleFlowRuns(ctx, sc, ticks[:n])
			if err != nil {
				return nil, err
			}
			for _, r := range res {
				count(r.Existing)
			}
		} else {
			res, err := s.scheduleRuns(ctx, sc, ticks[:n])
			if err != nil {
				return nil, err
			}
			for _, r := range res {
				count(r.Existing)
			}
		}
		ticks = ticks[n:]
	}
	return out, nil
}

// scheduleRuns submits the runs of ticks of a schedule in one step, with their
// (schedule, tick) unique keys.
func (s *service) scheduleRuns(ctx context.Context, sc *model.Schedule, ticks []time.Time) ([]store.Submitted, error) {
	subs := make([]store.Submission, len(ticks))
	for i, t := range ticks {
		var j model.Job
		if err := json.Unmarshal(sc.Job, &j); err != nil {
			return nil, fmt.Errorf("schedule %s: its job does not decode: %w", sc.ID, err)
		}
		j.ID, j.CallerID, j.ScheduleID, j.ScheduleTickMs = 0, sc.CallerID, sc.ID, t.UnixMilli()
		subs[i] = store.Submission{Job: &j, UniqueKey: store.RunUniqueKey(sc.ContextID, sc.ID, t), UniqueTTL: store.RunUniqueTTL, Actor: "schedule:" + sc.ID}
	}
	res, err := s.store.SubmitJobs(ctx, sc.ContextID, subs, "")
	if err == nil {
		s.countSubmitted(res)
	}
	return res, err
}
