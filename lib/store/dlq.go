package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// The dead-letter queue of a context is the zset coord:dlq: "<caller>:<id>" → when the
// job failed for good (ms). The job hash keeps everything else: its last error, its
// attempt count, and dlq_at_ms. Retention deletes the entries with the jobs.

// DLQHas reports whether a job is in the DLQ.
func (d *DB) DLQHas(ctx context.Context, callerID, id uint32) (bool, error) {
	var cmd *redis.FloatCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.ZScore(ctx, keys.DLQ, fmt.Sprintf("%d:%d", callerID, id))
		return nil
	}); err != nil {
		return false, err
	}
	return cmd.Err() == nil, nil
}

// DLQPurge removes entries: the given members, or all of them. The jobs stay (until
// their retention).
func (d *DB) DLQPurge(ctx context.Context, members []string, actor string) (int64, error) {
	var n *redis.IntCmd
	_, err := d.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if len(members) == 0 {
			n = p.ZCard(ctx, keys.DLQ)
			p.Unlink(ctx, keys.DLQ)
		} else {
			args := make([]any, len(members))
			for i, m := range members {
				args[i] = m
			}
			n = p.ZRem(ctx, keys.DLQ, args...)
		}
		AddEvent(ctx, p, &Event{Type: string(model.EventDLQPurged), Actor: actor, Detail: strings.Join(members, ",")})
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n.Val(), nil
}

// RequeueJob runs a dead-lettered standalone job again with a fresh attempt count
// (dlq.requeue): taken out of the DLQ, reset and dispatched in one step (lua/dispatch.lua
// with requeue): a requeue is never left half done. j is the job as loaded (its request
// is made from it). ErrNotFound: no such job; a ConflictError: it is not in the DLQ.
func (d *DB) RequeueJob(ctx context.Context, j *model.Job, actor string) (Dispatched, error) {
	what := fmt.Sprintf("job %d of caller %d in context %d", j.ID, j.CallerID, d.ContextID)
	res, err := d.dispatchMany(ctx, 0, j.CallerID, []*model.Job{j}, actor, 0, "", "", true)
	if err != nil {
		return Dispatched{}, err
	}
	switch r := res[0]; {
	case r.MsgKey != "":
		return r, nil
	case r.Why == "job missing":
		return r, notFound("%s", what)
	default:
		return r, &ConflictError{Msg: fmt.Sprintf("%s is not requeued: %s", what, r.Why)}
	}
}

// RetryFlow re-runs a failed flow's failed and cancelled jobs; it returns the ids of
// the nodes ready to dispatch. A flow of more than cancelChunk jobs is retried in
// chunks (retryFlowChunked), each call short.
func (d *DB) RetryFlow(ctx context.Context, flowID uint32, actor string) ([]uint32, error) {
	w, err := d.loadFlowWork(ctx, flowID, false)
	if err != nil {
		return nil, err
	}
	if w.chunked {
		return d.retryFlowChunked(ctx, flowID, w, actor)
	}
	now := time.Now()
	r, err := (&retryFlowArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), ResultsKey: keys.FlowResults(flowID),
		Ctx: int64(d.ContextID), Flow: int64(flowID), Actor: actor, NowS: now.Unix(), NowMs: now.UnixMilli()}).run(ctx, d)
	if err != nil {
		return nil, scriptErr(err, fmt.Sprintf("flow %d in context %d", flowID, d.ContextID))
	}
	return u32s(r.Ready), nil
}
