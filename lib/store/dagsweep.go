package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// sweepScan is the COUNT of one HSCAN of a DAG hash by SweepDAG: each call of the
// scan is bounded, whatever the flow's size.
const sweepScan = 1000

// SweptDAG is what the scheduler's safety sweep needs of a started flow: its caller,
// its nodes that are ready, dispatched or running (with their attempt, retry time and
// dependencies), and the nodes whose dependents are left to release (rel:<id>).
type SweptDAG struct {
	CallerID uint32
	Nodes    map[uint32]*DAGNode // ready, dispatched and running nodes only
	Releases []uint32
}

// SweepDAG reads a flow's DAG state for the safety sweep without one command over the
// whole hash (HGETALL of a 100,000-job flow's DAG holds Redis tens of milliseconds):
// HSCAN pages of the node statuses, then the other fields of the nodes in flight (a
// flow's few) with HMGET. ErrNotFound when the flow was never started.
func (d *DB) SweepDAG(ctx context.Context, flowID uint32) (*SweptDAG, error) {
	key := keys.DAG(flowID)
	g := &SweptDAG{Nodes: map[uint32]*DAGNode{}}
	seen := false
	var cursor uint64
	for {
		var cmd *redis.ScanCmd
		if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = p.HScan(ctx, key, cursor, "", sweepScan)
			return nil
		}); err != nil {
			return nil, fmt.Errorf("sweep dag of flow %d: %w", flowID, err)
		}
		kv, next := cmd.Val()
		for i := 0; i+1 < len(kv); i += 2 {
			seen = true
			sweptField(g, kv[i], kv[i+1])
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if !seen {
		return nil, notFound("dag of flow %d (not started)", flowID)
	}
	ids := make([]uint32, 0, len(g.Nodes))
	for id := range g.Nodes {
		ids = append(ids, id)
	}
	for from := 0; from < len(ids); from += sweepScan {
		part := ids[from:min(from+sweepScan, len(ids))]
		cmds := make([]*redis.SliceCmd, len(part))
		if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range part {
				s := strconv.FormatUint(uint64(id), 10)
				cmds[i] = p.HMGet(ctx, key, "a:"+s, "due:"+s, "p:"+s)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("sweep dag of flow %d: %w", flowID, err)
		}
		var unread []*DAGNode // their dependencies: their jobs' (p: an earlier version's)
		for i, id := range part {
			n, v := g.Nodes[id], cmds[i].Val()
			if a, ok := v[0].(string); ok {
				n.Attempt = parseU32(a)
			}
			if due, ok := v[1].(string); ok {
				n.DueMs, _ = strconv.ParseInt(due, 10, 64)
			}
			if deps, ok := v[2].(string); ok {
				n.Depends = []uint32{}
				_ = json.Unmarshal([]byte(deps), &n.Depends)
			} else {
				unread = append(unread, n)
			}
		}
		if err := d.readDepends(ctx, g.CallerID, unread); err != nil {
			return nil, fmt.Errorf("sweep dag of flow %d: %w", flowID, err)
		}
	}
	return g, nil
}

// sweptField takes one field of a DAG hash into g: the caller, the status of a node in
// flight, a node's dependents left to release.
func sweptField(g *SweptDAG, k, v string) {
	if k == "caller" {
		g.CallerID = parseU32(v)
		return
	}
	prefix, idStr, ok := strings.Cut(k, ":")
	if !ok {
		return
	}
	id64, err := strconv.ParseUint(idStr, 10, 32)
	if err != nil {
		return
	}
	id := uint32(id64)
	switch prefix {
	case "s":
		switch st := model.NodeStatus(v); st {
		case model.NodeReady, model.NodeDispatched, model.NodeRunning:
			g.Nodes[id] = &DAGNode{ID: id, Status: st}
		}
	case "rel":
		g.Releases = append(g.Releases, id)
	}
}
