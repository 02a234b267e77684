package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Jobs: job.load, job.list, job.run, job.stop, job.logs, job.delete and their gRPC
// methods, and the checks a job passes (job.create and job.create_batch are in
// jobcreate.go, job.submit in submit.go).

type jobIn struct {
	ID            uint32            `json:"id"`
	CallerID      uint32            `json:"caller_id"`
	ContextID     uint32            `json:"context_id"`
	Script        string            `json:"script"`
	ScriptType    string            `json:"script_type"`
	Timeout       uint32            `json:"timeout"`
	Retries       uint32            `json:"retries"` // at most 255 (toModel checks)
	EnvVars       map[string]string `json:"env_vars"`
	Prerequisites []string          `json:"prerequisites"`
	Depends       []uint32          `json:"depends"`
	Dependends    []uint32          `json:"dependends"`
	Dependencies  []uint32          `json:"dependencies"`
	RunnerID      uint32            `json:"runner_id"`
	FunctionName  string            `json:"function_name"`
	Args          json.RawMessage   `json:"args"`
	Kwargs        json.RawMessage   `json:"kwargs"`
	Limits        *model.JobLimits  `json:"limits"`
	Priority      uint32            `json:"priority"` // 1 first … 5 last; 0: 3 (toModel checks)
	// at most concurrency_limit (0: 1) jobs of the concurrency key run at once
	ConcurrencyKey   string `json:"concurrency_key"`
	ConcurrencyLimit uint32 `json:"concurrency_limit"`
	// at the limit: queue (the default), cancel_newest or cancel_oldest
	ConcurrencyPolicy string `json:"concurrency_policy"`
}

func (in *jobIn) toModel(ctxID uint32) (*model.Job, error) {
	deps := in.Dependends
	for _, alt := range [][]uint32{in.Depends, in.Dependencies} {
		if len(alt) > 0 {
			if len(deps) > 0 && !sameIDs(deps, alt) {
				return nil, invalidParams("job.depends", "job.depends, job.dependends and job.dependencies disagree; give one of them")
			}
			deps = alt
		}
	}
	if in.Retries > 255 {
		return nil, invalidParams("job.retries", "job.retries %d is more than 255", in.Retries)
	}
	if in.Priority > model.PriorityLowest {
		return nil, invalidParams("job.priority", "job.priority %d is not a priority (%d first … %d last; 0 or none: %d)", in.Priority, model.PriorityHighest, model.PriorityLowest, model.PriorityDefault)
	}
	if in.ContextID != 0 && in.ContextID != ctxID {
		return nil, invalidParams("job.context_id", "job.context_id %d is not the request's context_id %d", in.ContextID, ctxID)
	}
	var st model.ScriptType // none given: a handler job's comes from its function_name
	if in.ScriptType != "" {
		var err error
		if st, err = model.ParseScriptType(in.ScriptType); err != nil {
			return nil, &model.ValidationError{Object: "job", ID: fmt.Sprint(in.ID), Field: "script_type", Msg: err.Error()}
		}
	}
	j := &model.Job{ID: in.ID, CallerID: in.CallerID, ContextID: ctxID, Script: in.Script, ScriptType: st, Timeout: in.Timeout,
		Retries: uint8(in.Retries), EnvVars: in.EnvVars, Prerequisites: in.Prerequisites, Dependends: deps, RunnerID: in.RunnerID,
		FunctionName: in.FunctionName, Args: nullToNil(in.Args), Kwargs: nullToNil(in.Kwargs), Limits: nilIfZero(in.Limits), Priority: uint8(in.Priority),
		ConcurrencyKey: in.ConcurrencyKey, ConcurrencyLimit: in.ConcurrencyLimit, ConcurrencyPolicy: in.ConcurrencyPolicy}
	if j.FunctionName == "" && (len(j.Args) > 0 || len(j.Kwargs) > 0) {
		return nil, invalidParams("job.function_name", "job.args and job.kwargs need job.function_name (a handler job)")
	}
	return j, nil
}

func nullToNil(raw json.RawMessage) json.RawMessage {
	if t := strings.TrimSpace(string(raw)); t == "" || t == "null" {
		return nil
	}
	return raw
}

