package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Flows: flow.create, flow.load, flow.list, flow.start, flow.wait, flow.dag,
// flow.cancel, flow.retry, flow.delete and their gRPC methods.

type flowIn struct {
	ID        uint32            `json:"id"`
	CallerID  uint32            `json:"caller_id"`
	ContextID uint32            `json:"context_id"`
	Jobs      []uint32          `json:"jobs"`
	EnvVars   map[string]string `json:"env_vars"`
}

type flowCreateParams struct {
	ContextID uint32  `json:"context_id"`
	Flow      *flowIn `json:"flow"`
}

type flowWaitParams struct {
	ContextID uint32  `json:"context_id"`
	ID        uint32  `json:"id"`
	Timeout   *uint32 `json:"timeout"` // seconds to wait at most (default 300, at most 3600)
}

type dagNode struct {
	ID         uint32   `json:"id"`
	Depends    []uint32 `json:"depends"`
	Dependents []uint32 `json:"dependents"`
	NodeStatus string   `json:"node_status"`
	JobStatus  string   `json:"job_status"`
	Attempt    uint32   `json:"attempt"`
	Error      string   `json:"error,omitempty"`
	ScriptType string   `json:"script_type"`
	// FunctionName is a handler job's executor#handler.
	FunctionName string `json:"function_name,omitempty"`
	// Held says why its job waits (a concurrency key or a limit it met).
	Held string `json:"held,omitempty"`
}

type dagResult struct {
	Flow  *model.Flow `json:"flow"`
	Nodes []dagNode   `json:"nodes"`
	// NextOffset (a page of a large flow) is where the next page starts; 0: none.
	NextOffset uint32 `json:"next_offset,omitempty"`
	// Counts (a page) are the flow's node counts, as flow.counts gives them.
	Counts *store.FlowCounts `json:"counts,omitempty"`
}

func (s *service) flowCreate(ctx context.Context, p Principal, in flowCreateParams) (*model.Flow, error) {
	if in.Flow == nil {
		return nil, invalidParams("flow", "flow is required")
	}
	if _, _, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "flow.create"); err != nil {
		return nil, err
	}
	if in.Flow.ContextID != 0 && in.Flow.ContextID != in.ContextID {
		return nil, invalidParams("flow.context_id", "flow.context_id %d is not the request's context_id %d", in.Flow.ContextID, in.ContextID)
	}
	if len(in.Flow.Jobs) > s.maxFlowJobs {
		return nil, invalidParams("flow.jobs", "a flow of %d jobs is more than this server's limit of %d (--max-flow-jobs)", len(in.Flow.Jobs), s.maxFlowJobs)
	}
	caller, err := callerFor(p, in.Flow.CallerID, "flow")
	if err != nil {
		return nil, err
	}
	f := &model.Flow{ID: in.Flow.ID, CallerID: caller, ContextID: in.ContextID, Jobs: in.Flow.Jobs, EnvVars: in.Flow.EnvVars}
	out, _, err := s.createFlow(ctx, f, p.Name())
	return out, err
}

func (s *service) flowLoad(ctx context.Context, p Principal, in ctxIDParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "flow.load")
	if err != nil {
		return nil, err
	}
	return db.LoadFlow(ctx, in.ID)
}

