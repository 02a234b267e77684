package main

import (
	"context"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// A flow created as a unit: flow.begin, job.create_batch with flow_id, flow.create of
// the begun id (or flow.abort) and their gRPC methods (BeginFlow, CreateJobs with
// flow_id, CreateFlow, AbortFlow). lib/store/stage.go keeps the stage.

// Bounds of a flow creation's ttl_seconds: how long it lives without a renewal (each
// job.create_batch under it renews it).
const (
	defaultStageTTL = 60 * time.Second
	minStageTTL     = 5 * time.Second
	maxStageTTL     = time.Hour
)

type flowBeginParams struct {
	ContextID  uint32 `json:"context_id"`
	Jobs       uint32 `json:"jobs"`
	CallerID   uint32 `json:"caller_id"`
	TTLSeconds uint32 `json:"ttl_seconds"`
}

// flowBeginResult is a begun flow: its id and the ids of its jobs (first_job_id to
// last_job_id, of its caller), the expiry and the server's limits.
type flowBeginResult struct {
	FlowID      uint32 `json:"flow_id"`
	CallerID    uint32 `json:"caller_id"`
	FirstJobID  uint32 `json:"first_job_id"`
	LastJobID   uint32 `json:"last_job_id"`
	ExpiresAtMs int64  `json:"expires_at_ms"`
	TTLSeconds  uint32 `json:"ttl_seconds"`
	MaxJobs     uint32 `json:"max_jobs"`
}

type flowAbortResult struct {
	Deleted int `json:"deleted"`
}

// flowBegin checks a flow's size against --max-flow-jobs before anything is stored,
// then reserves the flow's id and its jobs' ids (store.BeginFlow).
func (s *service) flowBegin(ctx context.Context, p Principal, in flowBeginParams) (*flowBeginResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "flow.begin")
	if err != nil {
		return nil, err
	}
	if in.Jobs == 0 {
		return nil, invalidParams("jobs", "jobs (the number of the flow's jobs) is required, 1 to %d", s.maxFlowJobs)
	}
	if int(in.Jobs) > s.maxFlowJobs {
		return nil, invalidParams("jobs", "a flow of %d jobs is more than this server's limit of %d (--max-flow-jobs)", in.Jobs, s.maxFlowJobs)
	}
	ttl := defaultStageTTL
	if in.TTLSeconds != 0 {
		ttl = time.Duration(in.TTLSeconds) * time.Second
		if ttl < minStageTTL || ttl > maxStageTTL {
			return nil, invalidParams("ttl_seconds", "ttl_seconds must be %d to %d, got %d", int(minStageTTL.Seconds()), int(maxStageTTL.Seconds()), in.TTLSeconds)
		}
	}
	caller, err := callerFor(p, in.CallerID, "flow")
	if err != nil {
		return nil, err
	}
	st, err := db.BeginFlow(ctx, caller, int(in.Jobs), ttl)
	if err != nil {
		return nil, err
	}
	return &flowBeginResult{FlowID: st.FlowID, CallerID: caller, FirstJobID: st.FirstJob, LastJobID: st.LastJob, ExpiresAtMs: st.ExpiresAtMs,
		TTLSeconds: uint32(ttl / time.Second), MaxJobs: uint32(s.maxFlowJobs)}, nil
}

// flowAbort deletes an unfinished flow creation's jobs now (a chunk a Redis call); a
// creation that is gone, or whose flow was stored, deletes nothing.
func (s *service) flowAbort(ctx context.Context, p Principal, in ctxIDParams) (*flowAbortResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "flow.abort")
	if err != nil {
		return nil, err
	}
	if in.ID == 0 {
		return nil, invalidParams("id", "id is required")
	}
	n, err := db.SweepFlowStageAll(ctx, in.ID, true)
	if err != nil {
		return nil, err
	}
	return &flowAbortResult{Deleted: n}, nil
}

// createStagedJobs is job.create_batch with flow_id: each job checked as job.create
// checks it, then those that pass are created under the begun flow (its id as their
// flow_id, their ids among the flow's). A flow that was not begun, or whose creation
// expired, fails the call.
func (s *service) createStagedJobs(ctx context.Context, p Principal, in jobCreateManyParams, reqs []jobCreateParams, out []batchAnswer, cc *createChecks) error {
	tp := traceparentOf(ctx)
	var jobs []*model.Job
	var at []int
	for i, r := range reqs {
		j, err := s.checkJobCreate(ctx, p, r, cc)
		if err != nil {
			out[i].err = err
			continue
		}
		if tp != "" {
			j.Traceparent = tp
		}
		jobs, at = append(jobs, j), append(at, i)
	}
	if len(jobs) == 0 {
		return nil
	}
	res, err := s.store.CreateStagedJobs(ctx, in.ContextID, in.FlowID, jobs[0].CallerID, jobs, p.Name())
	if err != nil {
		return err
	}
	for k, r := range res {
		out[at[k]] = batchAnswer{result: r.Job, err: r.Err}
	}
	return nil
}

func (c *coordinatorServer) BeginFlow(ctx context.Context, r *herov1.BeginFlowRequest) (*herov1.BeginFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.BeginFlowResponse, error) {
		x, err := c.s.flowBegin(ctx, p, flowBeginParams{ContextID: r.ContextId, Jobs: r.Jobs, CallerID: r.CallerId, TTLSeconds: r.TtlSeconds})
		if err != nil {
			return nil, err
		}
		return &herov1.BeginFlowResponse{FlowId: x.FlowID, FirstJobId: x.FirstJobID, LastJobId: x.LastJobID, ExpiresAtMs: x.ExpiresAtMs, MaxJobs: x.MaxJobs, TtlSeconds: x.TTLSeconds}, nil
	})
}

func (c *coordinatorServer) AbortFlow(ctx context.Context, r *herov1.AbortFlowRequest) (*herov1.AbortFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.AbortFlowResponse, error) {
		x, err := c.s.flowAbort(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		if err != nil {
			return nil, err
		}
		return &herov1.AbortFlowResponse{Deleted: uint32(x.Deleted)}, nil
	})
}
