package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/dispatcher"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The Hero Dispatcher protocol's dispatcher side (seed 000; docs/dispatcher.md):
// JSON-RPC methods dispatcher.* and the gRPC service hero.v1.Dispatcher, both on one
// implementation over lib/dispatcher's Client. The protocol has no contexts, so every
// method needs the operator secret.

// dispatcherService implements the dispatcher.* methods.
type dispatcherService struct {
	c         *dispatcher.Client
	runMargin time.Duration
}

// newDispatcherService connects to the dispatcher DB (--dispatcher-db) of the
// --redis-url server (base: the store's connection options).
func newDispatcherService(ctx context.Context, dc *dispatcher.ClientConfig, common *config.Common, base *redis.Options, runMargin time.Duration, reg prometheus.Registerer) (*dispatcherService, error) {
	c, err := dc.Open(ctx, base, common.RedisPoolSize, common.RedisConnectTimeout, reg)
	if err != nil {
		return nil, err
	}
	return &dispatcherService{c: c, runMargin: runMargin}, nil
}

// Close closes the dispatcher's Redis connection.
func (d *dispatcherService) Close() { _ = d.c.Close() }

// ---- parameters and results (docs/dispatcher.md) ----

type dispatcherListParams struct {
	Cursor string `json:"cursor"`
	Limit  int    `json:"limit"`
}

type dispatcherIDParams struct {
	ID string `json:"id"`
}

type dispatcherJobIn struct {
	ID            string            `json:"id"`
	CallerID      string            `json:"caller_id"`
	WorkerID      string            `json:"worker_id"`
	ContextID     string            `json:"context_id"`
	Script        string            `json:"script"`
	Timeout       uint64            `json:"timeout"`
	Retries       uint8             `json:"retries"`
	Concurrent    bool              `json:"concurrent"`
	LogPath       string            `json:"log_path"`
	EnvVars       map[string]string `json:"env_vars"`
	Prerequisites []string          `json:"prerequisites"`
	Dependents    []string          `json:"dependents"`
	Dependencies  []string          `json:"dependencies"`
}

type dispatcherRunParams struct {
	Job      *dispatcherJobIn `json:"job"`
	WorkerID string           `json:"worker_id"`
	Timeout  *uint32          `json:"timeout"`
}

type dispatcherListResult struct {
	Items      []string `json:"items"`
	NextCursor string   `json:"next_cursor"`
}

type dispatcherLogsResult struct {
	ID        string `json:"id"`
	Logs      string `json:"logs"`
	Source    string `json:"source"`
	LogPath   string `json:"log_path"`
	FileError string `json:"file_error,omitempty"`
	Truncated bool   `json:"truncated"`
}

type dispatcherStopResult struct {
	ID       string `json:"id"`
	WorkerID string `json:"worker_id"`
	Status   string `json:"status"`
}

type dispatcherRunResult struct {
	Job   *dispatcher.Job `json:"job"`
	Reply string          `json:"reply"`
}

// dispatcherError maps the client's errors onto API errors.
func dispatcherError(err error) error {
	var ij *dispatcher.InvalidJobError
	var te *dispatcher.TimeoutError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ij):
		return invalidParams("job."+ij.Field, "%s", ij.Msg)
	case errors.As(err, &te):
		return &apiError{Code: codeTimeout, Msg: te.Error(), Data: map[string]any{"id": te.ID}}
	case errors.Is(err, dispatcher.ErrNotFound):
		return &apiError{Code: codeNotFound, Msg: err.Error()}
	}
	return err
}

func checkDispatcherID(id string) error {
	if strings.TrimSpace(id) == "" {
		return invalidParams("id", "id is required")
	}
	return nil
}

// ---- methods ----

func (d *dispatcherService) listJobs(ctx context.Context, p Principal, in dispatcherListParams) (*dispatcherListResult, error) {
	if err := requireOperator(p, "dispatcher.list_jobs"); err != nil {
		return nil, err
	}
	var cursor uint64
	if in.Cursor != "" {
		c, err := strconv.ParseUint(in.Cursor, 10, 64)
		if err != nil {
			return nil, invalidParams("cursor", "cursor %q is not a next_cursor of this method", in.Cursor)
		}
		cursor = c
	}
	if in.Limit < 0 || in.Limit > 10000 {
		return nil, invalidParams("limit", "limit must be from 0 to 10000")
	}
	ids, next, err := d.c.ListJobs(ctx, cursor, int64(in.Limit))
	if err != nil {
		return nil, err
	}
	out := &dispatcherListResult{Items: ids}
	if out.Items == nil {
		out.Items = []string{}
	}
	if next != 0 {
		out.NextCursor = strconv.FormatUint(next, 10)
	}
	return out, nil
}

