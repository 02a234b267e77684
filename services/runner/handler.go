package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// handler serves hero.v1.RunnerControl.
type handler struct {
	herov1.UnimplementedRunnerControlServer
	r *runner
}

// StopJob stops a job this process runs.
func (h *handler) StopJob(_ context.Context, req *herov1.RunnerStopJobRequest) (*herov1.RunnerStopJobResponse, error) {
	reason := req.Reason
	if reason == "" {
		reason = "stopped"
	}
	ok := h.r.stop(model.JobRef{ContextID: req.ContextId, CallerID: req.CallerId, ID: req.JobId}, reason)
	return &herov1.RunnerStopJobResponse{Stopped: ok}, nil
}
