package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/hero-coordinator/hero/lib/keys"
)

// deleteFlowChunk is how many jobs (and messages) of a flow one call of DeleteFlow's
// chunked deletion removes: a large flow's deletion (flow.delete, retention) is many
// short Redis calls, never one that holds Redis for the whole flow. A job costs a call
// ~15 Redis commands (its keys, its messages, its queue and index entries), as many as
// a cancel's node: the cancel's and the start's chunk (startChunk) bounds it too.
const deleteFlowChunk = startChunk

// FlowDeleting is the status a start reports (StartFlow's status, started false) of a
// flow being deleted in chunks: lua/flow_delete_chunk.lua marks it (its field
// deleting), and the start's scripts refuse it.
const FlowDeleting = "deleting"

// deleteFlowJobs deletes the jobs and messages of a flow of more than deleteFlowChunk
// jobs a chunk a call (flow_delete_chunk.lua), the last call emptying its job list,
// so that the delete_flow call that follows removes only the flow's own keys. A
// smaller flow is left to delete_flow whole. A call that fails stops it: what was
// deleted stays deleted, and the next DeleteFlow goes on with the rest. With ended,
// each call deletes only while the flow is ended (ok false: it is not).
func (d *DB) deleteFlowJobs(ctx context.Context, flowID uint32, force, ended bool) (ok bool, err error) {
	v, err := d.hmget(ctx, keys.Flow(flowID), "jobs", "caller_id")
	if err != nil {
		return false, fmt.Errorf("flow %d in context %d: %w", flowID, d.ContextID, err)
	}
	raw, _ := v[0].(string)
	caller, _ := v[1].(string)
	if len(raw) < deleteFlowChunk*2 { // fewer than deleteFlowChunk ids, at once
		return true, nil
	}
	var jobs []uint32
	if err := json.Unmarshal([]byte(raw), &jobs); err != nil {
		return false, fmt.Errorf("flow %d in context %d: its jobs: %w", flowID, d.ContextID, err)
	}
	if len(jobs) <= deleteFlowChunk {
		return true, nil
	}
	what := fmt.Sprintf("flow %d in context %d", flowID, d.ContextID)
	chunk := func(ids []string) (int64, error) {
		r, err := (&flowDeleteChunkArgs{FlowKey: keys.Flow(flowID), MsgsKey: keys.FlowMessages(flowID), Ctx: idArg(d.ContextID), FlowID: idArg(flowID),
			Force: force, Ended: ended, Caller: caller, Nmsgs: deleteFlowChunk, IDs: ids}).run(ctx, d)
		if err != nil {
			return 0, scriptErr(err, what)
		}
		return r.MsgsLeft, nil
	}
	for from := 0; from < len(jobs); from += deleteFlowChunk {
		part := jobs[from:min(from+deleteFlowChunk, len(jobs))]
		ids := make([]string, len(part))
		for i, id := range part {
			ids[i] = strconv.FormatUint(uint64(id), 10)
		}
		if left, err := chunk(ids); err != nil || left < 0 {
			return false, err
		}
	}
	for {
		left, err := chunk(nil)
		if err != nil || left < 0 {
			return false, err
		}
		if left == 0 {
			return true, nil
		}
	}
}
