package hero

import (
	"context"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// caller is the job's caller: the given one, else the client's actor.
func (c *Client) caller(callerID uint32) uint32 {
	if callerID != 0 {
		return callerID
	}
	return c.cfg.Actor
}

func (c *Client) jobPB(j *model.Job) *herov1.Job {
	pb := protoconv.JobToPB(j)
	pb.ContextId = c.cfg.Context
	return pb
}

// CreateJob stores a job (not started: a flow starts it, or it is created with
// dependencies for one). Id 0 lets the server pick it.
func (c *Client) CreateJob(ctx context.Context, j *model.Job) (*model.Job, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.CreateJob(ctx, &herov1.CreateJobRequest{ContextId: c.cfg.Context, Job: c.jobPB(j)})
	if err != nil {
		return nil, err
	}
	return jobOf(r.Job), nil
}

// MaxCreateJobs is the most jobs one CreateJobs call takes.
const MaxCreateJobs = 1000

// CreateJobs stores up to MaxCreateJobs jobs in one call (job.create_batch), each on
// its own as CreateJob would one after the other: made[i] is jobs[i] as stored (created,
// or found with the same content), or errs[i] (an *Error) says why not. err is the
// call's own failure (malformed, not allowed, or a server without the call:
// codes.Unimplemented), and nothing was stored.
func (c *Client) CreateJobs(ctx context.Context, jobs []*model.Job) (made []*model.Job, errs []error, err error) {
	return c.jobsCall(ctx, 0, jobs, c.api.CreateJobs)
}

// CheckJobs checks up to MaxCreateJobs jobs as CreateJobs would and stores nothing
// (job.check_batch): errs[i] (an *Error) is the refusal CreateJobs would give jobs[i],
// nil when it would store it. err is the call's own failure (a server without the
// call: codes.Unimplemented). SubmitFlow checks a flow's jobs so before it creates any.
func (c *Client) CheckJobs(ctx context.Context, jobs []*model.Job) (errs []error, err error) {
	_, errs, err = c.jobsCall(ctx, 0, jobs, c.api.CheckJobs)
	return errs, err
}

// jobsCall makes a CreateJobs or a CheckJobs call (rpc) of jobs (of the flow begun
// as flowID, when not 0) and reads its items.
func (c *Client) jobsCall(ctx context.Context, flowID uint32, jobs []*model.Job, rpc func(context.Context, *herov1.CreateJobsRequest, ...grpc.CallOption) (*herov1.CreateJobsResponse, error)) (made []*model.Job, errs []error, err error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	req := &herov1.CreateJobsRequest{ContextId: c.cfg.Context, Jobs: make([]*herov1.Job, len(jobs)), FlowId: flowID}
	for i, j := range jobs {
		req.Jobs[i] = c.jobPB(j)
	}
	r, err := rpc(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	if len(r.Items) != len(jobs) {
		return nil, nil, &Error{Kind: ErrInternal, Code: codes.Internal, Message: fmt.Sprintf("%d items answered for %d jobs", len(r.Items), len(jobs))}
	}
	made, errs = make([]*model.Job, len(jobs)), make([]error, len(jobs))
	for i, it := range r.Items {
		if e := it.Error; e != nil {
			errs[i] = itemError(e)
			continue
		}
		made[i] = jobOf(it.Job)
	}
	return made, errs, nil
}

// itemError is one refused item of a batch as an *Error of its code (the gRPC code's
// name as codes.Code.String spells it: InvalidArgument, NotFound, …).
func itemError(e *herov1.ItemError) error {
	code := codes.Unknown
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == e.Code {
			code = c
		}
	}
	return wrap(status.Error(code, e.Message))
}

// GetJob loads a job; caller 0 means the client's actor.
func (c *Client) GetJob(ctx context.Context, callerID, id uint32) (*model.Job, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.GetJob(ctx, &herov1.GetJobRequest{ContextId: c.cfg.Context, CallerId: c.caller(callerID), Id: id})
	if err != nil {
		return nil, err
	}
	return jobOf(r.Job), nil
}

// ListJobs lists the context's jobs, newest first.
func (c *Client) ListJobs(ctx context.Context, o ListOptions) (*Page[*model.Job], error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.ListJobs(ctx, &herov1.ListJobsRequest{ContextId: c.cfg.Context, Status: o.Status, Limit: o.Limit, Cursor: o.Cursor})
	if err != nil {
		return nil, err
	}
	out := &Page[*model.Job]{Items: []*model.Job{}, NextCursor: r.NextCursor}
	for _, j := range r.Jobs {
		out.Items = append(out.Items, jobOf(j))
	}
	return out, nil
}

// RunJob creates a standalone job, runs it and waits up to wait (0: the job's own
// timeout) for its end; the job comes back with its result ("output": stdout).
// A job that ran and failed is no error here: look at its Status and Error.
func (c *Client) RunJob(ctx context.Context, j *model.Job, wait time.Duration) (*model.Job, error) {
	if _, ok := ctx.Deadline(); !ok {
		bound := time.Duration(j.Timeout)*time.Second + 6*time.Minute
		if wait > 0 {
			bound = wait + time.Minute
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	r, err := c.api.RunJob(ctx, &herov1.RunJobRequest{ContextId: c.cfg.Context, Job: c.jobPB(j), Timeout: uint32(wait / time.Second)})
	if err != nil {
		return nil, err
	}
	return jobOf(r.Job), nil
}

// StopJob stops a job: a running one is killed, a queued one never starts.
func (c *Client) StopJob(ctx context.Context, callerID, id uint32) (*model.Job, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.StopJob(ctx, &herov1.StopJobRequest{ContextId: c.cfg.Context, CallerId: c.caller(callerID), Id: id})
	if err != nil {
		return nil, err
	}
	return jobOf(r.Job), nil
}

// DeleteJob deletes a job of no flow with its log and messages.
func (c *Client) DeleteJob(ctx context.Context, callerID, id uint32, force bool) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	_, err := c.api.DeleteJob(ctx, &herov1.DeleteJobRequest{ContextId: c.cfg.Context, CallerId: c.caller(callerID), Id: id, Force: force})
	return err
}

// JobLogs reads a job's log from an offset (0: the start).
func (c *Client) JobLogs(ctx context.Context, callerID, id uint32, offset int64) (*Logs, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.GetJobLogs(ctx, &herov1.GetJobLogsRequest{ContextId: c.cfg.Context, CallerId: c.caller(callerID), Id: id, Offset: offset})
	if err != nil {
		return nil, err
	}
	return &Logs{Logs: r.Logs, NextOffset: r.NextOffset, Complete: r.Complete}, nil
}

// logPoll is how often FollowJobLogs asks for more of a log that has not grown.
const logPoll = 250 * time.Millisecond

// CopyJobLogs writes a job's log to w. With follow it goes on until the job has ended
// and its log is whole (or ctx ends), asking for more every 250 ms while the log does
// not grow.
func (c *Client) CopyJobLogs(ctx context.Context, callerID, id uint32, w io.Writer, follow bool) error {
	var offset int64
	for {
		r, err := c.JobLogs(ctx, callerID, id, offset)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, r.Logs); err != nil {
			return err
		}
		offset = r.NextOffset
		if !follow || r.Complete {
			return nil
		}
		if r.Logs == "" {
			t := time.NewTimer(logPoll)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

// WaitJob waits until a job has ended (finished, or failed with no retry to come) and
// returns it. It follows the context's events, so it costs no polling; ctx bounds it.
func (c *Client) WaitJob(ctx context.Context, callerID, id uint32) (*model.Job, error) {
	caller := c.caller(callerID)
	pos, err := c.position(ctx)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.Watch(wctx, &herov1.WatchRequest{ContextId: c.cfg.Context, AfterId: pos})
	if err != nil {
		return nil, wrap(err)
	}
	stopped := false
	for {
		// The stream is open first, then the state: an end in between is an event.
		j, err := c.GetJob(ctx, caller, id)
		if err != nil || jobEnded(j) || (stopped && j.Status == model.JobError) {
			return j, err
		}
		typ, err := nextJobEvent(stream, caller, id)
		if err != nil {
			return nil, err
		}
		stopped = stopped || typ == evJobCancelled
	}
}

// jobEnded: finished, or failed with no retry to come (out of attempts, or
// dead-lettered).
func jobEnded(j *model.Job) bool {
	return j.Status == model.JobFinished || (j.Status == model.JobError && (j.Attempt > uint32(j.Retries) || j.DLQAtMs != 0))
}

// nextJobEvent reads the stream until an event of the job and returns its type.
func nextJobEvent(stream herov1.Coordinator_WatchClient, caller, id uint32) (string, error) {
	for {
		ev, err := stream.Recv()
		if err != nil {
			return "", wrap(err)
		}
		if ev.Event.JobId == id && (ev.Event.CallerId == caller || ev.Event.CallerId == 0) {
			return ev.Event.Type, nil
		}
	}
}

// position is the event stream's newest id: follow from there without a gap.
func (c *Client) position(ctx context.Context) (string, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.ReadEvents(ctx, &herov1.ReadEventsRequest{ContextId: c.cfg.Context, AfterId: "$"})
	if err != nil {
		return "", err
	}
	return r.NextAfterId, nil
}

// ReadEvents reads up to limit events after a position ("0": the start; "$": none,
// only the newest position), of one flow or (flowID 0) of all.
func (c *Client) ReadEvents(ctx context.Context, after string, limit, flowID uint32) (*Events, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.ReadEvents(ctx, &herov1.ReadEventsRequest{ContextId: c.cfg.Context, AfterId: after, Limit: limit, FlowId: flowID})
	if err != nil {
		return nil, err
	}
	out := &Events{Events: []Event{}, Next: r.NextAfterId}
	for _, e := range r.Events {
		out.Events = append(out.Events, eventOf(e))
	}
	return out, nil
}

// FollowEvents calls fn for every event after a position, of one flow or (flowID 0)
// of all, until ctx ends or fn returns an error (which it returns).
func (c *Client) FollowEvents(ctx context.Context, after string, flowID uint32, fn func(Event) error) error {
	stream, err := c.api.Watch(ctx, &herov1.WatchRequest{ContextId: c.cfg.Context, AfterId: after, FlowId: flowID})
	if err != nil {
		return wrap(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return wrap(err)
		}
		if err := fn(eventOf(ev.Event)); err != nil {
			return err
		}
	}
}
