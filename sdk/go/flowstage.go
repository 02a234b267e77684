package hero

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// FlowStage is a flow begun with BeginFlow: its id, the ids its jobs are to have
// (FirstJob to LastJob, of its caller), and how long it lives without a renewal (each
// CreateFlowJobs renews it); MaxJobs is the server's limit of a flow's jobs.
type FlowStage struct {
	FlowID      uint32
	CallerID    uint32
	FirstJob    uint32
	LastJob     uint32
	ExpiresAtMs int64
	TTL         time.Duration
	MaxJobs     uint32
}

// BeginFlow begins a flow of n jobs created as a unit (flow.begin): the server checks
// n against its limit before anything is stored and reserves the flow's id and its
// jobs' ids. CreateFlowJobs creates the jobs, CreateFlow with the flow's id and every
// job stores the flow; a creation not renewed within ttl (0: the server's default,
// 60 s) is deleted with its jobs, and AbortFlow deletes it at once.
func (c *Client) BeginFlow(ctx context.Context, n int, ttl time.Duration) (*FlowStage, error) {
	if n < 1 || n > model.MaxFlowJobs {
		return nil, fmt.Errorf("%w: a flow of %d jobs (1 to %d)", ErrInvalidArgument, n, model.MaxFlowJobs)
	}
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.BeginFlow(ctx, &herov1.BeginFlowRequest{ContextId: c.cfg.Context, Jobs: uint32(n), TtlSeconds: uint32(ttl / time.Second)})
	if err != nil {
		return nil, err
	}
	return &FlowStage{FlowID: r.FlowId, FirstJob: r.FirstJobId, LastJob: r.LastJobId, ExpiresAtMs: r.ExpiresAtMs,
		TTL: time.Duration(r.TtlSeconds) * time.Second, MaxJobs: r.MaxJobs}, nil
}

// CreateFlowJobs creates up to MaxCreateJobs jobs of a flow begun with BeginFlow
// (CreateJobs with its flow id; each job's ID one the stage gave), as CreateJobs does.
func (c *Client) CreateFlowJobs(ctx context.Context, flowID uint32, jobs []*model.Job) (made []*model.Job, errs []error, err error) {
	return c.jobsCall(ctx, flowID, jobs, c.api.CreateJobs)
}

// AbortFlow deletes the jobs of a flow begun with BeginFlow and not stored, and
// returns how many it deleted.
func (c *Client) AbortFlow(ctx context.Context, flowID uint32) (int, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.AbortFlow(ctx, &herov1.AbortFlowRequest{ContextId: c.cfg.Context, Id: flowID})
	if err != nil {
		return 0, err
	}
	return int(r.Deleted), nil
}

// errNoBeginFlow: the server has no BeginFlow (it predates flow.begin).
var errNoBeginFlow = errors.New("the server has no BeginFlow")

// stagedCalls bounds the CreateFlowJobs calls submitStaged has in flight at once: a
// few keep the server busy; more only queue there, holding memory on both sides.
const stagedCalls = 4

// submitStaged creates a flow as a unit: BeginFlow, then the jobs in the dependency
// order (the k-th gets FirstJob+k, so every id is known before any is created) in
// CreateFlowJobs calls of createChunk jobs, stagedCalls at once, then CreateFlow. Any
// failure aborts the creation (AbortFlow), so nothing is left outside a flow; a client
// that dies midway leaves its jobs to the server, which deletes them once the
// creation's ttl passes without a renewal. It returns the flow (not started) and the
// jobs' ids by the spec's index.
func (c *Client) submitStaged(ctx context.Context, spec FlowSpec, order []int, byName map[string]int) (*model.Flow, []uint32, error) {
	st, err := c.BeginFlow(ctx, len(spec.Jobs), spec.CreationTTL)
	if status.Code(err) == codes.Unimplemented {
		return nil, nil, errNoBeginFlow
	}
	if err != nil {
		return nil, nil, fmt.Errorf("begin flow: %w", err)
	}
	ids := make([]uint32, len(spec.Jobs))
	for k, i := range order {
		ids[i] = st.FirstJob + uint32(k)
	}
	abort := func(err error) (*model.Flow, []uint32, error) {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, aerr := c.AbortFlow(actx, st.FlowID); aerr != nil {
			return nil, nil, fmt.Errorf("%w (its jobs are deleted when flow %d's creation expires: %v)", err, st.FlowID, aerr)
		}
		return nil, nil, err
	}
	if err := c.createStaged(ctx, spec, order, byName, ids, st.FlowID); err != nil {
		return abort(err)
	}
	flowIDs := make([]uint32, len(order))
	for k, i := range order {
		flowIDs[k] = ids[i]
	}
	f, err := c.CreateFlow(ctx, &model.Flow{ID: st.FlowID, Jobs: flowIDs, EnvVars: spec.Env})
	if err != nil {
		return abort(fmt.Errorf("create flow: %w", err))
	}
	return f, ids, nil
}

// createStaged creates a begun flow's jobs (ids known) in chunks, stagedCalls at
// once, reporting progress; the first failure stops it and is returned.
func (c *Client) createStaged(parent context.Context, spec FlowSpec, order []int, byName map[string]int, ids []uint32, flowID uint32) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  atomic.Int64
		done  atomic.Int64
		mu    sync.Mutex // orders the progress calls
	)
	fail := func(err error) { once.Do(func() { first = err; cancel() }) }
	chunks := (len(order) + createChunk - 1) / createChunk
	for range min(chunks, stagedCalls) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int(next.Add(1)) - 1; n < chunks && ctx.Err() == nil; n = int(next.Add(1)) - 1 {
				part := order[n*createChunk : min((n+1)*createChunk, len(order))]
				batch := make([]*model.Job, len(part))
				for k, i := range part {
					fj := spec.Jobs[i]
					j := fj.Job
					j.ID, j.Dependends = ids[i], nil
					for _, d := range fj.Depends {
						j.Dependends = append(j.Dependends, ids[byName[d]])
					}
					batch[k] = &j
				}
				_, errs, err := c.CreateFlowJobs(ctx, flowID, batch)
				if err != nil {
					fail(fmt.Errorf("create jobs %q…: %w", spec.Jobs[part[0]].Name, err))
					return
				}
				for k, e := range errs {
					if e != nil {
						fail(fmt.Errorf("create job %q: %w", spec.Jobs[part[k]].Name, e))
						return
					}
				}
				if spec.Progress != nil {
					mu.Lock()
					spec.Progress(int(done.Add(int64(len(part)))), len(order))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && parent.Err() != nil {
		return parent.Err()
	}
	return first
}