func (d *dispatcherService) jobStatus(ctx context.Context, p Principal, in dispatcherIDParams) (*dispatcher.Job, error) {
	if err := requireOperator(p, "dispatcher.job_status"); err != nil {
		return nil, err
	}
	if err := checkDispatcherID(in.ID); err != nil {
		return nil, err
	}
	j, err := d.c.JobStatus(ctx, in.ID)
	return j, dispatcherError(err)
}

func (d *dispatcherService) jobLogs(ctx context.Context, p Principal, in dispatcherIDParams) (*dispatcherLogsResult, error) {
	if err := requireOperator(p, "dispatcher.job_logs"); err != nil {
		return nil, err
	}
	if err := checkDispatcherID(in.ID); err != nil {
		return nil, err
	}
	l, err := d.c.JobLogs(ctx, in.ID)
	if err != nil {
		return nil, dispatcherError(err)
	}
	text, src := l.Text()
	return &dispatcherLogsResult{ID: l.ID, Logs: text, Source: src, LogPath: l.LogPath, FileError: l.FileError, Truncated: l.FileRead && l.Truncated}, nil
}

func (d *dispatcherService) stopJob(ctx context.Context, p Principal, in dispatcherIDParams) (*dispatcherStopResult, error) {
	if err := requireOperator(p, "dispatcher.stop_job"); err != nil {
		return nil, err
	}
	if err := checkDispatcherID(in.ID); err != nil {
		return nil, err
	}
	w, err := d.c.StopJob(ctx, in.ID)
	if err != nil {
		return nil, dispatcherError(err)
	}
	out := &dispatcherStopResult{ID: in.ID, WorkerID: w}
	if j, err := d.c.JobStatus(ctx, in.ID); err == nil {
		out.Status = string(j.Status)
	}
	return out, nil
}

func (d *dispatcherService) runJob(ctx context.Context, p Principal, in dispatcherRunParams) (*dispatcherRunResult, error) {
	if err := requireOperator(p, "dispatcher.run_job"); err != nil {
		return nil, err
	}
	if in.Job == nil {
		return nil, invalidParams("job", "job is required")
	}
	j := &dispatcher.Job{
		ID: in.Job.ID, CallerID: in.Job.CallerID, WorkerID: in.Job.WorkerID, ContextID: in.Job.ContextID, Script: in.Job.Script,
		Timeout: time.Duration(in.Job.Timeout) * time.Second, Retries: int(in.Job.Retries), Concurrent: in.Job.Concurrent,
		LogPath: in.Job.LogPath, EnvVars: in.Job.EnvVars, Prerequisites: in.Job.Prerequisites, Dependents: in.Job.Dependents,
		Dependencies: in.Job.Dependencies,
	}
	if in.Job.Timeout > 365*24*3600 {
		return nil, invalidParams("job.timeout", "job.timeout must be at most a year")
	}
	if in.WorkerID == "" && j.WorkerID == "" {
		return nil, invalidParams("worker_id", "worker_id (or job.worker_id) is required")
	}
	wait := j.Timeout + d.runMargin
	if j.Timeout == 0 {
		wait = 5*time.Minute + d.runMargin
	}
	if in.Timeout != nil {
		if *in.Timeout == 0 {
			return nil, invalidParams("timeout", "timeout must be at least 1 second")
		}
		wait = time.Duration(*in.Timeout) * time.Second
	}
	res, err := d.c.RunJobAndAwaitResult(ctx, j, in.WorkerID, wait)
	if err != nil {
		return nil, dispatcherError(err)
	}
	return &dispatcherRunResult{Job: res.Job, Reply: res.Reply}, nil
}

// ---- gRPC: hero.v1.Dispatcher ----

// dispatcherServer serves hero.v1.Dispatcher on top of dispatcherService.
type dispatcherServer struct {
	herov1.UnimplementedDispatcherServer
	d *dispatcherService
}

func dispatcherJobToPB(j *dispatcher.Job) *herov1.DispatcherJob {
	if j == nil {
		return nil
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return dispatcher.FormatTime(t)
	}
	timeout, _ := strconv.ParseUint(dispatcher.FormatTimeout(j.Timeout), 10, 32)
	return &herov1.DispatcherJob{
		Id: j.ID, CallerId: j.CallerID, WorkerId: j.WorkerID, ContextId: j.ContextID, Script: j.Script, Timeout: uint32(timeout),
		Retries: uint32(j.Retries), Concurrent: j.Concurrent, LogPath: j.LogPath, CreatedAt: ts(j.CreatedAt), UpdatedAt: ts(j.UpdatedAt),
		Status: string(j.Status), EnvVars: j.EnvVars, Prerequisites: j.Prerequisites, Dependents: j.Dependents,
		Output: j.Output, Error: j.Error, Dependencies: j.Dependencies,
	}
}

