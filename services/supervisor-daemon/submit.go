package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// maxSubmitBatch bounds the jobs of one job.submit_batch (SubmitJobs) call.
const maxSubmitBatch = 1000

// maxUniqueTTL bounds unique_ttl_seconds (30 days).
const maxUniqueTTL = 30 * 24 * 3600

// submitItem is one job to submit with its optional uniqueness key.
type submitItem struct {
	Job              *jobIn `json:"job"`
	UniqueKey        string `json:"unique_key,omitempty"`
	UniqueTTLSeconds uint32 `json:"unique_ttl_seconds,omitempty"`
	delayParams
	debounceParams
	// awaited: a job.run call waits for the job (model.Job's Awaited): its end is told
	// with its hash
	awaited bool
}

type jobSubmitParams struct {
	ContextID        uint32 `json:"context_id"`
	Job              *jobIn `json:"job"`
	UniqueKey        string `json:"unique_key,omitempty"`
	UniqueTTLSeconds uint32 `json:"unique_ttl_seconds,omitempty"`
	delayParams
	debounceParams
}

type jobSubmitBatchParams struct {
	ContextID uint32       `json:"context_id"`
	Jobs      []submitItem `json:"jobs"`
}

// submitResult is one submitted job: existing when its unique_key (or its chosen id)
// named a job that exists, which is returned instead of a new one.
type submitResult struct {
	Job      *model.Job `json:"job"`
	Existing bool       `json:"existing"`
}

type submitBatchResult struct {
	Items []submitResult `json:"items"`
}

