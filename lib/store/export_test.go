package store

import (
	"context"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

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
		a.Nodes = append(a.Nodes, flowStartChunkNode{ID: int64(j.ID), Deps: jsonIDs(j.Dependends), Dependents: jsonIDs(dependents[j.ID]), N: int64(len(j.Dependends))})
	}
	chunk = func() (int64, error) { return a.run(ctx, d) }
	_, err = chunk()
	return chunk, err
}

