package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// FlowCounts are a flow's node counts, read from the counters its transitions keep
// in its DAG hash (start_flow, lib_complete, cancel_flow, retry_flow): O(1) whatever
// the flow's size. Running is every node not ended (pending, ready, dispatched or
// running). Started is false for a flow never started (no DAG: its counts are 0).
type FlowCounts struct {
	Started   bool `json:"started"`
	Total     int  `json:"total"`
	Ended     int  `json:"ended"`
	Completed int  `json:"completed"`
	Failed    int  `json:"failed"`
	Cancelled int  `json:"cancelled"`
	NotEnded  int  `json:"not_ended"`
}

// LoadFlowCounts reads a flow's counts (FlowCounts) with one HMGET.
func (d *DB) LoadFlowCounts(ctx context.Context, flowID uint32) (FlowCounts, error) {
	v, err := d.hmget(ctx, keys.DAG(flowID), "total", "terminal", "completed", "failed", "cancelled")
	if err != nil {
		return FlowCounts{}, fmt.Errorf("load counts of flow %d: %w", flowID, err)
	}
	n := make([]int, len(v))
	for i, x := range v {
		if s, ok := x.(string); ok {
			n[i], _ = strconv.Atoi(s)
		}
	}
	c := FlowCounts{Started: v[0] != nil, Total: n[0], Ended: n[1], Completed: n[2], Failed: n[3], Cancelled: n[4]}
	c.NotEnded = c.Total - c.Ended
	return c, nil
}

// LoadDAGNodes reads the DAG state of some nodes of a started flow (one HMGET of
// their fields, never the whole hash): a page of flow.dag. ok false: the flow was
// never started (no DAG). Depends holds only what a DAG of an earlier version copied
// (p:): a page takes its nodes' dependencies from their jobs (LoadDAGJobs).
func (d *DB) LoadDAGNodes(ctx context.Context, flowID uint32, ids []uint32) (nodes map[uint32]*DAGNode, ok bool, err error) {
	const per = 5 // s:, a:, e:, p:, d:
	fields := make([]string, 0, 2+per*len(ids))
	fields = append(fields, "caller", "starting")
	for _, id := range ids {
		s := strconv.FormatUint(uint64(id), 10)
		fields = append(fields, "s:"+s, "a:"+s, "e:"+s, "p:"+s, "d:"+s)
	}
	v, err := d.hmget(ctx, keys.DAG(flowID), fields...)
	if err != nil {
		return nil, false, fmt.Errorf("load dag of flow %d: %w", flowID, err)
	}
	if v[0] == nil {
		return nil, false, nil
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	nodes = make(map[uint32]*DAGNode, len(ids))
	var moved []*DAGNode
	for k, id := range ids {
		at := 2 + per*k
		if v[1] == nil && v[at] == nil && v[at+1] == nil && v[at+2] == nil && v[at+3] == nil && v[at+4] == nil {
			// a node of a started flow with no field left is completed: its
			// completion removed them (lua/lib_complete.lua)
			v[at] = string(model.NodeCompleted)
		}
		n := &DAGNode{ID: id, Status: model.NodeStatus(str(at)), Attempt: parseU32(str(at + 1)), Error: str(at + 2), Depends: []uint32{}, Dependents: []uint32{}}
		if s := str(at + 3); s != "" {
			_ = json.Unmarshal([]byte(s), &n.Depends)
		}
		if s := str(at + 4); s != "" {
			_ = json.Unmarshal([]byte(s), &n.Dependents)
		}
		if n.Status == model.NodeCompleted && v[at+1] == nil {
			moved = append(moved, n)
		}
		nodes[id] = n
	}
	if err := d.readMovedNodes(ctx, parseU32(str(0)), moved); err != nil {
		return nil, false, fmt.Errorf("load dag of flow %d: %w", flowID, err)
	}
	return nodes, true, nil
}

// readMovedNodes fills the attempt and dependents of completed nodes (of a flow of
// caller) from their jobs, where their completion moved them (lib_complete.lua: the
// DAG hash keeps a completed node's status alone), in one round trip.
func (d *DB) readMovedNodes(ctx context.Context, caller uint32, nodes []*DAGNode) error {
	if len(nodes) == 0 {
		return nil
	}
	cmds := make([]*redis.SliceCmd, len(nodes))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range nodes {
			cmds[i] = p.HMGet(ctx, keys.Job(caller, n.ID), "attempt", "dependents")
		}
		return nil
	}); err != nil {
		return err
	}
	for i, n := range nodes {
		v := cmds[i].Val()
		if len(v) < 2 {
			continue
		}
		if a, ok := v[0].(string); ok {
			n.Attempt = parseU32(a)
		}
		if s, ok := v[1].(string); ok && s != "" {
			_ = json.Unmarshal([]byte(s), &n.Dependents)
		}
	}
	return nil
}

