package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Events: events.read and its gRPC method, and the gRPC Watch stream.

type eventsParams struct {
	ContextID uint32 `json:"context_id"`
	After     string `json:"after"`
	Limit     int    `json:"limit"`
	FlowID    uint32 `json:"flow_id"`
}

type eventsResult struct {
	Events []store.Event `json:"events"`
	Next   string        `json:"next"`
}

func (s *service) eventsRead(ctx context.Context, p Principal, in eventsParams) (*eventsResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "events.read")
	if err != nil {
		return nil, err
	}
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return nil, err
	}
	after := in.After
	if after == "$" {
		// Only the position: the newest event id, to follow from there without a gap.
		last, err := db.LastEventID(ctx)
		if err != nil {
			return nil, err
		}
		return &eventsResult{Events: []store.Event{}, Next: last}, nil
	}
	if err := db.CheckEventPosition(ctx, after); err != nil {
		return nil, err
	}
	out := &eventsResult{Events: []store.Event{}, Next: after}
	for len(out.Events) < limit {
		evs, err := db.ReadEvents(ctx, after, int64(limit))
		if err != nil {
			return nil, invalidParams("after", "%v", err)
		}
		for _, e := range evs {
			after = e.ID
			if in.FlowID == 0 || e.FlowID == in.FlowID {
				out.Events = append(out.Events, e)
				if len(out.Events) == limit {
					break
				}
			}
		}
		out.Next = after
		if len(evs) < limit {
			break
		}
	}
	return out, nil
}

func (c *coordinatorServer) ReadEvents(ctx context.Context, r *herov1.ReadEventsRequest) (*herov1.ReadEventsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ReadEventsResponse, error) {
		x, err := c.s.eventsRead(ctx, p, eventsParams{ContextID: r.ContextId, After: r.AfterId, Limit: int(r.Limit), FlowID: r.FlowId})
		if err != nil {
			return nil, err
		}
		out := &herov1.ReadEventsResponse{NextAfterId: x.Next}
		for i := range x.Events {
			out.Events = append(out.Events, eventToPB(&x.Events[i]))
		}
		return out, nil
	})
}

// Watch follows a context's event stream: from after_id ("" = only new events), every
// event exactly once and in order; a client that reconnects resumes from the last id
// it saw. It ends when the caller is no longer a reader of the context (or its
// credentials were revoked) with that refusal, at once: the events are read in a
// goroutine of their own (a blocked read of Redis is not interrupted).
func (c *coordinatorServer) Watch(r *herov1.WatchRequest, stream grpc.ServerStreamingServer[herov1.WatchResponse]) error {
	ctx := stream.Context()
	p := principal(ctx)
	bindStream(ctx, r.ContextId, RoleReader, "watch") // before the authorization reads the context
	_, db, err := c.s.authorize(ctx, p, r.ContextId, RoleReader, "watch")
	if err != nil {
		return grpcError(err)
	}
	after := r.AfterId
	if after == "" {
		if after, err = db.LastEventID(ctx); err != nil {
			return grpcError(err)
		}
	} else if err := db.CheckEventPosition(ctx, after); err != nil {
		return grpcError(err)
	}
	batches := make(chan eventBatch)
	go followEvents(ctx, db, after, batches)
	for {
		var b eventBatch
		select {
		case <-ctx.Done():
			if err := streamRevoked(ctx); err != nil {
				return grpcError(err)
			}
			return nil
		case b = <-batches:
		}
		if b.err != nil {
			return grpcError(b.err)
		}
		for i := range b.events {
			if r.FlowId != 0 && b.events[i].FlowID != r.FlowId {
				continue
			}
			if len(r.TypePrefixes) > 0 && !slices.ContainsFunc(r.TypePrefixes, func(p string) bool { return strings.HasPrefix(b.events[i].Type, p) }) {
				continue
			}
			if err := stream.Send(&herov1.WatchResponse{Event: eventToPB(&b.events[i])}); err != nil {
				return err
			}
		}
	}
}

// eventBatch is what followEvents read: events, or why it stopped.
type eventBatch struct {
	events []store.Event
	err    error
}

// followEvents reads a context's events after `after` into out until ctx ends or a
// read fails (its last batch carries the error).
func followEvents(ctx context.Context, db *store.DB, after string, out chan<- eventBatch) {
	const batch = 500
	reader := db.EventReader()
	defer func() { _ = reader.Close() }()
	send := func(b eventBatch) bool {
		select {
		case out <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		evs, err := reader.Wait(ctx, after, batch, 5*time.Second)
		if err != nil {
			if ctx.Err() == nil {
				send(eventBatch{err: fmt.Errorf("read events: %w", err)})
			}
			return
		}
		if len(evs) == batch {
			// A watcher this far behind may fall off the stream's end: say so rather
			// than skip what was trimmed meanwhile.
			if err := db.CheckEventPosition(ctx, after); err != nil {
				send(eventBatch{err: err})
				return
			}
		}
		if len(evs) == 0 {
			continue
		}
		after = evs[len(evs)-1].ID
		if !send(eventBatch{events: evs}) {
			return
		}
	}
}

// eventToPB is an event as the gRPC messages carry it.
func eventToPB(e *store.Event) *herov1.Event {
	return &herov1.Event{Id: e.ID, TimeMs: e.TimeMs, Type: e.Type, Actor: e.Actor, ContextId: e.ContextID, FlowId: e.FlowID,
		JobId: e.JobID, CallerId: e.CallerID, Status: e.Status, Detail: e.Detail}
}
