package hero

import (
	"context"

	"google.golang.org/grpc"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// A context's job queues (docs/scheduling.md, "Pause and resume"): a queue is a script
// type's (model.QueueRef{ScriptType: "python"}) or an executor's
// (model.QueueRef{Executor: "mailer"}).

// ListQueues lists the context's job queues (the ones its runners serve, and the
// paused ones) with their depth, runners and pause.
func (c *Client) ListQueues(ctx context.Context) ([]model.Queue, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.ListQueues(ctx, &herov1.ListQueuesRequest{ContextId: c.cfg.Context})
	if err != nil {
		return nil, err
	}
	out := make([]model.Queue, len(r.Items))
	for i, q := range r.Items {
		out[i] = protoconv.QueueFromPB(q)
	}
	return out, nil
}

// PauseQueue pauses a job queue with a note (executors): none of its jobs starts
// until ResumeQueue; the jobs running go on.
func (c *Client) PauseQueue(ctx context.Context, q model.QueueRef, note string) (*model.Queue, error) {
	return c.queueCall(ctx, q, note, c.api.PauseQueue)
}

// ResumeQueue resumes a paused job queue: its jobs start again.
func (c *Client) ResumeQueue(ctx context.Context, q model.QueueRef, note string) (*model.Queue, error) {
	return c.queueCall(ctx, q, note, c.api.ResumeQueue)
}

func (c *Client) queueCall(ctx context.Context, q model.QueueRef, note string,
	call func(context.Context, *herov1.QueueRequest, ...grpc.CallOption) (*herov1.Queue, error)) (*model.Queue, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := call(ctx, &herov1.QueueRequest{ContextId: c.cfg.Context, ScriptType: q.ScriptType, Executor: q.Executor, Note: note})
	if err != nil {
		return nil, err
	}
	out := protoconv.QueueFromPB(r)
	return &out, nil
}
