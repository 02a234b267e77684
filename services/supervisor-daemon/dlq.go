package main

import (
	"context"
	"fmt"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The dead-letter queue: dlq.list, dlq.show, dlq.requeue, dlq.purge and their gRPC
// methods.

// dlqEntry is a dead-letter queue entry as the API lists it.
type dlqEntry = model.DLQEntry

type dlqShowResult struct {
	Entry dlqEntry   `json:"entry"`
	Job   *model.Job `json:"job"`
}

type dlqPurgeParams struct {
	ContextID uint32 `json:"context_id"`
	CallerID  uint32 `json:"caller_id"`
	ID        uint32 `json:"id"`
}

type purgeResult struct {
	Purged int64 `json:"purged"`
}

func entryOf(j *model.Job) dlqEntry {
	return dlqEntry{CallerID: j.CallerID, ID: j.ID, FlowID: j.FlowID, Error: j.Error, Attempt: j.Attempt, DLQAtMs: j.DLQAtMs,
		ScriptType: string(j.ScriptType), FunctionName: j.FunctionName}
}

func (s *service) dlqList(ctx context.Context, p Principal, in listParams) (*listResult[dlqEntry], error) {
	return listPage(ctx, s, p, in, "dlq.list", allOf(keys.DLQ), loadEntries)
}

// loadEntries loads the entries of a page of the dead-letter queue (members:
// "<caller>:<id>").
func loadEntries(db *store.DB, ctx context.Context, members []string) ([]dlqEntry, error) {
	jobs, err := db.LoadJobMembers(ctx, members)
	if err != nil {
		return nil, err
	}
	return pbItems(jobs, entryOf), nil
}

func (s *service) dlqJob(ctx context.Context, p Principal, in jobRefParams, need Role, method string) (*model.Job, *store.DB, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, need, method)
	if err != nil {
		return nil, nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, nil, invalidParams("id", "caller_id and id are required")
	}
	in2, err := db.DLQHas(ctx, in.CallerID, in.ID)
	if err != nil {
		return nil, nil, err
	}
	if !in2 {
		return nil, nil, &apiError{Code: codeNotFound, Msg: fmt.Sprintf("job %d of caller %d is not in the dead-letter queue of context %d", in.ID, in.CallerID, in.ContextID)}
	}
	j, err := db.LoadJob(ctx, in.CallerID, in.ID)
	return j, db, err
}

func (s *service) dlqShow(ctx context.Context, p Principal, in jobRefParams) (*dlqShowResult, error) {
	j, _, err := s.dlqJob(ctx, p, in, RoleReader, "dlq.show")
	if err != nil {
		return nil, err
	}
	return &dlqShowResult{Entry: entryOf(j), Job: j}, nil
}

// dlqRequeue runs a dead-lettered job again with a fresh attempt count: a standalone
// job is dispatched again (store.RequeueJob); a flow's job re-runs through flow.retry
// of its flow.
func (s *service) dlqRequeue(ctx context.Context, p Principal, in jobRefParams) (*model.Job, error) {
	j, db, err := s.dlqJob(ctx, p, in, RoleExecutor, "dlq.requeue")
	if err != nil {
		return nil, err
	}
	if j.FlowID != 0 {
		if _, err := s.scheduler.RetryFlow(ctx, &herov1.SchedulerRetryFlowRequest{ContextId: in.ContextID, FlowId: j.FlowID, Actor: p.Name()}); err != nil {
			return nil, err
		}
		return db.LoadJob(ctx, in.CallerID, in.ID)
	}
	// out of the DLQ, reset and dispatched in one step (it was a reset here and a
	// dispatch by the scheduler: one out of reach left the job out of the DLQ, never run)
	if _, err := db.RequeueJob(ctx, j, p.Name()); err != nil {
		return nil, err
	}
	return db.LoadJob(ctx, in.CallerID, in.ID)
}

func (s *service) dlqPurge(ctx context.Context, p Principal, in dlqPurgeParams) (*purgeResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "dlq.purge")
	if err != nil {
		return nil, err
	}
	var members []string
	if in.ID != 0 || in.CallerID != 0 {
		if in.ID == 0 || in.CallerID == 0 {
			return nil, invalidParams("id", "give caller_id and id for one job, or neither for the whole queue")
		}
		members = []string{fmt.Sprintf("%d:%d", in.CallerID, in.ID)}
	}
	n, err := db.DLQPurge(ctx, members, p.Name())
	if err != nil {
		return nil, err
	}
	return &purgeResult{Purged: n}, nil
}

func dlqEntryPB(e dlqEntry) *herov1.DLQEntry {
	return &herov1.DLQEntry{CallerId: e.CallerID, Id: e.ID, FlowId: e.FlowID, Error: e.Error, Attempt: e.Attempt, DlqAtMs: e.DLQAtMs,
		ScriptType: e.ScriptType, FunctionName: e.FunctionName}
}

func (c *coordinatorServer) ListDLQ(ctx context.Context, r *herov1.ListDLQRequest) (*herov1.ListDLQResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListDLQResponse, error) {
		x, err := c.s.dlqList(ctx, p, listParams{ContextID: r.ContextId, Limit: int(r.Limit), Cursor: r.Cursor})
		if err != nil {
			return nil, err
		}
		return &herov1.ListDLQResponse{Entries: pbItems(x.Items, dlqEntryPB), NextCursor: x.NextCursor}, nil
	})
}

func (c *coordinatorServer) ShowDLQ(ctx context.Context, r *herov1.ShowDLQRequest) (*herov1.ShowDLQResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ShowDLQResponse, error) {
		x, err := c.s.dlqShow(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		if err != nil {
			return nil, err
		}
		return &herov1.ShowDLQResponse{Entry: dlqEntryPB(x.Entry), Job: protoconv.JobToPB(x.Job)}, nil
	})
}

func (c *coordinatorServer) RequeueDLQ(ctx context.Context, r *herov1.RequeueDLQRequest) (*herov1.RequeueDLQResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.RequeueDLQResponse, error) {
		x, err := c.s.dlqRequeue(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		return &herov1.RequeueDLQResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) PurgeDLQ(ctx context.Context, r *herov1.PurgeDLQRequest) (*herov1.PurgeDLQResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.PurgeDLQResponse, error) {
		x, err := c.s.dlqPurge(ctx, p, dlqPurgeParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		if err != nil {
			return nil, err
		}
		return &herov1.PurgeDLQResponse{Purged: x.Purged}, nil
	})
}
