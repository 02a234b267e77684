package hero

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// CreateFlow stores a flow of existing jobs (f.Jobs) of one caller; StartFlow runs it.
func (c *Client) CreateFlow(ctx context.Context, f *model.Flow) (*model.Flow, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	pb := protoconv.FlowToPB(f)
	pb.ContextId = c.cfg.Context
	r, err := c.api.CreateFlow(ctx, &herov1.CreateFlowRequest{ContextId: c.cfg.Context, Flow: pb})
	if err != nil {
		return nil, err
	}
	return flowOf(r.Flow), nil
}

// flowCall is one of the calls that take a flow id and answer with the flow.
func (c *Client) flowCall(ctx context.Context, id uint32, call func(context.Context, uint32) (*herov1.Flow, error)) (*model.Flow, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	f, err := call(ctx, id)
	if err != nil {
		return nil, err
	}
	return flowOf(f), nil
}

// StartFlow checks a flow's DAG and starts it.
func (c *Client) StartFlow(ctx context.Context, id uint32) (*model.Flow, error) {
	return c.flowCall(ctx, id, func(ctx context.Context, id uint32) (*herov1.Flow, error) {
		r, err := c.api.StartFlow(ctx, &herov1.StartFlowRequest{ContextId: c.cfg.Context, Id: id})
		return r.GetFlow(), err
	})
}

// StartFlowAt checks a flow's DAG now and schedules its start at runAt (status
// scheduled until then; CancelFlow before then cancels it). A time past starts it now.
func (c *Client) StartFlowAt(ctx context.Context, id uint32, runAt time.Time) (*model.Flow, error) {
	return c.flowCall(ctx, id, func(ctx context.Context, id uint32) (*herov1.Flow, error) {
		r, err := c.api.StartFlow(ctx, &herov1.StartFlowRequest{ContextId: c.cfg.Context, Id: id, RunAt: timeField(runAt)})
		return r.GetFlow(), err
	})
}

// GetFlow loads a flow; while it runs, its result map so far.
func (c *Client) GetFlow(ctx context.Context, id uint32) (*model.Flow, error) {
	return c.flowCall(ctx, id, func(ctx context.Context, id uint32) (*herov1.Flow, error) {
		r, err := c.api.GetFlow(ctx, &herov1.GetFlowRequest{ContextId: c.cfg.Context, Id: id})
		return r.GetFlow(), err
	})
}

// CancelFlow stops a flow's running jobs; its pending ones never start.
func (c *Client) CancelFlow(ctx context.Context, id uint32) (*model.Flow, error) {
	return c.flowCall(ctx, id, func(ctx context.Context, id uint32) (*herov1.Flow, error) {
		r, err := c.api.CancelFlow(ctx, &herov1.CancelFlowRequest{ContextId: c.cfg.Context, Id: id})
		return r.GetFlow(), err
	})
}

// RetryFlow runs a failed flow's failed and cancelled jobs again, keeping the
// finished ones.
func (c *Client) RetryFlow(ctx context.Context, id uint32) (*model.Flow, error) {
	return c.flowCall(ctx, id, func(ctx context.Context, id uint32) (*herov1.Flow, error) {
		r, err := c.api.RetryFlow(ctx, &herov1.RetryFlowRequest{ContextId: c.cfg.Context, Id: id})
		return r.GetFlow(), err
	})
}

// DeleteFlow deletes an ended (or, with force, running) flow with its jobs.
func (c *Client) DeleteFlow(ctx context.Context, id uint32, force bool) error {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	_, err := c.api.DeleteFlow(ctx, &herov1.DeleteFlowRequest{ContextId: c.cfg.Context, Id: id, Force: force})
	return err
}

// ListFlows lists the context's flows, newest first.
func (c *Client) ListFlows(ctx context.Context, o ListOptions) (*Page[*model.Flow], error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.ListFlows(ctx, &herov1.ListFlowsRequest{ContextId: c.cfg.Context, Status: o.Status, Limit: o.Limit, Cursor: o.Cursor})
	if err != nil {
		return nil, err
	}
	out := &Page[*model.Flow]{Items: []*model.Flow{}, NextCursor: r.NextCursor}
	for _, f := range r.Flows {
		out.Items = append(out.Items, flowOf(f))
	}
	return out, nil
}

// FlowDAG is a flow with each job's place and state.
func (c *Client) FlowDAG(ctx context.Context, id uint32) (*DAG, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.GetFlowDag(ctx, &herov1.GetFlowDagRequest{ContextId: c.cfg.Context, Id: id})
	if err != nil {
		return nil, err
	}
	return dagOf(r), nil
}

