package hero

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The event types the watch reads (the events' "type" field, docs/api.md): lib/model's.
const (
	evJobDispatched = string(model.EventJobDispatched)
	evJobStarted    = string(model.EventJobStarted)
	evJobFinished   = string(model.EventJobFinished)
	evJobFailed     = string(model.EventJobFailed)
	evJobRetried    = string(model.EventJobRetried)
	evJobCancelled  = string(model.EventJobCancelled)
	evFlowFinished  = string(model.EventFlowFinished)
	evFlowError     = string(model.EventFlowError)
	evFlowPrefix    = "flow."
)

// FlowUpdate is one step of WatchFlow.
type FlowUpdate struct {
	// DAG is the flow's state with Event applied (nil only in a Notice before the
	// first state was loaded).
	DAG *DAG
	// Event is the job event just applied; nil for the first state.
	Event *Event
	// Notice says the watch was interrupted and resumes (or reloads the state);
	// DAG and Event are then unchanged.
	Notice string
}

// WatchFlow follows a flow until it ends and returns its final state: look at
// DAG.Flow.Status. It loads the DAG once, then applies the flow's events to it (a flow
// of thousands of jobs costs one load, not one per event), calling fn with the first
// state and after each job event. A broken stream is resumed after the last event
// seen; events trimmed meanwhile make it reload the state. ctx bounds the watch.
func (c *Client) WatchFlow(ctx context.Context, id uint32, fn func(FlowUpdate)) (*DAG, error) {
	if fn == nil {
		fn = func(FlowUpdate) {}
	}
	w := &flowWatch{c: c, id: id, fn: fn, backoff: 200 * time.Millisecond}
	// Take the stream's position first, then the state, then follow from the
	// position: a change between the two is delivered as an event, never lost.
	pos, err := c.position(ctx)
	if err != nil {
		return nil, err
	}
	w.lastID = pos
	for {
		ended, err := w.follow(ctx)
		if ended {
			return w.dag, nil
		}
		if ctx.Err() != nil {
			return nil, wrap(ctx.Err())
		}
		if err := w.recover(ctx, err); err != nil {
			return nil, err
		}
	}
}

type flowWatch struct {
	c       *Client
	id      uint32
	fn      func(FlowUpdate)
	dag     *DAG
	byID    map[uint32]*DagNode
	lastID  string
	backoff time.Duration
}

func (w *flowWatch) load(ctx context.Context) error {
	d, err := w.c.FlowDAG(ctx, w.id)
	if err != nil {
		return err
	}
	w.dag, w.byID = d, map[uint32]*DagNode{}
	for _, n := range d.Nodes {
		w.byID[n.ID] = n
	}
	return nil
}

// follow opens the stream after lastID, loads the state when there is none, and
// applies events until the flow ends (true) or the stream fails.
func (w *flowWatch) follow(ctx context.Context) (bool, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := w.c.api.Watch(wctx, &herov1.WatchRequest{ContextId: w.c.cfg.Context, AfterId: w.lastID, FlowId: w.id})
	if err != nil {
		return false, err
	}
	if w.dag == nil {
		// The stream is open: take the state once; every later change is an event.
		if err := w.load(ctx); err != nil {
			return false, err
		}
		if w.dag.Flow.Status.Terminal() {
			return true, nil
		}
		w.fn(FlowUpdate{DAG: w.dag})
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return false, err
		}
		// The position moves past an event once it is applied: a flow's end whose
		// final state could not be loaded is read again after a resume.
		if ended, err := w.apply(ctx, eventOf(ev.Event)); ended || err != nil {
			return ended, err
		}
		w.lastID = ev.Event.Id
	}
}

// apply takes one event: the flow's end reloads the final state.
func (w *flowWatch) apply(ctx context.Context, e Event) (bool, error) {
	switch {
	case e.Type == evFlowFinished || e.Type == evFlowError:
		if err := w.load(ctx); err != nil {
			return false, err
		}
		return true, nil
	case strings.HasPrefix(e.Type, evFlowPrefix):
		return false, nil
	}
	applyEvent(w.byID, e)
	w.fn(FlowUpdate{DAG: w.dag, Event: &e})
	return false, nil
}

// recover decides after a failed stream: trimmed events reload the state, a
// transient fault resumes after a backoff, anything else ends the watch.
func (w *flowWatch) recover(ctx context.Context, err error) error {
	code := status.Code(err)
	if code == codes.OutOfRange {
		w.fn(FlowUpdate{DAG: w.dag, Notice: fmt.Sprintf("events after %q were trimmed; reloading the flow", w.lastID)})
		pos, perr := w.c.position(ctx)
		if perr != nil {
			return perr
		}
		w.lastID, w.dag = pos, nil
		return nil
	}
	if code != codes.Unavailable && code != codes.Canceled && code != codes.Internal {
		return wrap(err)
	}
	w.fn(FlowUpdate{DAG: w.dag, Notice: fmt.Sprintf("watch interrupted (%v); resuming after event %q", err, w.lastID)})
	t := time.NewTimer(w.backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return wrap(ctx.Err())
	case <-t.C:
	}
	w.backoff = min(2*w.backoff, 5*time.Second)
	return nil
}

// applyEvent moves a node's state as a job event says.
func applyEvent(nodes map[uint32]*DagNode, e Event) {
	n := nodes[e.JobID]
	if n == nil {
		return
	}
	switch e.Type {
	case evJobDispatched:
		n.NodeStatus, n.JobStatus = model.NodeDispatched, model.JobDispatched
		n.Attempt++
	case evJobStarted:
		n.NodeStatus, n.JobStatus = model.NodeRunning, model.JobStarted
	case evJobFinished:
		n.NodeStatus, n.JobStatus, n.Error = model.NodeCompleted, model.JobFinished, ""
	case evJobFailed:
		n.NodeStatus, n.JobStatus, n.Error = model.NodeFailed, model.JobError, e.Detail
	case evJobRetried:
		n.NodeStatus, n.JobStatus, n.Error = model.NodeReady, model.JobError, e.Detail
	case evJobCancelled:
		n.NodeStatus, n.JobStatus, n.Error = model.NodeCancelled, model.JobError, e.Detail
	}
}
