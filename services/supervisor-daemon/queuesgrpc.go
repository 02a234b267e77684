package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The job queues' gRPC methods: each calls the JSON-RPC method's handler (queues.go),
// with its permission (ListQueues: readers; PauseQueue, ResumeQueue: executors).

func queueParamsFromPB(r *herov1.QueueRequest) queueParams {
	return queueParams{ContextID: r.ContextId, ScriptType: r.ScriptType, Executor: r.Executor, Note: r.Note}
}

func (c *coordinatorServer) ListQueues(ctx context.Context, r *herov1.ListQueuesRequest) (*herov1.ListQueuesResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListQueuesResponse, error) {
		l, err := c.s.queueList(ctx, p, queueListParams{ContextID: r.ContextId})
		if err != nil {
			return nil, err
		}
		out := &herov1.ListQueuesResponse{Items: make([]*herov1.Queue, len(l.Items))}
		for i, q := range l.Items {
			out.Items[i] = protoconv.QueueToPB(q)
		}
		return out, nil
	})
}

func (c *coordinatorServer) PauseQueue(ctx context.Context, r *herov1.QueueRequest) (*herov1.Queue, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.Queue, error) {
		q, err := c.s.queuePause(ctx, p, queueParamsFromPB(r))
		if err != nil {
			return nil, err
		}
		return protoconv.QueueToPB(*q), nil
	})
}

func (c *coordinatorServer) ResumeQueue(ctx context.Context, r *herov1.QueueRequest) (*herov1.Queue, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.Queue, error) {
		q, err := c.s.queueResume(ctx, p, queueParamsFromPB(r))
		if err != nil {
			return nil, err
		}
		return protoconv.QueueToPB(*q), nil
	})
}
