package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Messages: message.create, message.load and their gRPC methods.

type messageCreateParams struct {
	ContextID uint32         `json:"context_id"`
	Message   *model.Message `json:"message"`
}

func (s *service) messageCreate(ctx context.Context, p Principal, in messageCreateParams) (*model.Message, error) {
	if in.Message == nil {
		return nil, invalidParams("message", "message is required")
	}
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "message.create")
	if err != nil {
		return nil, err
	}
	m := in.Message
	if m.ContextID != 0 && m.ContextID != in.ContextID {
		return nil, invalidParams("message.context_id", "message.context_id %d is not the request's context_id %d", m.ContextID, in.ContextID)
	}
	m.ContextID = in.ContextID
	if m.CallerID, err = callerFor(p, m.CallerID, "message"); err != nil {
		return nil, err
	}
	m.Status, m.Kind, m.Error, m.Logs, m.TransportID = "", "", "", nil, ""
	out, _, err := db.CreateMessage(ctx, m, p.Name())
	return out, err
}

func (s *service) messageLoad(ctx context.Context, p Principal, in jobRefParams) (*model.Message, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "message.load")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	return db.LoadMessage(ctx, in.CallerID, in.ID)
}

func (c *coordinatorServer) CreateMessage(ctx context.Context, r *herov1.CreateMessageRequest) (*herov1.CreateMessageResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateMessageResponse, error) {
		in := messageCreateParams{ContextID: r.ContextId}
		if r.Message != nil {
			in.Message = protoconv.MessageFromPB(r.Message)
		}
		x, err := c.s.messageCreate(ctx, p, in)
		return &herov1.CreateMessageResponse{Message: protoconv.MessageToPB(x)}, err
	})
}

func (c *coordinatorServer) GetMessage(ctx context.Context, r *herov1.GetMessageRequest) (*herov1.GetMessageResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetMessageResponse, error) {
		x, err := c.s.messageLoad(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		return &herov1.GetMessageResponse{Message: protoconv.MessageToPB(x)}, err
	})
}
