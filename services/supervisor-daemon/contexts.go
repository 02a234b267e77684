package main

import (
	"context"
	"errors"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Contexts: context.create, context.load, context.update, context.delete and their
// gRPC methods.

type contextIn struct {
	ID               uint32           `json:"id"`
	Admins           []uint32         `json:"admins"`
	Readers          []uint32         `json:"readers"`
	Executors        []uint32         `json:"executors"`
	RetentionSeconds int64            `json:"retention_seconds"`
	AllowedSources   []string         `json:"allowed_sources"`
	JobDefaults      *model.JobLimits `json:"job_defaults"`
	JobMax           *model.JobLimits `json:"job_max"`
}

type contextCreateParams struct {
	Context *contextIn `json:"context"`
}

type contextUpdateParams struct {
	ID               uint32    `json:"id"`
	Admins           *[]uint32 `json:"admins"`
	Readers          *[]uint32 `json:"readers"`
	Executors        *[]uint32 `json:"executors"`
	RetentionSeconds *int64    `json:"retention_seconds"`
	AllowedSources   *[]string `json:"allowed_sources"`
	// Set: replaces them ({} clears them). job_max is the operators'.
	JobDefaults *model.JobLimits `json:"job_defaults"`
	JobMax      *model.JobLimits `json:"job_max"`
	// The claim order (docs/scheduling.md): priority_age_ms its admins', weight the operators'.
	PriorityAgeMs *int64  `json:"priority_age_ms"`
	Weight        *uint32 `json:"weight"`
}

type deleteContextParams struct {
	ID    uint32 `json:"id"`
	Force bool   `json:"force"`
}

func (s *service) contextCreate(ctx context.Context, p Principal, in contextCreateParams) (*model.Context, error) {
	if err := requireOperator(p, "context.create"); err != nil {
		return nil, err
	}
	if in.Context == nil {
		return nil, invalidParams("context", "context is required")
	}
	c := &model.Context{ID: in.Context.ID, Admins: in.Context.Admins, Readers: in.Context.Readers, Executors: in.Context.Executors,
		RetentionSeconds: in.Context.RetentionSeconds, AllowedSources: in.Context.AllowedSources,
		JobDefaults: nilIfZero(in.Context.JobDefaults), JobMax: nilIfZero(in.Context.JobMax)}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := s.checkActors(ctx, "context", c); err != nil {
		return nil, err
	}
	out, _, err := s.store.CreateContext(ctx, c, p.Name())
	return out, err
}

// checkActors refuses a context whose lists name an actor that does not exist.
func (s *service) checkActors(ctx context.Context, param string, c *model.Context) error {
	for _, l := range [][]uint32{c.Admins, c.Readers, c.Executors} {
		for _, id := range l {
			if _, err := s.store.LoadActor(ctx, id); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return invalidParams(param, "actor %d does not exist; create it first", id)
				}
				return err
			}
		}
	}
	return nil
}

