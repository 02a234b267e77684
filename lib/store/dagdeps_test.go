package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
)

// A started flow's DAG holds no copy of its nodes' dependencies (p:, ~60 B of Redis a
// node of a big flow, a field of a hash table): they are read from the jobs'
// dependends. LoadDAG gives them for the nodes not ended, SweepDAG for the nodes it
// returns, and a retry counts a rerun node's dependencies not completed from its job's
// list. A DAG of an earlier version, which holds p:, still reads.
func TestDAGDependenciesReadFromTheJobs(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 47)
	ctx := context.Background()
	rc := srv.Client(t, 47)
	// a root, two jobs after it, a join after both; big enough to start in chunks too
	f, layers := createLayers(t, s, 47, 1, 2, 1)
	root, mids, join := layers[0][0], layers[1], layers[2][0]
	jobs, ready := storetest.StartFlow(t, db, f)
	if !slices.Equal(ready, []uint32{root}) {
		t.Fatalf("ready at the start: %v", ready)
	}
	for k := range rc.HGetAll(ctx, keys.DAG(f.ID)).Val() {
		if strings.HasPrefix(k, "p:") {
			t.Fatalf("the DAG holds a copy of a node's dependencies: %s", k)
		}
	}
	g, err := db.LoadDAG(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := g.Nodes[join].Depends; !slices.Equal(d, mids) {
		t.Fatalf("LoadDAG: the join's dependencies %v, want %v", d, mids)
	}
	if d := g.Nodes[root].Depends; len(d) != 0 || d == nil {
		t.Fatalf("LoadDAG: the root's dependencies %#v, want []", d)
	}

	// the root done: the middle jobs ready, their dependencies read by the sweep
	if _, err := db.DispatchStarted(ctx, f.ID, 1, jobs[:1], "scheduler", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, errs := db.CompleteNodes(ctx, []store.JobEnd{{FlowID: f.ID, CallerID: 1, JobID: root, Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	sw, err := db.SweepDAG(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range mids {
		if n := sw.Nodes[id]; n == nil || n.Status != model.NodeReady || !slices.Equal(n.Depends, []uint32{root}) {
			t.Fatalf("SweepDAG: node %d %+v, want ready after %d", id, n, root)
		}
	}

	dagRetryCountsFromTheJobs(t, db, rc, f, jobs, mids, join)
	dagChunkedStartKeepsNoCopy(t, s, db, rc)

	// a DAG of an earlier version: p: holds the dependencies, read as they are
	rc.HSet(ctx, keys.DAG(f.ID), fmt.Sprint("p:", join), fmt.Sprintf("[%d]", mids[1]))
	if g, err = db.LoadDAG(ctx, f.ID); err != nil || !slices.Equal(g.Nodes[join].Depends, mids[1:]) {
		t.Fatalf("LoadDAG of a DAG with p:: the join's dependencies %v, %v", g.Nodes[join].Depends, err)
	}
}

// dagRetryCountsFromTheJobs: the first middle job fails, the join is cancelled; the
// retry makes the failed job ready (its dependency completed) and leaves the join
// pending on both, counted from the jobs' dependends.
func dagRetryCountsFromTheJobs(t *testing.T, db *store.DB, rc *redis.Client, f *model.Flow, jobs []*model.Job, mids []uint32, join uint32) {
	t.Helper()
	ctx := context.Background()
	var midJobs []*model.Job
	for _, j := range jobs {
		if slices.Contains(mids, j.ID) {
			midJobs = append(midJobs, j)
		}
	}
	if d, err := db.DispatchMany(ctx, f.ID, 1, midJobs, "scheduler", 0); err != nil || len(d) != 2 {
		t.Fatalf("dispatch of the middle jobs: %v, %v", d, err)
	}
	res, errs := db.CompleteNodes(ctx, []store.JobEnd{
		{FlowID: f.ID, CallerID: 1, JobID: mids[1], Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"},
		{FlowID: f.ID, CallerID: 1, JobID: mids[0], Attempt: 1, Status: model.JobError, Error: "boom", Fatal: true, Retries: -1, Actor: "scheduler"},
	})
	if errs[0] != nil || errs[1] != nil || res[1].FlowStatus != model.FlowError {
		t.Fatalf("ends: %+v %v", res, errs)
	}
	again, err := db.RetryFlow(ctx, f.ID, "7")
	if err != nil || !slices.Equal(again, []uint32{mids[0]}) {
		t.Fatalf("retry: ready %v (want [%d]), %v", again, mids[0], err)
	}
	dag := rc.HGetAll(ctx, keys.DAG(f.ID)).Val()
	if st, r := dag[fmt.Sprint("s:", join)], dag[fmt.Sprint("r:", join)]; st != string(model.NodePending) || r != "1" {
		t.Fatalf("the join after the retry: %s with %s dependencies left, want pending with 1", st, r)
	}

}

// dagChunkedStartKeepsNoCopy: a flow started in chunks (flow_start_chunk) keeps no
// copy of its nodes' dependencies either.
func dagChunkedStartKeepsNoCopy(t *testing.T, s *store.Store, db *store.DB, rc *redis.Client) {
	t.Helper()
	ctx := context.Background()
	big, blayers := createLayers(t, s, 47, store.StartChunk, 1)
	storetest.StartFlow(t, db, big)
	if n := len(rc.HKeys(ctx, keys.DAG(big.ID)).Val()); n > 6+2*len(big.Jobs) {
		t.Fatalf("a flow of %d jobs started in chunks: %d fields in its DAG, more than its counters and s:, d: per node", len(big.Jobs), n)
	}
	if !rc.HExists(ctx, keys.DAG(big.ID), fmt.Sprint("r:", blayers[1][0])).Val() || rc.HExists(ctx, keys.DAG(big.ID), fmt.Sprint("p:", blayers[1][0])).Val() {
		t.Fatal("the chunked start: the last job's node has no r:, or a p:")
	}

}
