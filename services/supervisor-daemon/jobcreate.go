package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/remote"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Job creation: job.create (alone and in a JSON-RPC batch), job.create_batch,
// job.check_batch and their gRPC methods.

type jobCreateParams struct {
	ContextID uint32 `json:"context_id"`
	Job       *jobIn `json:"job"`
}

func (s *service) jobCreate(ctx context.Context, p Principal, in jobCreateParams) (*model.Job, error) {
	j, err := s.checkJobCreate(ctx, p, in, newCreateChecks())
	if err != nil {
		return nil, err
	}
	out, _, err := s.createJob(ctx, j, p.Name())
	return out, err
}

// createChecks remembers, for the job.create requests of one JSON-RPC batch, what
// their checks read: each context's authorization, whether an executor is served, and
// whether a pinned runner is local. None of them can change through a job.create, so
// the batch reads each once and answers as the requests one by one would.
type createChecks struct {
	auth   map[uint32]authorized
	served map[string]error // "<context>/<executor>"
	local  map[string]bool  // "<context>/<runner>": a runner known to be remote
}

type authorized struct {
	c   *model.Context
	db  *store.DB
	err error
}

func newCreateChecks() *createChecks {
	return &createChecks{auth: map[uint32]authorized{}, served: map[string]error{}, local: map[string]bool{}}
}

// checkJobCreate checks one job.create request and returns the job to store.
func (s *service) checkJobCreate(ctx context.Context, p Principal, in jobCreateParams, cc *createChecks) (*model.Job, error) {
	if in.Job == nil {
		return nil, invalidParams("job", "job is required")
	}
	a, ok := cc.auth[in.ContextID]
	if !ok {
		a.c, a.db, a.err = s.authorize(ctx, p, in.ContextID, RoleAdmin, "job.create")
		cc.auth[in.ContextID] = a
	}
	if a.err != nil {
		return nil, a.err
	}
	c, db := a.c, a.db
	j, err := in.Job.toModel(in.ContextID)
	if err != nil {
		return nil, err
	}
	if err := checkLimits(c, j); err != nil {
		return nil, err
	}
	if j.CallerID, err = callerFor(p, j.CallerID, "job"); err != nil {
		return nil, err
	}
	if j.RunnerID != 0 {
		// A job pinned to a remote runner travels over Mycelium: one too large for a
		// node is refused now rather than failed at dispatch.
		key := fmt.Sprintf("%d/%d", in.ContextID, j.RunnerID)
		remoteRunner, ok := cc.local[key]
		if !ok {
			r, err := db.LoadRunner(ctx, j.RunnerID)
			remoteRunner = err == nil && !r.Local
			cc.local[key] = remoteRunner
		}
		if remoteRunner {
			if err := remote.CheckJobSize(j); err != nil {
				return nil, invalidParams("job", "%v", err)
			}
		}
	} else if exec, _ := j.Handler(); exec != "" {
		if err := j.Validate(); err != nil {
			return nil, err
		}
		key := fmt.Sprintf("%d/%s", in.ContextID, exec)
		err, ok := cc.served[key]
		if !ok {
			err = checkServed(ctx, db, j) // no runner has its executor
			cc.served[key] = err
		}
		if err != nil {
			return nil, err
		}
	}
	return j, nil
}

// maxCreateBatch bounds the jobs of one job.create_batch (CreateJobs) call.
const maxCreateBatch = 1000

type jobCreateManyParams struct {
	ContextID uint32   `json:"context_id"`
	Jobs      []*jobIn `json:"jobs"`
	// FlowID: the jobs of a flow begun with flow.begin (flowstage.go).
	FlowID uint32 `json:"flow_id,omitempty"`
}

// createdItem is one job of a job.create_batch, in the request's order: the job as
// stored (created, or found with the same content), or why it was refused.
type createdItem struct {
	Job   *model.Job `json:"job,omitempty"`
	Error *itemError `json:"error,omitempty"`
}

