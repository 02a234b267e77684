package main

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/mycelium"
	"github.com/hero-coordinator/hero/lib/remote"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// handler serves hero.v1.Gateway.
type handler struct {
	herov1.UnimplementedGatewayServer
	g *gateway
}

// Send pushes an envelope to another node. Unavailable while the Mycelium node is not
// reachable: the router keeps the message and tries again. InvalidArgument when the
// node can never take it (too large for its 2 MiB request limit, or refused with 400,
// 413, 415 or 422): the router does not retry that.
func (h *handler) Send(ctx context.Context, req *herov1.GatewaySendRequest) (*herov1.GatewaySendResponse, error) {
	dst := mycelium.Destination{PK: req.DestinationPk, IP: req.DestinationIp}
	if dst.PK != "" {
		dst.IP = "" // seed 003: the public key when set, else the address
	}
	if err := dst.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "destination: %v", err)
	}
	if len(req.Envelope) > remote.MaxPayload {
		h.g.m.messages.WithLabelValues("out", "unknown", "too_large").Inc()
		return nil, status.Errorf(codes.InvalidArgument, "envelope of %d bytes is larger than a Mycelium node accepts in one message (%d bytes; its request body limit is %d bytes)",
			len(req.Envelope), remote.MaxPayload, mycelium.MaxRequestBody)
	}
	env, err := remote.Decode(req.Envelope)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "envelope: %v", err)
	}
	topic := req.Topic
	switch env.Kind {
	case remote.KindAck:
		topic = remote.TopicAck
	case remote.KindJobResult:
		topic = remote.TopicResult
	case remote.KindJobRequest:
		if topic == "" {
			return nil, status.Error(codes.InvalidArgument, "a job request needs the runner's topic")
		}
	}
	if limit := mycelium.MaxPayloadLen(dst, []byte(topic)); len(req.Envelope) > limit {
		h.g.m.messages.WithLabelValues("out", env.Kind, "too_large").Inc()
		return nil, status.Errorf(codes.InvalidArgument, "envelope of %d bytes is larger than a Mycelium node accepts in one message (%d bytes; its request body limit is %d bytes)",
			len(req.Envelope), limit, mycelium.MaxRequestBody)
	}
	id, err := h.g.send(ctx, dst, topic, req.Envelope, env.Kind)
	if mycelium.Permanent(err) {
		// Sending it again cannot change the node's answer: the caller must not retry.
		return nil, status.Errorf(codes.InvalidArgument, "the Mycelium node refuses the message to %s: %v", dst, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "push to %s: %v", dst, err)
	}
	return &herov1.GatewaySendResponse{TransportId: id}, nil
}