// FlowDAGPage is one page of a flow's DAG: up to limit nodes (at most 10,000) from
// offset in the flow's order; the page's NextOffset is where the next starts (0:
// none), its Counts the flow's node counts.
func (c *Client) FlowDAGPage(ctx context.Context, id, offset, limit uint32) (*DAG, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.GetFlowDag(ctx, &herov1.GetFlowDagRequest{ContextId: c.cfg.Context, Id: id, Offset: offset, Limit: limit})
	if err != nil {
		return nil, err
	}
	return dagOf(r), nil
}

// FlowCounts is a flow's nodes counted by state, in O(1) whatever its size.
func (c *Client) FlowCounts(ctx context.Context, id uint32) (*FlowCounts, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.GetFlowCounts(ctx, &herov1.GetFlowRequest{ContextId: c.cfg.Context, Id: id})
	if err != nil {
		return nil, err
	}
	return countsOf(r), nil
}

// WaitFlow waits up to wait (0: the server's default, 5 minutes; at most an hour)
// until a flow ends, and returns it: look at its Status (model.FlowFinished or
// model.FlowError) and Error. A flow still running then is ErrTimeout.
func (c *Client) WaitFlow(ctx context.Context, id uint32, wait time.Duration) (*model.Flow, error) {
	bound := wait
	if bound <= 0 {
		bound = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, bound+30*time.Second)
	defer cancel()
	r, err := c.api.WaitFlow(ctx, &herov1.WaitFlowRequest{ContextId: c.cfg.Context, Id: id, Timeout: uint32(wait / time.Second)})
	if err != nil {
		return nil, err
	}
	return flowOf(r.Flow), nil
}

// FlowSpec describes a flow to submit: its jobs by name, each naming the jobs it
// depends on.
type FlowSpec struct {
	ID   uint32            // 0: the server picks it
	Env  map[string]string // the flow's environment, given to every job
	Jobs []FlowJob
	// CreationTTL is how long SubmitFlow's creation lives on the server between two
	// of its calls before the server deletes what it made (0: the server's default,
	// 60 s; 5 s to 1 h).
	CreationTTL time.Duration
	// Progress, when set, is called after each batch of jobs SubmitFlow created, with
	// the jobs created so far and their total.
	Progress func(created, total int)
}

// FlowJob is one job of a FlowSpec; Job.Dependends is filled in from Depends.
type FlowJob struct {
	Name    string
	Depends []string
	Job     model.Job
}

// SubmittedFlow is a started flow and its jobs' ids by name.
type SubmittedFlow struct {
	Flow *model.Flow
	Jobs map[string]uint32
}

// Order checks the spec's names and dependencies and returns its jobs' indexes in an
// order where every job follows its dependencies (stable by position).
func (s *FlowSpec) Order() ([]int, error) {
	if len(s.Jobs) == 0 {
		return nil, errors.New("a flow needs at least one job")
	}
	byName := map[string]int{}
	for i, j := range s.Jobs {
		if j.Name == "" {
			return nil, fmt.Errorf("job %d has no name", i+1)
		}
		if _, dup := byName[j.Name]; dup {
			return nil, fmt.Errorf("job name %q used twice", j.Name)
		}
		byName[j.Name] = i
	}
	for _, j := range s.Jobs {
		for _, d := range j.Depends {
			if _, ok := byName[d]; !ok {
				return nil, fmt.Errorf("job %q depends on %q, which is not a job of this flow", j.Name, d)
			}
		}
	}
	return topoOrder(s.Jobs, byName)
}

// topoOrder is Kahn's algorithm, stable by position; a cycle is an error.
func topoOrder(jobs []FlowJob, byName map[string]int) ([]int, error) {
	done := make([]bool, len(jobs))
	order := make([]int, 0, len(jobs))
	for len(order) < len(jobs) {
		progress := false
		for i, j := range jobs {
			if !done[i] && allDone(j.Depends, byName, done) {
				done[i], progress = true, true
				order = append(order, i)
			}
		}
		if !progress {
			var left []string
			for i, j := range jobs {
				if !done[i] {
					left = append(left, j.Name)
				}
			}
			return nil, fmt.Errorf("dependency cycle among jobs %s", strings.Join(left, ", "))
		}
	}
	return order, nil
}

func allDone(deps []string, byName map[string]int, done []bool) bool {
	for _, d := range deps {
		if !done[byName[d]] {
			return false
		}
	}
	return true
}

// submitFlowCalls bounds the creation calls SubmitFlow has in flight at once.
const submitFlowCalls = 16