// itemError is why one item of a batch was refused: the JSON-RPC error its call alone
// would have got (code, message, data; over gRPC, grpcCode names the code).
type itemError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func newItemError(err error) *itemError {
	ae := toAPIError(err)
	return &itemError{Code: ae.Code, Message: ae.Msg, Data: ae.Data}
}

// jobCreateMany creates up to maxCreateBatch jobs of one context in one call, as a
// JSON-RPC batch of job.create requests would (jobCreateBatch): each job on its own.
// The call fails as a whole only when it is malformed or the caller may not create
// jobs in the context.
func (s *service) jobCreateMany(ctx context.Context, p Principal, in jobCreateManyParams) (*createBatchResult, error) {
	cc, reqs, err := s.createManyChecks(ctx, p, in, "job.create_batch")
	if err != nil {
		return nil, err
	}
	answers := make([]batchAnswer, len(reqs))
	if in.FlowID != 0 {
		if err := s.createStagedJobs(ctx, p, in, reqs, answers, cc); err != nil {
			return nil, err
		}
		return batchItems(answers), nil
	}
	s.createJobs(ctx, p, reqs, answers, cc)
	return batchItems(answers), nil
}

// jobCheckMany checks up to maxCreateBatch jobs of one context as job.create_batch
// would (the same checks, each job on its own, and the job's own validation, which the
// store applies) and stores nothing: an item is the job as it would be stored (its id
// 0 when the server would pick it) or the error job.create_batch would give it. A
// flow's submission (the SDKs' SubmitFlow, heroctl flow submit) checks its jobs so
// before it creates the first, so that a flow with a job that would be refused — an
// executor no runner of the context announced — stores nothing. A chosen id that names
// a stored job of other content is found only by the creation.
func (s *service) jobCheckMany(ctx context.Context, p Principal, in jobCreateManyParams) (*createBatchResult, error) {
	cc, reqs, err := s.createManyChecks(ctx, p, in, "job.check_batch")
	if err != nil {
		return nil, err
	}
	answers := make([]batchAnswer, len(reqs))
	for i, in := range reqs {
		j, err := s.checkJobCreate(ctx, p, in, cc)
		if err == nil {
			err = j.Validate()
		}
		answers[i] = batchAnswer{result: j, err: err}
	}
	return batchItems(answers), nil
}

// createManyChecks checks the bounds of a job.create_batch (or job.check_batch) call
// and authorizes it once (a refusal refuses the whole call; the items' checks take the
// authorization from the createChecks returned), and returns its items as job.create
// requests.
func (s *service) createManyChecks(ctx context.Context, p Principal, in jobCreateManyParams, method string) (*createChecks, []jobCreateParams, error) {
	if len(in.Jobs) == 0 {
		return nil, nil, invalidParams("jobs", "jobs is empty; give 1 to %d jobs", maxCreateBatch)
	}
	if len(in.Jobs) > maxCreateBatch {
		return nil, nil, invalidParams("jobs", "%d jobs in one call; at most %d", len(in.Jobs), maxCreateBatch)
	}
	cc := newCreateChecks()
	var a authorized
	if a.c, a.db, a.err = s.authorize(ctx, p, in.ContextID, RoleAdmin, method); a.err != nil {
		return nil, nil, a.err
	}
	cc.auth[in.ContextID] = a
	reqs := make([]jobCreateParams, len(in.Jobs))
	for i, j := range in.Jobs {
		reqs[i] = jobCreateParams{ContextID: in.ContextID, Job: j}
	}
	return cc, reqs, nil
}

// batchItems are a batch's answers as its items, in order.
func batchItems(answers []batchAnswer) *createBatchResult {
	out := &createBatchResult{Items: make([]createdItem, len(answers))}
	for i, a := range answers {
		if a.err != nil {
			out.Items[i].Error = newItemError(a.err)
			continue
		}
		out.Items[i].Job, _ = a.result.(*model.Job)
	}
	return out
}