func sameIDs(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type jobRunParams struct {
	ContextID uint32  `json:"context_id"`
	Job       *jobIn  `json:"job"`
	Timeout   *uint32 `json:"timeout"`
}

type logsResult struct {
	Logs       string `json:"logs"`
	NextOffset int64  `json:"next_offset"`
	Complete   bool   `json:"complete"`
}

type deleteJobParams struct {
	ContextID uint32 `json:"context_id"`
	CallerID  uint32 `json:"caller_id"`
	ID        uint32 `json:"id"`
	Force     bool   `json:"force"`
}

// checkLimits refuses a job that asks for more than its context's job_max allows.
func checkLimits(c *model.Context, j *model.Job) error {
	if err := j.Limits.Validate("job", j.ID, "limits"); err != nil {
		return err
	}
	if why := j.Limits.Exceeds(c.JobMax); why != "" {
		return invalidParams("job.limits", "job.limits: %s of context %d (its job_max)", why, c.ID)
	}
	return nil
}

// checkServed refuses, storing nothing, a job no runner of its context could take: a
// handler job that names its executor ("executor#handler") needs a runner that
// announced that executor; any other job a runner serving its script type.
func checkServed(ctx context.Context, db *store.DB, j *model.Job) error {
	if exec, _ := j.Handler(); exec != "" {
		ok, err := db.ExecutorServed(ctx, exec)
		if err != nil {
			return err
		}
		if !ok {
			return invalidParams("job.function_name", "no runner in context %d has executor %q", db.ContextID, exec)
		}
		return nil
	}
	ok, err := db.ScriptTypeServed(ctx, j.ScriptType)
	if err != nil {
		return err
	}
	if !ok {
		return invalidParams("job.script_type", "no runner in context %d serves script_type %q", db.ContextID, j.ScriptType)
	}
	return nil
}

// standaloneJob checks a job of no flow for job.run and job.submit: its limits within
// the context's job_max, no dependencies, its caller, and its pinned runner (store's
// SubmitJobs checks that some runner serves the others: a job no runner could ever
// take fails at once, storing nothing).
func standaloneJob(ctx context.Context, p Principal, c *model.Context, db *store.DB, in *jobIn, ctxID uint32) (*model.Job, error) {
	j, err := in.toModel(ctxID)
	if err != nil {
		return nil, err
	}
	if err := checkLimits(c, j); err != nil {
		return nil, err
	}
	if len(j.Dependends) > 0 {
		return nil, invalidParams("job.depends", "a standalone job cannot depend on other jobs; use a flow")
	}
	if j.CallerID, err = callerFor(p, j.CallerID, "job"); err != nil {
		return nil, err
	}
	if err := j.Validate(); err != nil { // also fills script_type from an executor prefix
		return nil, err
	}
	if j.RunnerID != 0 {
		r, err := db.LoadRunner(ctx, j.RunnerID)
		if err != nil {
			return nil, invalidParams("job.runner_id", "runner %d does not exist in context %d", j.RunnerID, ctxID)
		}
		if !r.Local {
			return nil, invalidParams("job.runner_id", "runner %d is not local: remote runners need the mycelium-gateway", j.RunnerID)
		}
	}
	return j, nil
}

func (s *service) jobLoad(ctx context.Context, p Principal, in jobRefParams) (*model.Job, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "job.load")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	return db.LoadJob(ctx, in.CallerID, in.ID)
}

func (s *service) jobList(ctx context.Context, p Principal, in listParams) (*listResult[*model.Job], error) {
	return listPage(ctx, s, p, in, "job.list", byStatus(keys.JobIndex, in.Status, model.ParseJobStatus), (*store.DB).LoadJobMembers)
}