func (s *service) jobSubmit(ctx context.Context, p Principal, in jobSubmitParams) (*submitResult, error) {
	out, err := s.submit(ctx, p, in.ContextID, []submitItem{{Job: in.Job, UniqueKey: in.UniqueKey, UniqueTTLSeconds: in.UniqueTTLSeconds, delayParams: in.delayParams, debounceParams: in.debounceParams}}, "job.submit", "")
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

func (s *service) jobSubmitBatch(ctx context.Context, p Principal, in jobSubmitBatchParams) (*submitBatchResult, error) {
	if len(in.Jobs) == 0 {
		return nil, invalidParams("jobs", "jobs is empty; give 1 to %d jobs", maxSubmitBatch)
	}
	if len(in.Jobs) > maxSubmitBatch {
		return nil, invalidParams("jobs", "%d jobs in one call; at most %d", len(in.Jobs), maxSubmitBatch)
	}
	out, err := s.submit(ctx, p, in.ContextID, in.Jobs, "job.submit_batch", "jobs[]")
	if err != nil {
		return nil, err
	}
	return &submitBatchResult{Items: out}, nil
}

// submitTries bounds the authorizations of one submission whose context kept
// changing under it (store.ErrContextChanged).
const submitTries = 3

// submit checks every job as job.run does, then creates and dispatches them all in one
// step (store.SubmitGuarded, which also refuses a job no runner serves) and returns without waiting; one bad job refuses the call,
// storing nothing. where prefixes the field names of errors ("jobs[]" in a batch).
// One job joins the group commit of concurrent submissions (submitGroups). The
// authorization reads the context from the cache (contextCache); the store call is
// guarded by what it read, and a context changed since is read again and the call
// authorized again.
func (s *service) submit(ctx context.Context, p Principal, ctxID uint32, items []submitItem, method, where string) ([]submitResult, error) {
	fresh := false
	for try := 1; ; try++ {
		e, db, loaded, err := s.authorizeCached(ctx, p, ctxID, RoleExecutor, method, fresh)
		var subs []store.Submission
		if err == nil {
			subs, err = s.submissions(ctx, p, e.c, db, ctxID, items, where)
		}
		if err != nil {
			if !loaded && !fresh {
				fresh = true // a refusal met with a cached context is checked against a fresh one
				continue
			}
			return nil, err
		}
		res, err := s.storeSubmissions(ctx, ctxID, subs, e.guard)
		if err != nil && refusedForOneJob(err) && !loaded && !fresh {
			// Refused before the guard was checked (a context deleted since: no runner
			// serves the job): checked again against a fresh reading.
			fresh = true
			continue
		}
		if errors.Is(err, store.ErrContextChanged) {
			s.contexts.drop(ctxID, e)
			fresh = true
			if try < submitTries {
				continue
			}
			return nil, contextChanged(ctxID, try)
		}
		if err != nil {
			return nil, err
		}
		if err := s.debounce(ctx, db, items, res, p.Name()); err != nil {
			return nil, err
		}
		s.countSubmitted(res)
		out := make([]submitResult, len(res))
		for i, r := range res {
			out[i] = submitResult{Job: r.Job, Existing: r.Existing}
		}
		return out, nil
	}
}

// contextChanged refuses a submission whose context changed under each of its tries.
func contextChanged(ctxID uint32, tries int) error {
	return &apiError{Code: codeUnavailable, Msg: fmt.Sprintf("unavailable: context %d changed during the submission %d times; retry", ctxID, tries),
		Data: map[string]any{"retry_after_ms": int64(100)}}
}

// storeSubmissions stores subs: one job through the group commit, several in one call.
func (s *service) storeSubmissions(ctx context.Context, ctxID uint32, subs []store.Submission, guard *store.ContextGuard) ([]store.Submitted, error) {
	if len(subs) == 1 && s.groups != nil {
		r, err := s.groups.add(ctx, ctxID, guard, subs[0])
		if err != nil {
			return nil, err
		}
		return []store.Submitted{r}, nil
	}
	return s.store.SubmitGuarded(ctx, ctxID, subs, guard)
}

// submissions checks items against their context c for the principal p (the
// request's traceparent, if any, in ctx).
func (s *service) submissions(ctx context.Context, p Principal, c *model.Context, db *store.DB, ctxID uint32, items []submitItem, where string) ([]store.Submission, error) {
	subs := make([]store.Submission, len(items))
	tp := traceparentOf(ctx)
	for i, it := range items {
		sub, err := submission(ctx, p, c, db, ctxID, it, i, where, tp)
		if err != nil {
			return nil, err
		}
		subs[i] = sub
	}
	return subs, nil
}

// submission checks item i of a submission against its context c for the principal
// p; tp is the request's traceparent ("" when none).
func submission(ctx context.Context, p Principal, c *model.Context, db *store.DB, ctxID uint32, it submitItem, i int, where, tp string) (store.Submission, error) {
	if it.Job == nil {
		return store.Submission{}, invalidParams(where+"job", "%sjob is required (item %d)", where, i)
	}
	if it.UniqueKey != "" && (it.UniqueTTLSeconds == 0 || it.UniqueTTLSeconds > maxUniqueTTL) {
		return store.Submission{}, invalidParams(where+"unique_ttl_seconds", "%sunique_ttl_seconds %d (item %d): a unique_key needs 1 to %d seconds", where, it.UniqueTTLSeconds, i, maxUniqueTTL)
	}
	if len(it.UniqueKey) > 256 {
		return store.Submission{}, invalidParams(where+"unique_key", "%sunique_key (item %d) is %d bytes; at most 256", where, i, len(it.UniqueKey))
	}
	runAt, err := it.when(where, time.Now())
	if err != nil {
		return store.Submission{}, err
	}
	window, err := it.window(where, it.RunAt != "" || it.Delay != "")
	if err != nil {
		return store.Submission{}, err
	}
	if window > 0 {
		runAt = time.Now().Add(window)
	}
	j, err := standaloneJob(ctx, p, c, db, it.Job, ctxID)
	if err != nil {
		return store.Submission{}, err
	}
	if tp != "" {
		j.Traceparent = tp
	}
	j.DebounceKey, j.Awaited = it.DebounceKey, it.awaited
	return store.Submission{Job: j, UniqueKey: it.UniqueKey, UniqueTTL: time.Duration(it.UniqueTTLSeconds) * time.Second, Actor: p.Name(), RunAt: runAt}, nil
}

// countSubmitted counts the jobs SubmitJobs created (hero_jobs_submitted_total).
func (s *service) countSubmitted(res []store.Submitted) {
	if s.metrics == nil {
		return
	}
	for _, r := range res {
		if !r.Existing {
			s.metrics.submitted.Inc()
		}
	}
}

// submitItemFromPB is a gRPC submission as job.submit takes it (debounce: the
// debounce key and window).
func submitItemFromPB(j *herov1.Job, key string, ttl uint32, runAt, delay string, debounce debounceParams) submitItem {
	return submitItem{Job: jobInFromPB(j), UniqueKey: key, UniqueTTLSeconds: ttl, delayParams: delayParams{RunAt: runAt, Delay: delay}, debounceParams: debounce}
}

func submitResultToPB(r submitResult) *herov1.SubmitJobResponse {
	return &herov1.SubmitJobResponse{Job: protoconv.JobToPB(r.Job), Existing: r.Existing}
}

func (c *coordinatorServer) SubmitJob(ctx context.Context, r *herov1.SubmitJobRequest) (*herov1.SubmitJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.SubmitJobResponse, error) {
		it := submitItemFromPB(r.Job, r.UniqueKey, r.UniqueTtlSeconds, r.RunAt, r.Delay, debounceParams{DebounceKey: r.DebounceKey, Debounce: r.Debounce})
		x, err := c.s.jobSubmit(ctx, p, jobSubmitParams{ContextID: r.ContextId, Job: it.Job, UniqueKey: it.UniqueKey, UniqueTTLSeconds: it.UniqueTTLSeconds, delayParams: it.delayParams, debounceParams: it.debounceParams})
		if err != nil {
			return nil, err
		}
		return submitResultToPB(*x), nil
	})
}

func (c *coordinatorServer) SubmitJobs(ctx context.Context, r *herov1.SubmitJobsRequest) (*herov1.SubmitJobsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.SubmitJobsResponse, error) {
		in := jobSubmitBatchParams{ContextID: r.ContextId, Jobs: make([]submitItem, len(r.Jobs))}
		for i, it := range r.Jobs {
			in.Jobs[i] = submitItemFromPB(it.Job, it.UniqueKey, it.UniqueTtlSeconds, it.RunAt, it.Delay, debounceParams{DebounceKey: it.DebounceKey, Debounce: it.Debounce})
		}
		x, err := c.s.jobSubmitBatch(ctx, p, in)
		if err != nil {
			return nil, err
		}
		out := &herov1.SubmitJobsResponse{Items: make([]*herov1.SubmitJobResponse, len(x.Items))}
		for i, it := range x.Items {
			out.Items[i] = submitResultToPB(it)
		}
		return out, nil
	})
}
