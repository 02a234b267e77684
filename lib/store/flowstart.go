package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// startChunk is the most nodes one call of a large flow's start writes: a flow of more
// jobs is started in chunks (flow_start_begin, flow_start_chunk per startChunk nodes,
// flow_start_commit), so that no call holds Redis for the whole flow; a smaller one
// by one start_flow call. A call of 250 nodes took 6–13 ms of Redis (T40, idle:
// BenchmarkBigFlowLifecycle), against the 10 ms that no Redis command may take (issue
// 49): a call of 100 stays near 3 ms, with room for a loaded machine.
const startChunk = 100

// startPipeline is how many chunk calls of a large flow's start go in one round trip
// (pipelined, as ReleaseDependents' calls: each call atomic and short, and other
// clients' commands run between them): the smaller chunks take no more round trips
// than before.
const startPipeline = 4

// startFlowChunked is StartFlow for a flow of more than startChunk jobs. The flow
// stays dispatched (or scheduled) until the last call marks it started: a start
// interrupted midway leaves it so, and flow.start begins it again; a start begun
// again meanwhile by another call takes over (its token), and this one reports the
// flow as it is (started=false, its status dispatched or scheduled).
func (d *DB) startFlowChunked(ctx context.Context, f *model.Flow, jobs []*model.Job, dependents map[uint32][]uint32, actor string) (ready []uint32, status string, started bool, err error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", false, fmt.Errorf("start flow %d: token: %w", f.ID, err)
	}
	token := hex.EncodeToString(b[:])
	what := fmt.Sprintf("flow %d in context %d", f.ID, d.ContextID)
	res, err := (&flowStartBeginArgs{FlowKey: keys.Flow(f.ID), DagKey: keys.DAG(f.ID), ResultsKey: keys.FlowResults(f.ID),
		Caller: int64(f.CallerID), Total: int64(len(jobs)), Token: token}).run(ctx, d)
	if err != nil {
		return nil, "", false, startErr(err, what)
	}
	if vals := res.([]any); len(vals) > 1 {
		st, _ := vals[1].(string)
		return nil, st, false, nil
	}
	now := time.Now()
	calls := make([]Call, 0, startPipeline)
	// send runs the calls gathered; false when one changed nothing (the flow is not
	// dispatched any more, or another start took over: the commit says which)
	send := func() (bool, error) {
		for _, cmd := range d.EvalBatch(ctx, calls) {
			res, err := cmd.Result()
			var ok int64
			if err == nil {
				ok, err = decodeFlowStartChunkReply(res)
			}
			if err != nil {
				return false, startErr(err, what)
			}
			if ok == 0 {
				return false, nil
			}
		}
		calls = calls[:0]
		return true, nil
	}
	for from := 0; from < len(jobs); from += startChunk {
		part := jobs[from:min(from+startChunk, len(jobs))]
		a := &flowStartChunkArgs{FlowKey: keys.Flow(f.ID), DagKey: keys.DAG(f.ID), Caller: int64(f.CallerID), NowS: now.Unix(), NowMs: now.UnixMilli(),
			Token: token, Nodes: make([]flowStartChunkNode, len(part))}
		for i, j := range part {
			a.Nodes[i] = flowStartChunkNode{ID: int64(j.ID), Dependents: jsonIDs(dependents[j.ID]), N: int64(len(j.Dependends)), Ran: ranBefore(j)}
			if len(j.Dependends) == 0 {
				ready = append(ready, j.ID)
			}
		}
		if calls = append(calls, a.call()); len(calls) < startPipeline && from+startChunk < len(jobs) {
			continue
		}
		more, err := send()
		if err != nil {
			return nil, "", false, err
		}
		if !more {
			break // the commit says why
		}
	}
	res, err = (&flowStartCommitArgs{FlowKey: keys.Flow(f.ID), DagKey: keys.DAG(f.ID), EventsKey: keys.Events, Ctx: int64(d.ContextID), Flow: int64(f.ID),
		Caller: int64(f.CallerID), NowS: now.Unix(), NowMs: now.UnixMilli(), Actor: actor, Token: token}).run(ctx, d)
	if err != nil {
		return nil, "", false, startErr(err, what)
	}
	vals := res.([]any)
	if n, _ := vals[0].(int64); n != 1 {
		st, _ := vals[1].(string)
		return nil, st, false, nil
	}
	return ready, string(model.FlowStarted), true, nil
}

func startErr(err error, what string) error {
	if strings.HasPrefix(err.Error(), "NOTFOUND") {
		return notFound("%s", what)
	}
	return fmt.Errorf("start %s: %w", what, err)
}