func (s *service) jobRun(ctx context.Context, p Principal, in jobRunParams) (*model.Job, error) {
	if in.Job == nil {
		return nil, invalidParams("job", "job is required")
	}
	// Created and dispatched in one step (as job.submit, in its group commit), then
	// watched: a job that ended before the watch began wakes it at once (the waiter
	// keeps recent ends). The end's notice is listened for before the submission
	// (coord:jobdone is followed only while such calls wait). The job is stored
	// awaited: the runner's finish tells its successful end with its hash, which the
	// call answers with, without reading the job again.
	if s.jobDone != nil {
		defer s.jobDone.need(ctx)()
	}
	sub, err := s.submit(ctx, p, in.ContextID, []submitItem{{Job: in.Job, awaited: true}}, "job.run", "")
	if err != nil {
		return nil, err
	}
	db, err := s.store.Ctx(in.ContextID)
	if err != nil {
		return nil, err
	}
	created := sub[0].Job
	wait := time.Duration(created.Timeout)*time.Second + s.runMargin
	if created.Timeout == 0 {
		wait = 5*time.Minute + s.runMargin
	}
	if in.Timeout != nil {
		wait = time.Duration(*in.Timeout) * time.Second
	}
	ref := created.Ref()
	done := s.waiter.watch(jobKey(ref))
	defer s.waiter.unwatch(jobKey(ref), done)
	if sub[0].Existing && jobFinal(created) {
		return created, nil // a job created before with the same id, and ended (read whole by the submission)
	}
	if sub[0].Existing && created.Status != model.JobStarted {
		// job.run of a job created before with the same id: dispatched now, as before.
		if _, err := s.scheduler.DispatchJob(ctx, &herov1.DispatchJobRequest{ContextId: in.ContextID, CallerId: created.CallerID, JobId: created.ID, Actor: p.Name()}); err != nil {
			return nil, err
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	safety := time.NewTicker(5 * time.Second) // a missed notification (pub/sub reconnect) costs at most this
	defer safety.Stop()
	for {
		select {
		case <-safety.C:
			if j, err := db.LoadJob(ctx, created.CallerID, created.ID); err == nil && jobFinal(j) {
				return j, nil
			}
		case <-done.C:
			if h := s.waiter.hashOf(done); h != nil {
				if j, err := db.JobFromPairs(created.CallerID, created.ID, h); err == nil && j.Status.Terminal() {
					return j, nil
				}
			}
			j, err := s.loadEnded(ctx, db, created)
			if err != nil {
				return nil, err
			}
			if j.Status.Terminal() {
				return j, nil
			}
		case <-t.C:
			return nil, &apiError{Code: codeTimeout, Msg: fmt.Sprintf("job %s did not end within %v; it goes on: follow it with job.load", keys.Job(created.CallerID, created.ID), wait),
				Data: map[string]any{"job_key": keys.Job(created.CallerID, created.ID), "context_id": in.ContextID, "caller_id": created.CallerID, "id": created.ID}}
		case <-ctx.Done():
			return nil, &apiError{Code: codeTimeout, Msg: "request cancelled while waiting for job " + keys.Job(created.CallerID, created.ID)}
		}
	}
}

// jobFinal reports whether a job has ended for good (no retry will follow).
func jobFinal(j *model.Job) bool {
	switch j.Status {
	case model.JobFinished:
		return true
	case model.JobError:
		return j.Fatal || j.StopAsked || j.Attempt > uint32(j.Retries)
	}
	return false
}

// loadEnded reads job j of db, whose done notice came: with the calls the same notice
// woke, in one round trip (endedLoads); on its own once they shut down (a call whose
// job ended is answered with it, not refused: its retry would run the job again).
func (s *service) loadEnded(ctx context.Context, db *store.DB, j *model.Job) (*model.Job, error) {
	if s.loads != nil {
		got, err := s.loads.load(ctx, model.JobRef{ContextID: db.ContextID, CallerID: j.CallerID, ID: j.ID})
		if err != errShuttingDown {
			return got, err
		}
	}
	return db.LoadJob(ctx, j.CallerID, j.ID)
}

func (s *service) jobStop(ctx context.Context, p Principal, in jobRefParams) (*model.Job, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, "job.stop")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	// A delayed job not yet dispatched ends at once, never run (store.CancelScheduled).
	if ok, _, err := db.CancelScheduled(ctx, in.CallerID, in.ID, p.Name()); err != nil {
		return nil, err
	} else if ok {
		return db.LoadJob(ctx, in.CallerID, in.ID)
	}
	if _, _, err := db.RequestStop(ctx, in.CallerID, in.ID, p.Name()); err != nil {
		return nil, err
	}
	return db.LoadJob(ctx, in.CallerID, in.ID)
}

func (s *service) jobLogs(ctx context.Context, p Principal, in jobRefParams) (*logsResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "job.logs")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	if in.Offset < 0 {
		return nil, invalidParams("offset", "offset must not be negative")
	}
	j, err := db.LoadJob(ctx, in.CallerID, in.ID)
	if err != nil {
		return nil, err
	}
	b, next, err := db.ReadLog(ctx, in.CallerID, in.ID, in.Offset, 1<<20)
	if err != nil {
		return nil, err
	}
	return &logsResult{Logs: string(b), NextOffset: next, Complete: j.Status.Terminal() && len(b) < 1<<20}, nil
}