// hmget is one HMGET in this database.
func (d *DB) hmget(ctx context.Context, key string, fields ...string) ([]any, error) {
	var cmd *redis.SliceCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.HMGet(ctx, key, fields...)
		return nil
	}); err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// dagJobFields are the job fields a page of flow.dag shows.
var dagJobFields = []string{"id", "status", "script_type", "dependends", "attempt", "function_name", "held"}

// LoadDAGJobs reads of each job of one caller what a page of flow.dag shows of it
// (dagJobFields), one HMGET each in one round trip; a missing job is ErrNotFound.
func (d *DB) LoadDAGJobs(ctx context.Context, callerID uint32, ids []uint32) ([]*model.Job, error) {
	return d.loadJobFields(ctx, callerID, ids, dagJobFields)
}

// LoadJobDependencies reads each job's dependencies only (one HMGET of two fields
// each, in one round trip).
func (d *DB) LoadJobDependencies(ctx context.Context, callerID uint32, ids []uint32) ([]*model.Job, error) {
	return d.loadJobFields(ctx, callerID, ids, []string{"id", "dependends"})
}

// flowHeadFields are a flow's hash fields but its job list.
var flowHeadFields = func() []string {
	var out []string
	for _, f := range model.HashFieldNames(&model.Flow{}) {
		if f != "jobs" {
			out = append(out, f)
		}
	}
	return out
}()

// LoadFlowHead reads a flow without its job list (and without the results of a
// running flow): for a large flow, a small read where LoadFlow reads every job id.
func (d *DB) LoadFlowHead(ctx context.Context, flowID uint32) (*model.Flow, error) {
	v, err := d.hmget(ctx, keys.Flow(flowID), flowHeadFields...)
	if err != nil {
		return nil, fmt.Errorf("load flow %d: %w", flowID, err)
	}
	found := false
	for _, x := range v {
		found = found || x != nil
	}
	if !found {
		return nil, notFound("flow %d in context %d", flowID, d.ContextID)
	}
	f := model.Flow{ID: flowID, ContextID: d.ContextID}
	if err := model.FromFields(keys.Flow(flowID), flowHeadFields, v, &f); err != nil {
		return nil, err
	}
	if f.ContextID == 0 {
		f.ContextID = d.ContextID
	}
	return &f, nil
}

// LoadFlowJobs reads a flow's job list alone.
func (d *DB) LoadFlowJobs(ctx context.Context, flowID uint32) ([]uint32, error) {
	v, err := d.hmget(ctx, keys.Flow(flowID), "jobs")
	if err != nil {
		return nil, fmt.Errorf("load flow %d: %w", flowID, err)
	}
	s, _ := v[0].(string)
	if s == "" {
		return nil, notFound("flow %d in context %d", flowID, d.ContextID)
	}
	var ids []uint32
	if err := json.Unmarshal([]byte(s), &ids); err != nil {
		return nil, fmt.Errorf("flow %d: its jobs: %w", flowID, err)
	}
	return ids, nil
}
