package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
)

// cancelChunk is how many jobs of a flow one call of a chunked cancel or retry
// handles: a flow of more is cancelled (CancelFlow) and retried (RetryFlow) in many
// short Redis calls, never one that walks the whole flow; a smaller one in one call
// (cancel_flow, retry_flow). A node costs a cancel about as much as a start (its DAG
// fields, its job's status and index, and an event), so both take the start's chunk
// (startChunk): a call stays well under the 10 ms that no Redis command may take.
const cancelChunk = startChunk

// flowWork is what the chunked cancel and retry read of a flow: its job list, and the
// work under way (the flow's cancelling and retrying fields, "" when none).
type flowWork struct {
	jobs                 []uint32
	cancelling, retrying string
	result               string // the flow's result map (JSON) as it ended
	chunked, inProgress  bool
	cascade              bool // the flow's cascade list holds nodes to examine
}

// loadFlowWork reads a flow's job list and the chunked work under way on it. chunked:
// the flow is more than one chunk (or work in chunks is under way), so its cancel and
// retry go in chunks.
// With light, only the work under way is read (its job list when some is).
func (d *DB) loadFlowWork(ctx context.Context, flowID uint32, light bool) (flowWork, error) {
	var h *redis.SliceCmd
	var n *redis.IntCmd
	fields := []string{"cancelling", "retrying", "jobs", "result"}
	if light {
		fields = fields[:2]
	}
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HMGet(ctx, keys.Flow(flowID), fields...)
		n = p.Exists(ctx, keys.FlowCascade(flowID))
		return nil
	}); err != nil {
		return flowWork{}, fmt.Errorf("flow %d in context %d: %w", flowID, d.ContextID, err)
	}
	v := h.Val()
	w := flowWork{cascade: n.Val() > 0}
	w.cancelling, _ = v[0].(string)
	w.retrying, _ = v[1].(string)
	w.inProgress = w.cancelling != "" || w.retrying != ""
	if light {
		if !w.inProgress {
			return w, nil
		}
		full, err := d.loadFlowWork(ctx, flowID, false)
		full.cascade = full.cascade || w.cascade
		return full, err
	}
	raw, _ := v[2].(string)
	w.result, _ = v[3].(string)
	if len(raw) < cancelChunk*2 && !w.inProgress { // fewer than cancelChunk ids
		return w, nil
	}
	if err := json.Unmarshal([]byte(raw), &w.jobs); err != nil {
		return w, fmt.Errorf("flow %d in context %d: its jobs: %w", flowID, d.ContextID, err)
	}
	w.chunked = len(w.jobs) > cancelChunk || w.inProgress
	return w, nil
}

func idStrings(ids []uint32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatUint(uint64(id), 10)
	}
	return out
}

// cancelFlowChunked is CancelFlow for a flow of more than cancelChunk jobs
// (lua/flow_cancel_begin.lua, then lua/flow_cancel_chunk.lua a chunk a call): the
// cancel is recorded at once (the flow shows cancelled_by and its error; a started
// flow stays started until its nodes are all final, a flow not started is error at
// once), then its jobs are cancelled a chunk a call. A cancel under way (begun by a
// call that stopped: a restart) is taken up where it is.
func (d *DB) cancelFlowChunked(ctx context.Context, flowID uint32, w flowWork, actor, reason string, retention time.Duration) (stopping []uint32, ended bool, err error) {
	now := time.Now()
	what := fmt.Sprintf("flow %d in context %d", flowID, d.ContextID)
	res, err := (&flowCancelBeginArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), Ctx: int64(d.ContextID), Flow: int64(flowID),
		Actor: actor, NowS: now.Unix(), NowMs: now.UnixMilli(), Reason: reason}).run(ctx, d)
	if err != nil {
		return nil, false, scriptErr(err, what)
	}
	vals, _ := res.([]any)
	if len(vals) < 2 {
		return nil, false, fmt.Errorf("cancel %s: unexpected reply %v", what, res)
	}
	if code, _ := vals[0].(int64); code == 0 {
		return nil, true, nil
	}
	at, _ := vals[1].(string)
	stopping, err = d.cancelChunks(ctx, flowID, w.jobs, at, retention)
	return stopping, false, err
}

