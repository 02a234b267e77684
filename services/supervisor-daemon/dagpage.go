package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// A large flow read in pieces: flow.dag a page at a time, flow.counts in O(1).

// maxDAGPage is the most nodes of one flow.dag page, and the size above which a
// flow.dag without limit answers with its first page rather than the whole DAG.
const maxDAGPage = 10000

type dagParams struct {
	ContextID uint32  `json:"context_id"`
	ID        uint32  `json:"id"`
	Offset    uint32  `json:"offset"`
	Limit     *uint32 `json:"limit"`
}

// dagPage is one page of a flow's DAG: the nodes of its jobs offset..offset+limit in
// the flow's order, read with their own fields only (the jobs' and the DAG's), the
// flow without its job list, and its counts. A flow not started yet has no DAG: its
// nodes are pending, and their dependents come from every job's dependencies (one
// read of one field each).
func (s *service) dagPage(ctx context.Context, db *store.DB, f *model.Flow, in dagParams) (*dagResult, error) {
	limit := uint32(maxDAGPage)
	if in.Limit != nil {
		limit = *in.Limit
	}
	from := min(int(in.Offset), len(f.Jobs))
	to := min(from+int(limit), len(f.Jobs))
	ids := f.Jobs[from:to]
	jobs, err := db.LoadDAGJobs(ctx, f.CallerID, ids)
	if err != nil {
		return nil, err
	}
	g, started, err := db.LoadDAGNodes(ctx, f.ID, ids)
	if err != nil {
		return nil, err
	}
	var dependents map[uint32][]uint32
	if !started {
		if dependents, err = s.jobLists.dependents(ctx, db, f); err != nil {
			return nil, err
		}
	}
	counts, err := db.LoadFlowCounts(ctx, f.ID)
	if err != nil {
		return nil, err
	}
	if !started {
		counts.Total, counts.NotEnded = len(f.Jobs), len(f.Jobs)
	}
	out := &dagResult{Nodes: make([]dagNode, 0, len(ids)), Counts: &counts}
	for _, j := range jobs {
		n := dagNode{ID: j.ID, Depends: nonNil(j.Dependends), Dependents: nonNil(dependents[j.ID]), NodeStatus: string(model.NodePending),
			JobStatus: string(j.Status), Attempt: j.Attempt, ScriptType: string(j.ScriptType), FunctionName: j.FunctionName, Held: j.Held}
		if gn := g[j.ID]; gn != nil {
			n.NodeStatus, n.Attempt, n.Error, n.Dependents = string(gn.Status), gn.Attempt, gn.Error, nonNil(gn.Dependents)
			if n.NodeStatus == "" {
				n.NodeStatus = string(model.NodePending)
			}
		}
		out.Nodes = append(out.Nodes, n)
	}
	if to < len(f.Jobs) {
		out.NextOffset = uint32(to)
	}
	page := *f
	page.Jobs = nil
	out.Flow = &page
	return out, nil
}

func (s *service) flowCounts(ctx context.Context, p Principal, in ctxIDParams) (*store.FlowCounts, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "flow.counts")
	if err != nil {
		return nil, err
	}
	c, err := db.LoadFlowCounts(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if !c.Started {
		// never started: one read of the flow, for its size
		f, err := db.LoadFlow(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		c.Total, c.NotEnded = len(f.Jobs), len(f.Jobs)
	}
	return &c, nil
}

func countsToPB(c *store.FlowCounts) *herov1.FlowCounts {
	if c == nil {
		return nil
	}
	return &herov1.FlowCounts{Started: c.Started, Total: uint32(c.Total), Ended: uint32(c.Ended), Completed: uint32(c.Completed),
		Failed: uint32(c.Failed), Cancelled: uint32(c.Cancelled), NotEnded: uint32(c.NotEnded)}
}

func (c *coordinatorServer) GetFlowCounts(ctx context.Context, r *herov1.GetFlowRequest) (*herov1.FlowCounts, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.FlowCounts, error) {
		x, err := c.s.flowCounts(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		if err != nil {
			return nil, err
		}
		return countsToPB(x), nil
	})
}

// jobListCache keeps the job lists of the last few large flows read page by page: a
// flow's job list never changes once it is stored, so a page after the first reads
// only the flow's head and its page (a 100,000-job flow's list is 0.7 MB of JSON).
// An entry is known by its context, flow id and creation time (a flow deleted and
// created again under its id has another).
type jobListCache struct {
	mu    sync.Mutex
	lists map[string]*jobList
	order []string // oldest first
}

// jobList is a flow's job list and, once a page of it was read before its start,
// each job's dependents (from every job's dependencies: a flow not started has no DAG
// that lists them).
type jobList struct {
	jobs       []uint32
	dependents map[uint32][]uint32
}

// jobListCacheSize is how many flows' job lists the cache keeps (a 100,000-job
// flow's: 0.4 MB, and some MB with its dependents).
const jobListCacheSize = 4

func newJobListCache() *jobListCache { return &jobListCache{lists: map[string]*jobList{}} }

func listKey(f *model.Flow) string { return fmt.Sprintf("%d/%d/%d", f.ContextID, f.ID, f.CreatedAtMs) }

// get returns a flow's cached entry, or nil.
func (c *jobListCache) get(f *model.Flow) *jobList {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists[listKey(f)]
}

// put keeps a flow's entry, dropping the oldest beyond jobListCacheSize.
func (c *jobListCache) put(f *model.Flow, l *jobList) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := listKey(f)
	if _, ok := c.lists[key]; !ok {
		c.order = append(c.order, key)
		if len(c.order) > jobListCacheSize {
			delete(c.lists, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.lists[key] = l
}

// jobs returns a flow's job list (f: its head), from the cache or read and kept.
func (c *jobListCache) jobs(ctx context.Context, db *store.DB, f *model.Flow) ([]uint32, error) {
	if c != nil {
		if l := c.get(f); l != nil {
			return l.jobs, nil
		}
	}
	ids, err := db.LoadFlowJobs(ctx, f.ID)
	if err != nil || c == nil {
		return ids, err
	}
	c.put(f, &jobList{jobs: ids})
	return ids, nil
}

// dependents returns each job's dependents of a flow not started (f with its job
// list), from the cache or read (one field of every job) and kept.
func (c *jobListCache) dependents(ctx context.Context, db *store.DB, f *model.Flow) (map[uint32][]uint32, error) {
	if c != nil {
		if l := c.get(f); l != nil && l.dependents != nil {
			return l.dependents, nil
		}
	}
	all, err := db.LoadJobDependencies(ctx, f.CallerID, f.Jobs)
	if err != nil {
		return nil, err
	}
	out := map[uint32][]uint32{}
	for _, j := range all {
		for _, d := range j.Dependends {
			out[d] = append(out[d], j.ID)
		}
	}
	if c != nil {
		c.put(f, &jobList{jobs: f.Jobs, dependents: out})
	}
	return out, nil
}