func (s *dispatcherServer) ListJobs(ctx context.Context, r *herov1.DispatcherListJobsRequest) (*herov1.DispatcherListJobsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DispatcherListJobsResponse, error) {
		x, err := s.d.listJobs(ctx, p, dispatcherListParams{Cursor: r.Cursor, Limit: int(r.Limit)})
		if err != nil {
			return nil, err
		}
		return &herov1.DispatcherListJobsResponse{Ids: x.Items, NextCursor: x.NextCursor}, nil
	})
}

func (s *dispatcherServer) JobStatus(ctx context.Context, r *herov1.DispatcherJobStatusRequest) (*herov1.DispatcherJobStatusResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DispatcherJobStatusResponse, error) {
		j, err := s.d.jobStatus(ctx, p, dispatcherIDParams{ID: r.Id})
		if err != nil {
			return nil, err
		}
		return &herov1.DispatcherJobStatusResponse{Job: dispatcherJobToPB(j)}, nil
	})
}

func (s *dispatcherServer) JobLogs(ctx context.Context, r *herov1.DispatcherJobLogsRequest) (*herov1.DispatcherJobLogsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DispatcherJobLogsResponse, error) {
		x, err := s.d.jobLogs(ctx, p, dispatcherIDParams{ID: r.Id})
		if err != nil {
			return nil, err
		}
		return &herov1.DispatcherJobLogsResponse{Id: x.ID, Logs: x.Logs, Source: x.Source, LogPath: x.LogPath, FileError: x.FileError, Truncated: x.Truncated}, nil
	})
}

func (s *dispatcherServer) StopJob(ctx context.Context, r *herov1.DispatcherStopJobRequest) (*herov1.DispatcherStopJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DispatcherStopJobResponse, error) {
		x, err := s.d.stopJob(ctx, p, dispatcherIDParams{ID: r.Id})
		if err != nil {
			return nil, err
		}
		return &herov1.DispatcherStopJobResponse{Id: x.ID, WorkerId: x.WorkerID, Status: x.Status}, nil
	})
}

func (s *dispatcherServer) RunJob(ctx context.Context, r *herov1.DispatcherRunJobRequest) (*herov1.DispatcherRunJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DispatcherRunJobResponse, error) {
		in := dispatcherRunParams{WorkerID: r.WorkerId}
		if r.Timeout != 0 {
			t := r.Timeout
			in.Timeout = &t
		}
		if j := r.Job; j != nil {
			if j.Retries > dispatcher.MaxRetries {
				return nil, invalidParams("job.retries", "job.retries %d is more than %d", j.Retries, dispatcher.MaxRetries)
			}
			in.Job = &dispatcherJobIn{ID: j.Id, CallerID: j.CallerId, WorkerID: j.WorkerId, ContextID: j.ContextId, Script: j.Script,
				Timeout: uint64(j.Timeout), Retries: uint8(j.Retries), Concurrent: j.Concurrent, LogPath: j.LogPath, EnvVars: j.EnvVars,
				Prerequisites: j.Prerequisites, Dependents: j.Dependents, Dependencies: j.Dependencies}
		}
		x, err := s.d.runJob(ctx, p, in)
		if err != nil {
			return nil, err
		}
		return &herov1.DispatcherRunJobResponse{Job: dispatcherJobToPB(x.Job), Reply: x.Reply}, nil
	})
}

// rpcMethods are the JSON-RPC methods dispatcher.*; service.methods() adds them.
func (d *dispatcherService) rpcMethods() map[string]method {
	return map[string]method{
		"dispatcher.list_jobs":  rpcMethod("Hero Dispatcher: one page of job ids (SCAN) (operator only).", "{items: [id], next_cursor}", d.listJobs),
		"dispatcher.job_status": rpcMethod("Hero Dispatcher: a job hash, field by field (operator only).", "DispatcherJob", d.jobStatus),
		"dispatcher.job_logs":   rpcMethod("Hero Dispatcher: a job's output: log_path file, Redis copy or output (operator only).", "{id, logs, source, log_path, file_error, truncated}", d.jobLogs),
		"dispatcher.stop_job":   rpcMethod("Hero Dispatcher: push the job onto its worker's stop queue (operator only).", "{id, worker_id, status}", d.stopJob),
		"dispatcher.run_job":    rpcMethod("Hero Dispatcher: store and queue a job, wait for its reply (operator only).", "{job: DispatcherJob, reply}", d.runJob),
	}
}