// cancelChunks cancels a flow's jobs from where its cancel is (at, the flow's
// cancelling: "<done> <mode>"), a chunk a call, to the last. A call that finds the
// cancel elsewhere (another caller goes on with it) stops it.
func (d *DB) cancelChunks(ctx context.Context, flowID uint32, jobs []uint32, at string, retention time.Duration) ([]uint32, error) {
	doneStr, _, _ := strings.Cut(at, " ")
	from, err := strconv.Atoi(doneStr)
	if err != nil || from < 0 {
		return nil, fmt.Errorf("flow %d in context %d: its cancel's position %q", flowID, d.ContextID, at)
	}
	what := fmt.Sprintf("flow %d in context %d", flowID, d.ContextID)
	var stopping []uint32
	for {
		to := min(from+cancelChunk, len(jobs))
		now := time.Now()
		r, err := (&flowCancelChunkArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), ResultsKey: keys.FlowResults(flowID),
			Ctx: int64(d.ContextID), Flow: int64(flowID), NowS: now.Unix(), NowMs: now.UnixMilli(), RetentionMs: retention.Milliseconds(),
			From: int64(min(from, to)), Last: to >= len(jobs), IDs: idStrings(jobs[min(from, to):to])}).run(ctx, d)
		if err != nil {
			return stopping, fmt.Errorf("cancel %s: %w", what, err)
		}
		if r.Done == 0 {
			return stopping, nil
		}
		stopping = append(stopping, u32s(r.Stopping)...)
		if to >= len(jobs) {
			return stopping, nil
		}
		from = to
	}
}

// retryFlowChunked is RetryFlow for a flow of more than cancelChunk jobs
// (lua/flow_retry_begin.lua, lua/flow_retry_chunk.lua a chunk a call,
// lua/flow_retry_commit.lua): the flow stays error, none of its nodes dispatched,
// until the last call starts it again. A retry under way (begun by a call that
// stopped: a restart) is taken up where it is.
func (d *DB) retryFlowChunked(ctx context.Context, flowID uint32, w flowWork, actor string) ([]uint32, error) {
	what := fmt.Sprintf("flow %d in context %d", flowID, d.ContextID)
	res, err := (&flowRetryBeginArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), Ctx: int64(d.ContextID), Flow: int64(flowID)}).run(ctx, d)
	if err != nil {
		return nil, scriptErr(err, what)
	}
	vals, _ := res.([]any)
	if len(vals) < 2 {
		return nil, fmt.Errorf("retry %s: unexpected reply %v", what, res)
	}
	at, _ := vals[1].(string)
	return d.retryChunks(ctx, flowID, w, at, actor)
}

// retryChunks resets a failed flow's nodes from where its retry is (at, the flow's
// retrying), a chunk a call, then starts the flow again; it returns the nodes its
// calls made ready. A call that finds the retry elsewhere (another caller goes on
// with it) stops it.
func (d *DB) retryChunks(ctx context.Context, flowID uint32, w flowWork, at, actor string) ([]uint32, error) {
	from, err := strconv.Atoi(at)
	if err != nil || from < 0 {
		return nil, fmt.Errorf("flow %d in context %d: its retry's position %q", flowID, d.ContextID, at)
	}
	what := fmt.Sprintf("flow %d in context %d", flowID, d.ContextID)
	// the flow's kept results back into the results hash, a part per chunk
	var pairs []any
	if w.result != "" && w.result != "{}" {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(w.result), &m) == nil {
			names := make([]string, 0, len(m))
			for k := range m {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				v := string(m[k])
				var s string
				if json.Unmarshal(m[k], &s) == nil {
					v = s
				}
				pairs = append(pairs, k, v)
			}
		}
	}
	chunks := (len(w.jobs) + cancelChunk - 1) / cancelChunk
	per := 2 * ((len(pairs)/2 + chunks - 1) / max(chunks, 1))
	var ready []uint32
	for from < len(w.jobs) {
		to := min(from+cancelChunk, len(w.jobs))
		var part []any
		if c := from / cancelChunk; per > 0 && c*per < len(pairs) {
			part = pairs[c*per : min((c+1)*per, len(pairs))]
		}
		now := time.Now()
		r, err := (&flowRetryChunkArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), ResultsKey: keys.FlowResults(flowID),
			NowS: now.Unix(), NowMs: now.UnixMilli(), From: int64(from), IDs: idStrings(w.jobs[from:to]), Results: part}).run(ctx, d)
		if err != nil {
			return ready, fmt.Errorf("retry %s: %w", what, err)
		}
		if r.Done == 0 {
			return ready, nil
		}
		ready = append(ready, u32s(r.Ready)...)
		from = to
	}
	now := time.Now()
	ok, err := (&flowRetryCommitArgs{FlowKey: keys.Flow(flowID), DagKey: keys.DAG(flowID), Ctx: int64(d.ContextID), Flow: int64(flowID),
		Actor: actor, NowS: now.Unix(), NowMs: now.UnixMilli(), Total: int64(len(w.jobs)), Nready: int64(len(ready))}).run(ctx, d)
	if err != nil {
		return ready, fmt.Errorf("retry %s: %w", what, err)
	}
	if ok == 0 {
		return nil, nil // another caller went on with it, and dispatches
	}
	return ready, nil
}