func (s *service) jobDelete(ctx context.Context, p Principal, in deleteJobParams) (*deleteResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "job.delete")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	if err := db.DeleteJob(ctx, in.CallerID, in.ID, in.Force, p.Name()); err != nil {
		return nil, err
	}
	return &deleteResult{Deleted: true}, nil
}

func jobInFromPB(j *herov1.Job) *jobIn {
	if j == nil {
		return nil
	}
	in := &jobIn{}
	jobInFromPBInto(in, j)
	return in
}

// jobInFromPBInto sets in to j as jobInFromPB makes it (a stream's batch makes its
// submissions' jobs in one allocation).
func jobInFromPBInto(in *jobIn, j *herov1.Job) {
	*in = jobIn{ID: j.Id, CallerID: j.CallerId, ContextID: j.ContextId, Script: j.Script, ScriptType: j.ScriptType, Timeout: j.Timeout,
		Retries: j.Retries, EnvVars: j.EnvVars, Prerequisites: j.Prerequisites, Dependends: j.Dependends, RunnerID: j.RunnerId,
		FunctionName: j.FunctionName, Args: json.RawMessage(j.Args), Kwargs: json.RawMessage(j.Kwargs), Limits: protoconv.LimitsFromPB(j.Limits), Priority: j.Priority,
		ConcurrencyKey: j.ConcurrencyKey, ConcurrencyLimit: j.ConcurrencyLimit, ConcurrencyPolicy: j.ConcurrencyPolicy}
}

func (c *coordinatorServer) GetJob(ctx context.Context, r *herov1.GetJobRequest) (*herov1.GetJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetJobResponse, error) {
		x, err := c.s.jobLoad(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		return &herov1.GetJobResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) ListJobs(ctx context.Context, r *herov1.ListJobsRequest) (*herov1.ListJobsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListJobsResponse, error) {
		x, err := c.s.jobList(ctx, p, listParams{ContextID: r.ContextId, Limit: int(r.Limit), Cursor: r.Cursor, Status: r.Status})
		if err != nil {
			return nil, err
		}
		return &herov1.ListJobsResponse{Jobs: pbItems(x.Items, protoconv.JobToPB), NextCursor: x.NextCursor}, nil
	})
}

func (c *coordinatorServer) RunJob(ctx context.Context, r *herov1.RunJobRequest) (*herov1.RunJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.RunJobResponse, error) {
		in := jobRunParams{ContextID: r.ContextId, Job: jobInFromPB(r.Job)}
		if r.Timeout > 0 {
			t := r.Timeout
			in.Timeout = &t
		}
		x, err := c.s.jobRun(ctx, p, in)
		return &herov1.RunJobResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) StopJob(ctx context.Context, r *herov1.StopJobRequest) (*herov1.StopJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.StopJobResponse, error) {
		x, err := c.s.jobStop(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		return &herov1.StopJobResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) GetJobLogs(ctx context.Context, r *herov1.GetJobLogsRequest) (*herov1.GetJobLogsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetJobLogsResponse, error) {
		x, err := c.s.jobLogs(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id, Offset: r.Offset})
		if err != nil {
			return nil, err
		}
		return &herov1.GetJobLogsResponse{Logs: x.Logs, NextOffset: x.NextOffset, Complete: x.Complete}, nil
	})
}

func (c *coordinatorServer) DeleteJob(ctx context.Context, r *herov1.DeleteJobRequest) (*herov1.DeleteResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DeleteResponse, error) {
		_, err := c.s.jobDelete(ctx, p, deleteJobParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id, Force: r.Force})
		return &herov1.DeleteResponse{Deleted: err == nil}, err
	})
}