// SubmitFlow creates the spec's jobs (dependencies first), the flow, and starts it.
// First the server checks every job as it would create it (CheckJobs): a job it would
// refuse — one naming an executor no runner of the context announced, say — refuses
// the flow, naming the job, before anything is stored. Then, with the server's id
// (spec.ID 0), the flow is created as a unit (BeginFlow: the server checks its size
// against its limit first and gives every id at once; the jobs in CreateFlowJobs calls
// of 500, a few at once, spec.Progress told after each; then CreateFlow): a failure
// deletes what was made (AbortFlow), and a client that dies midway leaves it to the
// server, which deletes it once spec.CreationTTL passes. With a chosen spec.ID, or from
// a server without BeginFlow, the jobs are created level by level (a job's level is one more than its
// dependencies' highest: each needs its dependencies' ids, which the server picks),
// those of one level in CreateJobs calls of up to 500, up to submitFlowCalls at once
// (one CreateJob call per job from a server without CreateJobs); the flow lists them in the spec's
// dependency order (Order); there, jobs made before a later failure stay (delete
// them, or submit again with their ids).
func (c *Client) SubmitFlow(ctx context.Context, spec FlowSpec) (*SubmittedFlow, error) {
	order, err := spec.Order()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if err := c.checkFlow(ctx, spec.Jobs); err != nil {
		return nil, err
	}
	byName := make(map[string]int, len(spec.Jobs))
	for i, fj := range spec.Jobs {
		byName[fj.Name] = i
	}
	if spec.ID == 0 {
		f, ids, err := c.submitStaged(ctx, spec, order, byName)
		if err == nil {
			return c.startSubmitted(ctx, spec, f, ids)
		}
		if !errors.Is(err, errNoBeginFlow) {
			return nil, err
		}
	}
	ids := make([]uint32, len(spec.Jobs)) // by the spec's index
	for _, level := range flowLevels(spec.Jobs, byName, order) {
		if err := c.createLevel(ctx, spec.Jobs, byName, level, ids); err != nil {
			return nil, err
		}
	}
	flowIDs := make([]uint32, 0, len(order))
	for _, i := range order {
		flowIDs = append(flowIDs, ids[i])
	}
	f, err := c.CreateFlow(ctx, &model.Flow{ID: spec.ID, Jobs: flowIDs, EnvVars: spec.Env})
	if err != nil {
		return nil, fmt.Errorf("create flow: %w", err)
	}
	return c.startSubmitted(ctx, spec, f, ids)
}

// startSubmitted starts a flow SubmitFlow created (ids: its jobs' by the spec's index).
func (c *Client) startSubmitted(ctx context.Context, spec FlowSpec, f *model.Flow, ids []uint32) (*SubmittedFlow, error) {
	out := &SubmittedFlow{Jobs: make(map[string]uint32, len(spec.Jobs))}
	for i, fj := range spec.Jobs {
		out.Jobs[fj.Name] = ids[i]
	}
	var err error
	if out.Flow, err = c.StartFlow(ctx, f.ID); err != nil {
		return nil, fmt.Errorf("start flow %d: %w", f.ID, err)
	}
	return out, nil
}

// checkFlow has the server check a flow's jobs as it would create them (CheckJobs,
// MaxCreateJobs a call), each without its dependencies (their ids are not known yet;
// Order checked them): the first refusal, naming its job, or nil. A server without
// CheckJobs checks each job as SubmitFlow creates it.
func (c *Client) checkFlow(ctx context.Context, jobs []FlowJob) error {
	for from := 0; from < len(jobs); from += MaxCreateJobs {
		part := jobs[from:min(from+MaxCreateJobs, len(jobs))]
		batch := make([]*model.Job, len(part))
		for i := range part {
			j := part[i].Job
			j.Dependends = nil
			batch[i] = &j
		}
		errs, err := c.CheckJobs(ctx, batch)
		if status.Code(err) == codes.Unimplemented {
			return nil
		}
		if err != nil {
			return fmt.Errorf("check the flow's jobs: %w", err)
		}
		for i, e := range errs {
			if e != nil {
				return fmt.Errorf("job %q of the flow: %w", part[i].Name, e)
			}
		}
	}
	return nil
}

// flowLevels groups the jobs' indexes (order: dependencies first) by level: 0 for a
// job with no dependency, else one more than its dependencies' highest.
func flowLevels(jobs []FlowJob, byName map[string]int, order []int) [][]int {
	level := make([]int, len(jobs))
	var out [][]int
	for _, i := range order {
		for _, d := range jobs[i].Depends {
			level[i] = max(level[i], level[byName[d]]+1)
		}
		if level[i] == len(out) {
			out = append(out, nil)
		}
		out[level[i]] = append(out[level[i]], i)
	}
	return out
}

