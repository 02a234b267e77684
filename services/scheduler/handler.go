package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// handler serves hero.v1.Scheduler.
type handler struct {
	herov1.UnimplementedSchedulerServer
	eng *engine
}

func (h *handler) StartFlow(ctx context.Context, req *herov1.SchedulerStartFlowRequest) (*herov1.SchedulerStartFlowResponse, error) {
	var runAt time.Time
	if req.RunAtMs > 0 {
		runAt = time.UnixMilli(req.RunAtMs)
	}
	f, err := h.eng.startFlow(ctx, req.ContextId, req.FlowId, req.Actor, runAt)
	if err != nil {
		return nil, toStatus(err)
	}
	return &herov1.SchedulerStartFlowResponse{Flow: protoconv.FlowToPB(f)}, nil
}

func (h *handler) JobDone(ctx context.Context, req *herov1.JobDoneRequest) (*herov1.JobDoneResponse, error) {
	end, err := jobEnd(req)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	if err := h.eng.jobDone(ctx, req.ContextId, end); err != nil {
		return nil, toStatus(err)
	}
	return &herov1.JobDoneResponse{}, nil
}

// jobEnd reads one reported end; only finished and error end a job.
func jobEnd(r *herov1.JobDoneRequest) (store.JobEnd, error) {
	st := model.JobStatus(r.Status)
	if st != model.JobFinished && st != model.JobError {
		return store.JobEnd{}, fmt.Errorf("status %q: want finished or error", r.Status)
	}
	return store.JobEnd{FlowID: r.FlowId, CallerID: r.CallerId, JobID: r.JobId, Attempt: r.Attempt, Status: st, Error: r.Error, Fatal: r.Fatal}, nil
}

func (h *handler) JobsDone(ctx context.Context, req *herov1.JobsDoneRequest) (*herov1.JobsDoneResponse, error) {
	if len(req.Ends) == 0 {
		return &herov1.JobsDoneResponse{}, nil
	}
	byCtx := map[uint32][]store.JobEnd{}
	var order []uint32
	for i, r := range req.Ends {
		end, err := jobEnd(r)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "ends[%d].%v", i, err)
		}
		if _, seen := byCtx[r.ContextId]; !seen {
			order = append(order, r.ContextId)
		}
		byCtx[r.ContextId] = append(byCtx[r.ContextId], end)
	}
	var first error
	for _, c := range order {
		if err := h.eng.jobsDone(ctx, c, byCtx[c]); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, toStatus(first)
	}
	return &herov1.JobsDoneResponse{}, nil
}

func (h *handler) DispatchJob(ctx context.Context, req *herov1.DispatchJobRequest) (*herov1.DispatchJobResponse, error) {
	j, err := h.eng.dispatchStandalone(ctx, req.ContextId, req.CallerId, req.JobId, req.Actor)
	if err != nil {
		return nil, toStatus(err)
	}
	return &herov1.DispatchJobResponse{Job: protoconv.JobToPB(j)}, nil
}

// toStatus maps the engine's errors onto gRPC codes that the supervisor passes on.
func toStatus(err error) error {
	var pe *store.PlanError
	var ve *model.ValidationError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.As(err, &pe), errors.As(err, &ve):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, errAlreadyEnded), errors.Is(err, store.ErrConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	case fault.Transient(err):
		return status.Error(codes.Unavailable, err.Error()) // Redis away: try again
	}
	return status.Error(codes.Internal, err.Error())
}

func (h *handler) CancelFlow(ctx context.Context, req *herov1.SchedulerCancelFlowRequest) (*herov1.SchedulerCancelFlowResponse, error) {
	f, stopping, err := h.eng.cancelFlow(ctx, req.ContextId, req.FlowId, req.Actor)
	if err != nil {
		return nil, toStatus(err)
	}
	return &herov1.SchedulerCancelFlowResponse{Flow: protoconv.FlowToPB(f), Stopping: stopping}, nil
}

func (h *handler) RetryFlow(ctx context.Context, req *herov1.SchedulerRetryFlowRequest) (*herov1.SchedulerRetryFlowResponse, error) {
	f, rerun, err := h.eng.retryFlow(ctx, req.ContextId, req.FlowId, req.Actor)
	if err != nil {
		return nil, toStatus(err)
	}
	return &herov1.SchedulerRetryFlowResponse{Flow: protoconv.FlowToPB(f), Rerun: rerun}, nil
}