// contextUpdate changes a context's lists, retention or allowed sources (operators and
// the context's admins).
func (s *service) contextUpdate(ctx context.Context, p Principal, in contextUpdateParams) (*model.Context, error) {
	c, _, err := s.authorize(ctx, p, in.ID, RoleAdmin, "context.update")
	if err != nil {
		return nil, err
	}
	// the fields the call names, and only those, are written (the others as read
	// here may have changed since: an operator's change of the admins or job_max)
	var fields []string
	if in.Admins != nil {
		c.Admins, fields = *in.Admins, append(fields, "admins")
	}
	if in.Readers != nil {
		c.Readers, fields = *in.Readers, append(fields, "readers")
	}
	if in.Executors != nil {
		c.Executors, fields = *in.Executors, append(fields, "executors")
	}
	if in.RetentionSeconds != nil {
		c.RetentionSeconds, fields = *in.RetentionSeconds, append(fields, "retention_seconds")
	}
	if in.AllowedSources != nil {
		c.AllowedSources, fields = *in.AllowedSources, append(fields, "allowed_sources")
	}
	if in.JobMax != nil {
		// A context's admins are its tenant: the most its jobs may take is not theirs to set.
		if err := requireOperator(p, "context.update of job_max"); err != nil {
			return nil, err
		}
		c.JobMax, fields = nilIfZero(in.JobMax), append(fields, "job_max")
	}
	if in.JobDefaults != nil {
		c.JobDefaults, fields = nilIfZero(in.JobDefaults), append(fields, "job_defaults")
	}
	if in.PriorityAgeMs != nil {
		c.PriorityAgeMs, fields = *in.PriorityAgeMs, append(fields, "priority_age_ms")
	}
	if in.Weight != nil {
		// A context's share of the runners it shares with other tenants is not its own to set.
		if err := requireOperator(p, "context.update of weight"); err != nil {
			return nil, err
		}
		c.Weight, fields = *in.Weight, append(fields, "weight")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := s.checkActors(ctx, "id", c); err != nil {
		return nil, err
	}
	return s.store.UpdateContext(ctx, c, fields, p.Name())
}

func (s *service) contextLoad(ctx context.Context, p Principal, in idParams) (*model.Context, error) {
	c, _, err := s.authorize(ctx, p, in.ID, RoleReader, "context.load")
	return c, err
}

func (s *service) contextDelete(ctx context.Context, p Principal, in deleteContextParams) (*deleteResult, error) {
	if _, _, err := s.authorize(ctx, p, in.ID, RoleAdmin, "context.delete"); err != nil {
		return nil, err
	}
	if err := s.store.DeleteContext(ctx, in.ID, in.Force); err != nil {
		return nil, err
	}
	s.log.Info().Uint32("context_id", in.ID).Str("actor", p.Name()).Bool("force", in.Force).Msg("context deleted")
	return &deleteResult{Deleted: true}, nil
}

func (c *coordinatorServer) CreateContext(ctx context.Context, r *herov1.CreateContextRequest) (*herov1.CreateContextResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateContextResponse, error) {
		var in contextCreateParams
		if r.Context != nil {
			in.Context = &contextIn{ID: r.Context.Id, Admins: r.Context.Admins, Readers: r.Context.Readers, Executors: r.Context.Executors, RetentionSeconds: r.Context.RetentionSeconds, AllowedSources: r.Context.AllowedSources,
				JobDefaults: protoconv.LimitsFromPB(r.Context.JobDefaults), JobMax: protoconv.LimitsFromPB(r.Context.JobMax)}
		}
		x, err := c.s.contextCreate(ctx, p, in)
		return &herov1.CreateContextResponse{Context: protoconv.ContextToPB(x)}, err
	})
}

func (c *coordinatorServer) GetContext(ctx context.Context, r *herov1.GetContextRequest) (*herov1.GetContextResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetContextResponse, error) {
		x, err := c.s.contextLoad(ctx, p, idParams{ID: r.Id})
		return &herov1.GetContextResponse{Context: protoconv.ContextToPB(x)}, err
	})
}

func (c *coordinatorServer) UpdateContext(ctx context.Context, r *herov1.UpdateContextRequest) (*herov1.UpdateContextResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.UpdateContextResponse, error) {
		in := contextUpdateParams{ID: r.Id, RetentionSeconds: r.RetentionSeconds, PriorityAgeMs: r.PriorityAgeMs, Weight: r.Weight}
		ids := func(l *herov1.IdList) *[]uint32 {
			if l == nil {
				return nil
			}
			v := append([]uint32{}, l.Ids...)
			return &v
		}
		in.Admins, in.Readers, in.Executors = ids(r.Admins), ids(r.Readers), ids(r.Executors)
		if r.AllowedSources != nil {
			v := append([]string{}, r.AllowedSources.Values...)
			in.AllowedSources = &v
		}
		// A set message replaces (an empty one clears).
		for _, l := range []struct {
			pb  *herov1.JobLimits
			dst **model.JobLimits
		}{{r.JobDefaults, &in.JobDefaults}, {r.JobMax, &in.JobMax}} {
			if l.pb != nil {
				v := protoconv.LimitsFromPB(l.pb)
				if v == nil {
					v = &model.JobLimits{}
				}
				*l.dst = v
			}
		}
		x, err := c.s.contextUpdate(ctx, p, in)
		return &herov1.UpdateContextResponse{Context: protoconv.ContextToPB(x)}, err
	})
}

func (c *coordinatorServer) DeleteContext(ctx context.Context, r *herov1.DeleteContextRequest) (*herov1.DeleteResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DeleteResponse, error) {
		_, err := c.s.contextDelete(ctx, p, deleteContextParams{ID: r.Id, Force: r.Force})
		return &herov1.DeleteResponse{Deleted: err == nil}, err
	})
}