// createChunk is how many jobs of a level one CreateJobs call of SubmitFlow carries.
const createChunk = 500

// createLevel creates the jobs at the indexes idx (their dependencies' ids are in
// ids) and records their ids: CreateJobs calls of up to createChunk jobs, up to
// submitFlowCalls at once, or, from a server without CreateJobs, one CreateJob call
// per job. The first failure stops the level (the calls in flight end) and is returned.
func (c *Client) createLevel(parent context.Context, jobs []FlowJob, byName map[string]int, idx []int, ids []uint32) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  atomic.Int64
	)
	fail := func(err error) { once.Do(func() { first = err; cancel() }) }
	job := func(k int) *model.Job {
		fj := jobs[idx[k]]
		j := fj.Job
		j.Dependends = nil
		for _, d := range fj.Depends {
			j.Dependends = append(j.Dependends, ids[byName[d]])
		}
		return &j
	}
	size := createChunk
	if c.noCreateJobs.Load() {
		size = 1
	}
	chunks := (len(idx) + size - 1) / size
	for range min(chunks, submitFlowCalls) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int(next.Add(1)) - 1; n < chunks && ctx.Err() == nil; n = int(next.Add(1)) - 1 {
				from, to := n*size, min((n+1)*size, len(idx))
				if err := c.createChunk(ctx, jobs, idx, ids, from, to, job); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if errors.Is(first, errNoCreateJobs) {
		// A server before CreateJobs: the level's jobs not made yet, one a call.
		var left []int
		for _, i := range idx {
			if ids[i] == 0 {
				left = append(left, i)
			}
		}
		return c.createLevel(parent, jobs, byName, left, ids)
	}
	return first
}

// errNoCreateJobs: the server has no CreateJobs (it predates job.create_batch).
var errNoCreateJobs = errors.New("the server has no CreateJobs")

// createChunk creates the jobs idx[from:to] of a level (job(k) builds the k-th), in one
// CreateJobs call when there are several and the server has it, else one by one.
func (c *Client) createChunk(ctx context.Context, jobs []FlowJob, idx []int, ids []uint32, from, to int, job func(int) *model.Job) error {
	if to-from > 1 && !c.noCreateJobs.Load() {
		batch := make([]*model.Job, 0, to-from)
		for k := from; k < to; k++ {
			batch = append(batch, job(k))
		}
		made, errs, err := c.CreateJobs(ctx, batch)
		switch {
		case status.Code(err) == codes.Unimplemented:
			c.noCreateJobs.Store(true) // a server before job.create_batch
			return errNoCreateJobs
		case err != nil:
			return fmt.Errorf("create jobs %q…: %w", jobs[idx[from]].Name, err)
		default:
			for k := from; k < to; k++ {
				if errs[k-from] != nil {
					return fmt.Errorf("create job %q: %w", jobs[idx[k]].Name, errs[k-from])
				}
				ids[idx[k]] = made[k-from].ID
			}
			return nil
		}
	}
	for k := from; k < to && ctx.Err() == nil; k++ {
		made, err := c.CreateJob(ctx, job(k))
		if err != nil {
			return fmt.Errorf("create job %q: %w", jobs[idx[k]].Name, err)
		}
		ids[idx[k]] = made.ID
	}
	return ctx.Err()
}

// CopyFlowLogs writes the log of every job of a flow to w, one after the other in the
// flow's order, each under a line "== job <id> (<type>) ==" (a handler job's
// executor#handler for its type). With follow it waits for
// each job's log to be whole before the next one (until ctx ends).
func (c *Client) CopyFlowLogs(ctx context.Context, id uint32, w io.Writer, follow bool) error {
	f, err := c.GetFlow(ctx, id)
	if err != nil {
		return err
	}
	dag, err := c.FlowDAG(ctx, id)
	if err != nil {
		return err
	}
	types := map[uint32]string{}
	for _, n := range dag.Nodes {
		types[n.ID] = n.ScriptType
		if n.FunctionName != "" {
			types[n.ID] = n.FunctionName
		}
	}
	for _, jid := range f.Jobs {
		if _, err := fmt.Fprintf(w, "== job %d (%s) ==\n", jid, types[jid]); err != nil {
			return err
		}
		if err := c.CopyJobLogs(ctx, f.CallerID, jid, w, follow); err != nil {
			return fmt.Errorf("job %d: %w", jid, err)
		}
	}
	return nil
}
