package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/model"
)

// flowPauseParams: flow.pause's and flow.resume's.
type flowPauseParams struct {
	ContextID uint32 `json:"context_id"`
	ID        uint32 `json:"id"`
	Note      string `json:"note,omitempty"`
}

// flowPause pauses a started flow: none of its jobs is dispatched until flow.resume;
// its running jobs go on (docs/scheduling.md).
func (s *service) flowPause(ctx context.Context, p Principal, in flowPauseParams) (*model.Flow, error) {
	return s.flowPauseOp(ctx, p, in, "pause", "flow.pause")
}

// flowResume resumes a paused flow: the scheduler dispatches its ready jobs.
func (s *service) flowResume(ctx context.Context, p Principal, in flowPauseParams) (*model.Flow, error) {
	return s.flowPauseOp(ctx, p, in, "resume", "flow.resume")
}

func (s *service) flowPauseOp(ctx context.Context, p Principal, in flowPauseParams, op, method string) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, method)
	if err != nil {
		return nil, err
	}
	if in.ID == 0 {
		return nil, invalidParams("id", "id is required")
	}
	if _, err := db.PauseFlow(ctx, in.ID, op, p.Name(), in.Note); err != nil {
		return nil, err
	}
	return db.LoadFlow(ctx, in.ID)
}
