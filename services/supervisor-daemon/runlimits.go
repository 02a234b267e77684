package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/model"
)

// Run and rate limits of a context (docs/scheduling.md): limit.set, limit.list,
// limit.delete. The claim enforces them (lib/store, lua/lib_limit.lua); a change holds
// from the next claim, on every runner.

type limitSetParams struct {
	ContextID  uint32 `json:"context_id"`
	Scope      string `json:"scope"`
	MaxRunning uint32 `json:"max_running,omitempty"`
	Rate       uint32 `json:"rate,omitempty"`
	Per        string `json:"per,omitempty"`
	Burst      uint32 `json:"burst,omitempty"`
}

type limitRefParams struct {
	ContextID uint32 `json:"context_id"`
	Scope     string `json:"scope"`
}

type limitListParams struct {
	ContextID uint32 `json:"context_id"`
}

func (s *service) limitSet(ctx context.Context, p Principal, in limitSetParams) (*model.RunLimit, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "limit.set")
	if err != nil {
		return nil, err
	}
	l := &model.RunLimit{Scope: in.Scope, MaxRunning: in.MaxRunning, Rate: in.Rate, Per: in.Per, Burst: in.Burst}
	if err := db.SetLimit(ctx, l); err != nil {
		return nil, err
	}
	if s.metrics != nil {
		s.metrics.limitChanges.WithLabelValues("set").Inc()
	}
	return l, nil
}

func (s *service) limitList(ctx context.Context, p Principal, in limitListParams) (*listResult[*model.RunLimit], error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "limit.list")
	if err != nil {
		return nil, err
	}
	ls, err := db.Limits(ctx)
	if err != nil {
		return nil, err
	}
	return &listResult[*model.RunLimit]{Items: ls}, nil
}

func (s *service) limitDelete(ctx context.Context, p Principal, in limitRefParams) (*deleteResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "limit.delete")
	if err != nil {
		return nil, err
	}
	ok, err := db.DeleteLimit(ctx, in.Scope)
	if err != nil {
		return nil, err
	}
	if ok && s.metrics != nil {
		s.metrics.limitChanges.WithLabelValues("delete").Inc()
	}
	return &deleteResult{Deleted: ok}, nil
}
