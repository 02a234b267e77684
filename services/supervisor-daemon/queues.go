package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/model"
)

// A context's job queues (docs/scheduling.md, "Pause and resume"): queue.list shows
// each with its depth and pause; queue.pause and queue.resume pause one (a script
// type's or an executor's): no claim takes its jobs while it is paused, the runs under
// way go on.

type queueParams struct {
	ContextID  uint32 `json:"context_id"`
	ScriptType string `json:"script_type,omitempty"`
	Executor   string `json:"executor,omitempty"`
	Note       string `json:"note,omitempty"`
}

type queueListParams struct {
	ContextID uint32 `json:"context_id"`
}

// maxPauseNote bounds a queue pause's note (bytes).
const maxPauseNote = 1000

func (s *service) queuePause(ctx context.Context, p Principal, in queueParams) (*model.Queue, error) {
	return s.queuePauseOp(ctx, p, in, "pause", "queue.pause")
}

func (s *service) queueResume(ctx context.Context, p Principal, in queueParams) (*model.Queue, error) {
	return s.queuePauseOp(ctx, p, in, "resume", "queue.resume")
}

func (s *service) queuePauseOp(ctx context.Context, p Principal, in queueParams, op, method string) (*model.Queue, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, method)
	if err != nil {
		return nil, err
	}
	suffix, err := model.QueueRef{ScriptType: in.ScriptType, Executor: in.Executor}.Suffix()
	if err != nil {
		field := "script_type"
		if in.Executor != "" && in.ScriptType == "" {
			field = "executor"
		}
		return nil, invalidParams(field, "%v", err)
	}
	if len(in.Note) > maxPauseNote {
		return nil, invalidParams("note", "note: at most %d bytes (%d given)", maxPauseNote, len(in.Note))
	}
	changed, err := db.PauseQueue(ctx, suffix, op, p.Name(), in.Note)
	if err != nil {
		return nil, err
	}
	if changed && s.metrics != nil {
		s.metrics.queuePauses.WithLabelValues(op).Inc()
	}
	q, err := db.Queue(ctx, suffix)
	if err != nil {
		return nil, err
	}
	return &q, nil
}

func (s *service) queueList(ctx context.Context, p Principal, in queueListParams) (*listResult[model.Queue], error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "queue.list")
	if err != nil {
		return nil, err
	}
	qs, err := db.Queues(ctx)
	if err != nil {
		return nil, err
	}
	return &listResult[model.Queue]{Items: qs}, nil
}
