package main

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// handler serves hero.v1.Router.
type handler struct {
	herov1.UnimplementedRouterServer
	r *router
}

// Deliver takes an inbound message (from the gateway) into its context's msg_in.
func (h *handler) Deliver(ctx context.Context, req *herov1.DeliverRequest) (*herov1.DeliverResponse, error) {
	if req.Message == nil {
		return nil, status.Error(codes.InvalidArgument, "message is required")
	}
	dup, err := h.r.acceptInbound(ctx, req.ContextId, protoconv.MessageFromPB(req.Message), req.Source)
	var na *notAllowedError
	switch {
	case errors.As(err, &na):
		return nil, status.Error(codes.PermissionDenied, err.Error())
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &herov1.DeliverResponse{Duplicate: dup}, nil
}
