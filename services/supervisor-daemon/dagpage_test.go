package main

import (
	"testing"

	"github.com/hero-coordinator/hero/lib/model"
)

// The job-list cache of flow.dag's pages keeps the last jobListCacheSize flows, each
// known by its context, id and creation time: a flow created again under its id is
// another entry, and the oldest goes first.
func TestJobListCacheKeepsTheLastFlows(t *testing.T) {
	c := newJobListCache()
	flow := func(id uint32, created int64) *model.Flow {
		return &model.Flow{ID: id, ContextID: 1, CreatedAtMs: created}
	}
	for id := uint32(1); id <= jobListCacheSize+1; id++ {
		c.put(flow(id, 100), &jobList{jobs: []uint32{id}})
	}
	if c.get(flow(1, 100)) != nil {
		t.Error("the oldest flow is still kept")
	}
	for id := uint32(2); id <= jobListCacheSize+1; id++ {
		if l := c.get(flow(id, 100)); l == nil || l.jobs[0] != id {
			t.Errorf("flow %d: %+v", id, l)
		}
	}
	if c.get(flow(2, 101)) != nil {
		t.Error("a flow created again under its id found the old one's list")
	}
	c.put(flow(2, 100), &jobList{jobs: []uint32{2}, dependents: map[uint32][]uint32{}})
	if len(c.order) != jobListCacheSize || c.get(flow(2, 100)).dependents == nil {
		t.Errorf("replacing an entry: %d kept, %+v", len(c.order), c.get(flow(2, 100)))
	}
}