type createBatchResult struct {
	Items []createdItem `json:"items"`
}

// createJobs checks and stores the jobs of job.create requests, each on its own (one
// bad request gets its own error in out, the others are stored; a request whose out
// holds an error already is skipped), reading what the checks need once (cc), in one
// round trip per context, in the requests' order.
func (s *service) createJobs(ctx context.Context, p Principal, reqs []jobCreateParams, out []batchAnswer, cc *createChecks) {
	tp := traceparentOf(ctx)
	var jobs []*model.Job
	var at []int
	for i, in := range reqs {
		if out[i].err != nil {
			continue
		}
		j, err := s.checkJobCreate(ctx, p, in, cc)
		if err != nil {
			out[i].err = err
			continue
		}
		if tp != "" {
			j.Traceparent = tp
		}
		jobs, at = append(jobs, j), append(at, i)
	}
	if len(jobs) == 0 {
		return
	}
	for k, r := range s.store.CreateJobs(ctx, jobs, p.Name()) {
		out[at[k]] = batchAnswer{result: r.Job, err: r.Err}
	}
}

// jobCreateBatch answers the consecutive job.create requests of a JSON-RPC batch:
// each is decoded, checked and answered on its own (one bad request gets its own error,
// the others are stored), the checks read what they need once (createChecks), and the
// jobs are stored in one round trip per context, in the requests' order.
func (s *service) jobCreateBatch(ctx context.Context, p Principal, raws []json.RawMessage) []batchAnswer {
	out := make([]batchAnswer, len(raws))
	reqs := make([]jobCreateParams, len(raws))
	for i, raw := range raws {
		out[i].err = decodeParams(raw, &reqs[i])
	}
	s.createJobs(ctx, p, reqs, out, newCreateChecks())
	return out
}

func (c *coordinatorServer) CreateJob(ctx context.Context, r *herov1.CreateJobRequest) (*herov1.CreateJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateJobResponse, error) {
		x, err := c.s.jobCreate(ctx, p, jobCreateParams{ContextID: r.ContextId, Job: jobInFromPB(r.Job)})
		return &herov1.CreateJobResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) CreateJobs(ctx context.Context, r *herov1.CreateJobsRequest) (*herov1.CreateJobsResponse, error) {
	return c.jobsCall(ctx, r, c.s.jobCreateMany)
}

func (c *coordinatorServer) CheckJobs(ctx context.Context, r *herov1.CreateJobsRequest) (*herov1.CreateJobsResponse, error) {
	return c.jobsCall(ctx, r, c.s.jobCheckMany)
}

// jobsCall answers CreateJobs or CheckJobs with do (jobCreateMany or jobCheckMany).
func (c *coordinatorServer) jobsCall(ctx context.Context, r *herov1.CreateJobsRequest, do func(context.Context, Principal, jobCreateManyParams) (*createBatchResult, error)) (*herov1.CreateJobsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateJobsResponse, error) {
		in := jobCreateManyParams{ContextID: r.ContextId, Jobs: make([]*jobIn, len(r.Jobs)), FlowID: r.FlowId}
		for i, j := range r.Jobs {
			in.Jobs[i] = jobInFromPB(j)
		}
		x, err := do(ctx, p, in)
		if err != nil {
			return nil, err
		}
		out := &herov1.CreateJobsResponse{Items: make([]*herov1.CreateJobsItem, len(x.Items))}
		for i, it := range x.Items {
			out.Items[i] = &herov1.CreateJobsItem{Job: protoconv.JobToPB(it.Job)}
			if e := it.Error; e != nil {
				field, _ := e.Data["field"].(string)
				out.Items[i].Error = &herov1.ItemError{Code: grpcCode(e.Code).String(), Message: e.Message, Field: field}
			}
		}
		return out, nil
	})
}