// Cascaded is what CascadeFlow did.
type Cascaded struct {
	Status    string // the flow's status when one of the calls ended it, else ""
	Calls     int    // the script calls it took
	Cancelled int    // the nodes its calls cancelled (counted by the calls, not read)
}

// CascadeFlow goes on with the cancel of a flow's nodes that a failure left
// (lib_complete's cascade: the flow's cascade list, coord:cascade:<flow>), a
// CascadeChunk items a call (lua/flow_cascade_chunk.lua), until none is left. A call
// that fails stops it: the list keeps what is left (the scheduler's safety sweep goes
// on with it), and what the calls before it did is returned with the error.
func (d *DB) CascadeFlow(ctx context.Context, flowID uint32, actor string, retention time.Duration) (Cascaded, error) {
	var out Cascaded
	for {
		now := time.Now()
		r, err := (&flowCascadeChunkArgs{DagKey: keys.DAG(flowID), FlowKey: keys.Flow(flowID), ResultsKey: keys.FlowResults(flowID), EventsKey: keys.Events,
			Ctx: int64(d.ContextID), Flow: int64(flowID), Actor: actor, NowS: now.Unix(), NowMs: now.UnixMilli(), RetentionMs: retention.Milliseconds()}).run(ctx, d)
		out.Calls++
		if err != nil {
			return out, fmt.Errorf("cancel the dependents of failed jobs of flow %d in context %d: %w", flowID, d.ContextID, err)
		}
		out.Cancelled += int(r.Cancelled)
		if r.Status != "" {
			out.Status = r.Status
		}
		if r.Left == 0 {
			return out, nil
		}
	}
}

// FlowWork is what ResumeFlowWork did.
type FlowWork struct {
	Cancelled        bool     // a cancel under way was finished
	Retried          bool     // a retry under way was finished
	Cascaded         bool     // a failure's cancel of the nodes after it was finished
	CascadeCancelled int      // the nodes that cascade's calls cancelled
	Ready            []uint32 // the nodes the finished retry's calls made ready, to dispatch
}

// ResumeFlowWork finishes a cancel or a retry in chunks that its caller left under way
// (the flow's cancelling or retrying: the process stopped midway), where it is: the
// scheduler's safety sweep calls it for each active flow. Nothing under way, nothing
// done.
func (d *DB) ResumeFlowWork(ctx context.Context, flowID uint32, actor string, retention time.Duration) (FlowWork, error) {
	w, err := d.loadFlowWork(ctx, flowID, true)
	if err != nil {
		return FlowWork{}, err
	}
	var out FlowWork
	if w.cascade {
		out.Cascaded = true
		c, err := d.CascadeFlow(ctx, flowID, actor, retention)
		out.CascadeCancelled = c.Cancelled
		if err != nil {
			return out, err
		}
	}
	if !w.inProgress {
		return out, nil
	}
	if w.cancelling != "" {
		out.Cancelled = true
		_, err = d.cancelChunks(ctx, flowID, w.jobs, w.cancelling, retention)
		return out, err
	}
	out.Retried = true
	out.Ready, err = d.retryChunks(ctx, flowID, w, w.retrying, actor)
	return out, err
}