// flowWait waits until a flow ends (finished or error) and returns it. A flow that has
// already ended is returned at once. It costs nothing per job: the script that ends
// the flow publishes one notification, which is what a client waiting for a result
// needs (following the event stream costs the server a read of every job's events).
func (s *service) flowWait(ctx context.Context, p Principal, in flowWaitParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "flow.wait")
	if err != nil {
		return nil, err
	}
	if in.ID == 0 {
		return nil, invalidParams("id", "id is required")
	}
	wait := 5 * time.Minute
	if in.Timeout != nil {
		if *in.Timeout == 0 || *in.Timeout > 3600 {
			return nil, invalidParams("timeout", "timeout must be 1 to 3600 seconds, got %d", *in.Timeout)
		}
		wait = time.Duration(*in.Timeout) * time.Second
	}
	k := flowKey(in.ContextID, in.ID)
	done := s.waiter.watch(k) // before the first load: an end in between is not missed
	defer s.waiter.unwatch(k, done)
	f, err := db.LoadFlow(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	safety := time.NewTicker(5 * time.Second) // a missed notification (pub/sub reconnect) costs at most this
	defer safety.Stop()
	for !f.Status.Terminal() {
		select {
		case <-done.C:
		case <-safety.C:
		case <-t.C:
			return nil, &apiError{Code: codeTimeout, Msg: fmt.Sprintf("flow %d did not end within %v (status %s); it goes on: wait again or follow it with flow.load", in.ID, wait, f.Status),
				Data: map[string]any{"context_id": in.ContextID, "id": in.ID, "status": string(f.Status)}}
		case <-ctx.Done():
			return nil, &apiError{Code: codeTimeout, Msg: fmt.Sprintf("request cancelled while waiting for flow %d", in.ID)}
		}
		if f, err = db.LoadFlow(ctx, in.ID); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (s *service) flowList(ctx context.Context, p Principal, in listParams) (*listResult[*model.Flow], error) {
	return listPage(ctx, s, p, in, "flow.list", byStatus(keys.FlowIndex, in.Status, model.ParseFlowStatus), (*store.DB).LoadFlowMembers)
}

// flowStartParams: flow.start's, with run_at or delay to schedule the start.
type flowStartParams struct {
	ContextID uint32 `json:"context_id"`
	ID        uint32 `json:"id"`
	delayParams
}

func (s *service) flowStart(ctx context.Context, p Principal, in flowStartParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, "flow.start")
	if err != nil {
		return nil, err
	}
	runAt, err := in.when("", time.Now())
	if err != nil {
		return nil, err
	}
	var runAtMs int64
	if !runAt.IsZero() {
		runAtMs = runAt.UnixMilli()
	}
	f, err := db.LoadFlow(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if err := traceFlow(ctx, db, f); err != nil {
		return nil, err
	}
	res, err := s.scheduler.StartFlow(ctx, &herov1.SchedulerStartFlowRequest{ContextId: in.ContextID, FlowId: in.ID, Actor: p.Name(), RunAtMs: runAtMs})
	if err != nil {
		return nil, err
	}
	_ = res
	return db.LoadFlow(ctx, in.ID)
}

func (s *service) flowDAG(ctx context.Context, p Principal, in dagParams) (*dagResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "flow.dag")
	if err != nil {
		return nil, err
	}
	if in.Limit != nil && (*in.Limit == 0 || *in.Limit > maxDAGPage) {
		return nil, invalidParams("limit", "limit must be 1 to %d, got %d", maxDAGPage, *in.Limit)
	}
	if in.Limit != nil || in.Offset != 0 {
		// a page: the flow's head, and its job list kept from the first page
		f, err := db.LoadFlowHead(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		if f.Jobs, err = s.jobLists.jobs(ctx, db, f); err != nil {
			return nil, err
		}
		return s.dagPage(ctx, db, f, in)
	}
	f, err := db.LoadFlow(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if len(f.Jobs) > maxDAGPage {
		return s.dagPage(ctx, db, f, in)
	}
	jobs, err := db.LoadJobs(ctx, f.CallerID, f.Jobs)
	if err != nil {
		return nil, err
	}
	out := &dagResult{Flow: f, Nodes: []dagNode{}}
	g, err := db.LoadDAG(ctx, in.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	dependents := map[uint32][]uint32{}
	for _, j := range jobs {
		for _, d := range j.Dependends {
			dependents[d] = append(dependents[d], j.ID)
		}
	}
	for _, j := range jobs {
		n := dagNode{ID: j.ID, Depends: nonNil(j.Dependends), Dependents: nonNil(dependents[j.ID]), NodeStatus: string(model.NodePending),
			JobStatus: string(j.Status), Attempt: j.Attempt, ScriptType: string(j.ScriptType), FunctionName: j.FunctionName, Held: j.Held}
		if g != nil {
			if gn := g.Nodes[j.ID]; gn != nil {
				n.NodeStatus, n.Attempt, n.Error = string(gn.Status), gn.Attempt, gn.Error
			}
		}
		out.Nodes = append(out.Nodes, n)
	}
	return out, nil
}

func nonNil(ids []uint32) []uint32 {
	if ids == nil {
		return []uint32{}
	}
	return ids
}

func (s *service) flowCancel(ctx context.Context, p Principal, in ctxIDParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, "flow.cancel")
	if err != nil {
		return nil, err
	}
	if _, err := db.LoadFlow(ctx, in.ID); err != nil {
		return nil, err
	}
	if _, err := s.scheduler.CancelFlow(ctx, &herov1.SchedulerCancelFlowRequest{ContextId: in.ContextID, FlowId: in.ID, Actor: p.Name()}); err != nil {
		return nil, err
	}
	return db.LoadFlow(ctx, in.ID)
}

func (s *service) flowRetry(ctx context.Context, p Principal, in ctxIDParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, "flow.retry")
	if err != nil {
		return nil, err
	}
	if _, err := db.LoadFlow(ctx, in.ID); err != nil {
		return nil, err
	}
	if _, err := s.scheduler.RetryFlow(ctx, &herov1.SchedulerRetryFlowRequest{ContextId: in.ContextID, FlowId: in.ID, Actor: p.Name()}); err != nil {
		return nil, err
	}
	return db.LoadFlow(ctx, in.ID)
}

func (s *service) flowDelete(ctx context.Context, p Principal, in deleteParams) (*deleteResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "flow.delete")
	if err != nil {
		return nil, err
	}
	if in.Force {
		// A running flow is cancelled first, so its runners stop its jobs.
		if f, err := db.LoadFlow(ctx, in.ID); err == nil && f.Status == model.FlowStarted {
			if _, err := s.scheduler.CancelFlow(ctx, &herov1.SchedulerCancelFlowRequest{ContextId: in.ContextID, FlowId: in.ID, Actor: p.Name()}); err != nil {
				return nil, err
			}
		}
	}
	if err := db.DeleteFlow(ctx, in.ID, in.Force, p.Name()); err != nil {
		return nil, err
	}
	return &deleteResult{Deleted: true}, nil
}

func (c *coordinatorServer) CreateFlow(ctx context.Context, r *herov1.CreateFlowRequest) (*herov1.CreateFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateFlowResponse, error) {
		in := flowCreateParams{ContextID: r.ContextId}
		if r.Flow != nil {
			in.Flow = &flowIn{ID: r.Flow.Id, CallerID: r.Flow.CallerId, ContextID: r.Flow.ContextId, Jobs: r.Flow.Jobs, EnvVars: r.Flow.EnvVars}
		}
		x, err := c.s.flowCreate(ctx, p, in)
		return &herov1.CreateFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) GetFlow(ctx context.Context, r *herov1.GetFlowRequest) (*herov1.GetFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetFlowResponse, error) {
		x, err := c.s.flowLoad(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		return &herov1.GetFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) WaitFlow(ctx context.Context, r *herov1.WaitFlowRequest) (*herov1.WaitFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.WaitFlowResponse, error) {
		in := flowWaitParams{ContextID: r.ContextId, ID: r.Id}
		if r.Timeout > 0 {
			t := r.Timeout
			in.Timeout = &t
		}
		x, err := c.s.flowWait(ctx, p, in)
		return &herov1.WaitFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) ListFlows(ctx context.Context, r *herov1.ListFlowsRequest) (*herov1.ListFlowsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListFlowsResponse, error) {
		x, err := c.s.flowList(ctx, p, listParams{ContextID: r.ContextId, Limit: int(r.Limit), Cursor: r.Cursor, Status: r.Status})
		if err != nil {
			return nil, err
		}
		return &herov1.ListFlowsResponse{Flows: pbItems(x.Items, protoconv.FlowToPB), NextCursor: x.NextCursor}, nil
	})
}

