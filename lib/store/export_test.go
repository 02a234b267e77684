package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// EventsOfEntries is eventsOf (every event of the entries), for the tests that read the
// stream's entries themselves.
func EventsOfEntries(ctxID uint32, msgs []redis.XMessage) []Event {
	return eventsOf(ctxID, msgs, "", 0)
}

// RequestFields is requestFields, for the tests of the scripts that write request
// messages themselves.
var RequestFields = requestFields

// ReleaseBatch is releaseBatch, for the tests of a big fan-out's release.
const ReleaseBatch = releaseBatch

// StartChunk is startChunk, for the tests of a large flow's start.
const StartChunk = startChunk

// StartPart makes the first call of a large flow's chunked start (token's) and writes
// its first chunk, as a start interrupted after them leaves the flow; chunk writes
// the chunk again, as a call of that start that comes late would.
func (d *DB) StartPart(ctx context.Context, f *model.Flow, jobs []*model.Job, dependents map[uint32][]uint32, token string) (chunk func() (int64, error), err error) {
	if _, err := (&flowStartBeginArgs{FlowKey: keys.Flow(f.ID), DagKey: keys.DAG(f.ID), ResultsKey: keys.FlowResults(f.ID),
		Caller: int64(f.CallerID), Total: int64(len(jobs)), Token: token}).run(ctx, d); err != nil {
		return nil, err
	}
	a := &flowStartChunkArgs{FlowKey: keys.Flow(f.ID), DagKey: keys.DAG(f.ID), Caller: int64(f.CallerID), NowS: 1, NowMs: 1000, Token: token}
	for _, j := range jobs[:startChunk] {
		a.Nodes = append(a.Nodes, flowStartChunkNode{ID: int64(j.ID), Dependents: jsonIDs(dependents[j.ID]), N: int64(len(j.Dependends))})
	}
	chunk = func() (int64, error) { return a.run(ctx, d) }
	_, err = chunk()
	return chunk, err
}

// BeginFlowRun begins the creation of a flow's schedule's run for a tick as
// MakeFlowRun does (lua/sched_flow.lua) and goes no further, as a scheduler killed
// right after leaves it: the state ("begun", …) and the flow's id.
func (s *Store) BeginFlowRun(ctx context.Context, sc *model.Schedule, tick time.Time) (string, uint32, error) {
	db, err := s.Ctx(sc.ContextID)
	if err != nil {
		return "", 0, err
	}
	r, err := (&schedFlowArgs{UniqueKey: keys.Unique(RunUniqueKey(sc.ContextID, sc.ID, tick)), FlowSeqKey: keys.FlowSeq, JobSeqKey: keys.JobSeq(sc.CallerID),
		Ctx: idArg(sc.ContextID), Caller: idArg(sc.CallerID), N: int64(len(sc.Flow.Jobs)), TTLMs: scheduleStageTTL.Milliseconds(), NowMs: time.Now().UnixMilli(),
		UniqueTTLMs: RunUniqueTTL.Milliseconds()}).run(ctx, db)
	return r.State, parseU32(r.Run), err
}

// CancelChunk is cancelChunk, for the tests of a large flow's cancel and retry in
// chunks.
const CancelChunk = cancelChunk

// CancelPart begins a large flow's cancel in chunks and does its first n chunks, as a
// cancel interrupted after them (its process stopped) leaves it.
func (d *DB) CancelPart(ctx context.Context, flowID uint32, actor string, n int) error {
	w, err := d.loadFlowWork(ctx, flowID, false)
	if err != nil {
		return err
	}
	now := time.Now()
	if _, err := (&flowCancelBeginArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), Ctx: int64(d.ContextID), Flow: int64(flowID),
		Actor: actor, NowS: now.Unix(), NowMs: now.UnixMilli(), Reason: "cancelled by actor " + actor}).run(ctx, d); err != nil {
		return err
	}
	for c := range n {
		from := c * cancelChunk
		if _, err := (&flowCancelChunkArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), ResultsKey: keys.FlowResults(flowID),
			Ctx: int64(d.ContextID), Flow: int64(flowID), NowS: now.Unix(), NowMs: now.UnixMilli(), From: int64(from),
			IDs: idStrings(w.jobs[from : from+cancelChunk])}).run(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// RetryPart begins a large failed flow's retry in chunks and does its first n chunks,
// as a retry interrupted after them leaves it; it returns the nodes they made ready.
func (d *DB) RetryPart(ctx context.Context, flowID uint32, n int) ([]uint32, error) {
	w, err := d.loadFlowWork(ctx, flowID, false)
	if err != nil {
		return nil, err
	}
	if _, err := (&flowRetryBeginArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), Ctx: int64(d.ContextID), Flow: int64(flowID)}).run(ctx, d); err != nil {
		return nil, err
	}
	var ready []uint32
	for c := range n {
		from := c * cancelChunk
		now := time.Now()
		r, err := (&flowRetryChunkArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), ResultsKey: keys.FlowResults(flowID),
			NowS: now.Unix(), NowMs: now.UnixMilli(), From: int64(from), IDs: idStrings(w.jobs[from : from+cancelChunk])}).run(ctx, d)
		if err != nil {
			return nil, err
		}
		ready = append(ready, u32s(r.Ready)...)
	}
	return ready, nil
}

// CascadeOnce makes one call of a flow's cascade (lua/flow_cascade_chunk.lua), as a
// scheduler that stopped after it leaves the flow; it returns the items left.
func (d *DB) CascadeOnce(ctx context.Context, flowID uint32) (int64, error) {
	now := time.Now()
	r, err := (&flowCascadeChunkArgs{DagKey: keys.DAG(flowID), FlowKey: keys.Flow(flowID), ResultsKey: keys.FlowResults(flowID), EventsKey: keys.Events,
		Ctx: int64(d.ContextID), Flow: int64(flowID), Actor: "scheduler", NowS: now.Unix(), NowMs: now.UnixMilli()}).run(ctx, d)
	return r.Left, err
}

// CreateBatch is createBatch, for the tests of the create calls' size.
const CreateBatch = createBatch

// FinishApplyRuns is finishApplyRuns, for the tests of the finish calls' size.
const FinishApplyRuns = finishApplyRuns

// MessageHash is message key's hash as a read makes it (a short message expanded:
// expandShort), for the tests that read a message's fields.
func (d *DB) MessageHash(ctx context.Context, key string) map[string]string {
	h, _ := d.HGetAll(ctx, key)
	return d.expandShort(key, h)
}

// FlowJobsPart is flowJobsPart: how many of a flow's jobs one check or link call takes.
const FlowJobsPart = flowJobsPart
