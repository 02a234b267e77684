package main

import (
	"context"
	"fmt"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Runners: runner.create, runner.load, runner.list, runner.delete and their gRPC
// methods.

type runnerIn struct {
	ID          uint32   `json:"id"`
	Pubkey      string   `json:"pubkey"`
	Address     string   `json:"address"`
	Topic       string   `json:"topic"`
	Local       *bool    `json:"local"`
	Secret      string   `json:"secret"`
	ScriptTypes []string `json:"script_types"`
	Executors   []string `json:"executors"`
}

type runnerCreateParams struct {
	ContextID uint32    `json:"context_id"`
	Runner    *runnerIn `json:"runner"`
}

func (s *service) runnerCreate(ctx context.Context, p Principal, in runnerCreateParams) (*model.Runner, error) {
	if in.Runner == nil {
		return nil, invalidParams("runner", "runner is required")
	}
	if _, _, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "runner.create"); err != nil {
		return nil, err
	}
	r := &model.Runner{ID: in.Runner.ID, Pubkey: in.Runner.Pubkey, Address: in.Runner.Address, Topic: in.Runner.Topic, Local: true, Secret: in.Runner.Secret,
		Executors: in.Runner.Executors}
	if in.Runner.Local != nil {
		r.Local = *in.Runner.Local
	}
	for _, t := range in.Runner.ScriptTypes {
		st, err := model.ParseScriptType(t)
		if err != nil {
			return nil, invalidParams("runner.script_types", "runner.script_types: %v", err)
		}
		r.ScriptTypes = append(r.ScriptTypes, st)
	}
	out, _, err := s.store.CreateRunner(ctx, in.ContextID, r, p.Name())
	return out, err
}

func (s *service) runnerLoad(ctx context.Context, p Principal, in ctxIDParams) (*model.Runner, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "runner.load")
	if err != nil {
		return nil, err
	}
	return db.LoadRunner(ctx, in.ID)
}

func (s *service) runnerList(ctx context.Context, p Principal, in listParams) (*listResult[*model.Runner], error) {
	return listPage(ctx, s, p, in, "runner.list", allOf(keys.RunnerIndex), loadRunners)
}

// loadRunners loads the runners of a page (members: their ids).
func loadRunners(db *store.DB, ctx context.Context, members []string) ([]*model.Runner, error) {
	out := []*model.Runner{}
	for _, m := range members {
		var id uint32
		if _, err := fmt.Sscanf(m, "%d", &id); err != nil {
			continue
		}
		if r, err := db.LoadRunner(ctx, id); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *service) runnerDelete(ctx context.Context, p Principal, in deleteParams) (*deleteResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "runner.delete")
	if err != nil {
		return nil, err
	}
	if err := db.DeleteRunner(ctx, in.ID, in.Force, p.Name()); err != nil {
		return nil, err
	}
	return &deleteResult{Deleted: true}, nil
}

func (c *coordinatorServer) CreateRunner(ctx context.Context, r *herov1.CreateRunnerRequest) (*herov1.CreateRunnerResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateRunnerResponse, error) {
		in := runnerCreateParams{ContextID: r.ContextId}
		if r.Runner != nil {
			local := r.Runner.Local
			in.Runner = &runnerIn{ID: r.Runner.Id, Pubkey: r.Runner.Pubkey, Address: r.Runner.Address, Topic: r.Runner.Topic, Local: &local,
				Secret: r.Runner.Secret, ScriptTypes: r.Runner.ScriptTypes, Executors: r.Runner.Executors}
		}
		x, err := c.s.runnerCreate(ctx, p, in)
		return &herov1.CreateRunnerResponse{Runner: protoconv.RunnerToPB(x)}, err
	})
}

func (c *coordinatorServer) GetRunner(ctx context.Context, r *herov1.GetRunnerRequest) (*herov1.GetRunnerResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetRunnerResponse, error) {
		x, err := c.s.runnerLoad(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		return &herov1.GetRunnerResponse{Runner: protoconv.RunnerToPB(x)}, err
	})
}

func (c *coordinatorServer) ListRunners(ctx context.Context, r *herov1.ListRunnersRequest) (*herov1.ListRunnersResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListRunnersResponse, error) {
		x, err := c.s.runnerList(ctx, p, listParams{ContextID: r.ContextId, Limit: int(r.Limit), Cursor: r.Cursor})
		if err != nil {
			return nil, err
		}
		return &herov1.ListRunnersResponse{Runners: pbItems(x.Items, protoconv.RunnerToPB), NextCursor: x.NextCursor}, nil
	})
}

func (c *coordinatorServer) DeleteRunner(ctx context.Context, r *herov1.DeleteRunnerRequest) (*herov1.DeleteResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DeleteResponse, error) {
		_, err := c.s.runnerDelete(ctx, p, deleteParams{ContextID: r.ContextId, ID: r.Id, Force: r.Force})
		return &herov1.DeleteResponse{Deleted: err == nil}, err
	})
}