func (c *coordinatorServer) StartFlow(ctx context.Context, r *herov1.StartFlowRequest) (*herov1.StartFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.StartFlowResponse, error) {
		x, err := c.s.flowStart(ctx, p, flowStartParams{ContextID: r.ContextId, ID: r.Id, delayParams: delayParams{RunAt: r.RunAt, Delay: r.Delay}})
		return &herov1.StartFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) GetFlowDag(ctx context.Context, r *herov1.GetFlowDagRequest) (*herov1.GetFlowDagResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetFlowDagResponse, error) {
		in := dagParams{ContextID: r.ContextId, ID: r.Id, Offset: r.Offset}
		if r.Limit != 0 {
			in.Limit = &r.Limit
		}
		x, err := c.s.flowDAG(ctx, p, in)
		if err != nil {
			return nil, err
		}
		out := &herov1.GetFlowDagResponse{Flow: protoconv.FlowToPB(x.Flow), NextOffset: x.NextOffset, Counts: countsToPB(x.Counts)}
		for _, n := range x.Nodes {
			out.Nodes = append(out.Nodes, &herov1.DagNode{Id: n.ID, Depends: n.Depends, Dependents: n.Dependents, NodeStatus: n.NodeStatus,
				JobStatus: n.JobStatus, Attempt: n.Attempt, Error: n.Error, ScriptType: n.ScriptType, FunctionName: n.FunctionName})
		}
		return out, nil
	})
}

func (c *coordinatorServer) CancelFlow(ctx context.Context, r *herov1.CancelFlowRequest) (*herov1.CancelFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CancelFlowResponse, error) {
		x, err := c.s.flowCancel(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		return &herov1.CancelFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) RetryFlow(ctx context.Context, r *herov1.RetryFlowRequest) (*herov1.RetryFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.RetryFlowResponse, error) {
		x, err := c.s.flowRetry(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		return &herov1.RetryFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) DeleteFlow(ctx context.Context, r *herov1.DeleteFlowRequest) (*herov1.DeleteResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DeleteResponse, error) {
		_, err := c.s.flowDelete(ctx, p, deleteParams{ContextID: r.ContextId, ID: r.Id, Force: r.Force})
		return &herov1.DeleteResponse{Deleted: err == nil}, err
	})
}
