package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
)

// Issue 49, the memory of a finished job. A completed node leaves the DAG hash: its
// status (s:), attempt (a:) and dependents (d:) go, the dependents into its job's
// hash, where the page reads of flow.dag and LoadDAG find them as before; a node of
// a started flow with no field reads as completed. A repeated success of it still
// hands back its dependents still ready, and a DAG of an earlier version (s:
// completed kept) reads the same.
func TestCompletedNodeLeavesTheDAGHash(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 48)
	ctx := context.Background()
	rc := srv.Client(t, 48)
	f, layers := createLayers(t, s, 48, 1, 2, 1)
	root, mids, join := layers[0][0], layers[1], layers[2][0]
	jobs, _ := storetest.StartFlow(t, db, f)
	if _, err := db.DispatchStarted(ctx, f.ID, 1, jobs[:1], "scheduler", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, errs := db.CompleteNodes(ctx, []store.JobEnd{{FlowID: f.ID, CallerID: 1, JobID: root, Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	for _, fld := range []string{"s:", "a:", "d:"} {
		if rc.HExists(ctx, keys.DAG(f.ID), fmt.Sprint(fld, root)).Val() {
			t.Fatalf("the completed root keeps %s%d in the DAG hash", fld, root)
		}
	}
	if d := rc.HGet(ctx, keys.Job(1, root), "dependents").Val(); d != fmt.Sprintf("[%d,%d]", mids[0], mids[1]) {
		t.Fatalf("the root job's dependents %q", d)
	}
	// a node not completed keeps both (the middle ones: dispatched, their a: and d:)
	var midJobs []*model.Job
	for _, j := range jobs {
		if slices.Contains(mids, j.ID) {
			midJobs = append(midJobs, j)
		}
	}
	// the same success again, before the dependents' dispatch: they come back
	res, errs := db.CompleteNodes(ctx, []store.JobEnd{{FlowID: f.ID, CallerID: 1, JobID: root, Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"}})
	if errs[0] != nil || res[0].Applied || !slices.Equal(res[0].Ready, mids) {
		t.Fatalf("the root's success again: %+v %v, want not applied, %v ready", res[0], errs[0], mids)
	}
	if _, err := db.DispatchMany(ctx, f.ID, 1, midJobs, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	checkFirstDispatchStoresNoDetail(t, db, rc, mids[0])
	if !rc.HExists(ctx, keys.DAG(f.ID), fmt.Sprint("a:", mids[0])).Val() || !rc.HExists(ctx, keys.DAG(f.ID), fmt.Sprint("d:", mids[0])).Val() {
		t.Fatal("a dispatched node lost its a: or d:")
	}
	checkCompletedRead(t, db, f, root, mids, join)
	// a leaf completed: nothing to move, its job gets no dependents
	if _, errs := db.CompleteNodes(ctx, []store.JobEnd{{FlowID: f.ID, CallerID: 1, JobID: mids[0], Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if rc.HExists(ctx, keys.DAG(f.ID), fmt.Sprint("a:", mids[0])).Val() || rc.HExists(ctx, keys.DAG(f.ID), fmt.Sprint("s:", mids[0])).Val() {
		t.Fatal("a completed middle node keeps its a: or s:")
	}
	checkEarlierCompletedNode(t, db, f, root, mids)
}

// checkCompletedRead: the readers, a page and the whole DAG, read the completed root
// (no field left) and a dispatched middle node (mids[0], before join) as before.
func checkCompletedRead(t *testing.T, db *store.DB, f *model.Flow, root uint32, mids []uint32, join uint32) {
	t.Helper()
	ctx := context.Background()
	nodes, ok, err := db.LoadDAGNodes(ctx, f.ID, []uint32{root, mids[0]})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if n := nodes[root]; n.Attempt != 1 || !slices.Equal(n.Dependents, mids) || n.Status != model.NodeCompleted {
		t.Fatalf("LoadDAGNodes: the completed root %+v, want attempt 1, dependents %v", n, mids)
	}
	if n := nodes[mids[0]]; n.Attempt != 1 || !slices.Equal(n.Dependents, []uint32{join}) {
		t.Fatalf("LoadDAGNodes: a dispatched node %+v", n)
	}
	g, err := db.LoadDAG(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := g.Nodes[root]; n == nil || n.Attempt != 1 || !slices.Equal(n.Dependents, mids) || n.Status != model.NodeCompleted {
		t.Fatalf("LoadDAG: the completed root %+v", n)
	}
}

// checkEarlierCompletedNode: a DAG of an earlier version, which kept a completed
// node's status (root's), reads as one that does not (its completed mids[0]), beside a
// dispatched node (mids[1]).
func checkEarlierCompletedNode(t *testing.T, db *store.DB, f *model.Flow, root uint32, mids []uint32) {
	t.Helper()
	ctx := context.Background()
	srv.Client(t, int(db.ContextID)).HSet(ctx, keys.DAG(f.ID), fmt.Sprint("s:", root), string(model.NodeCompleted))
	nodes, _, err := db.LoadDAGNodes(ctx, f.ID, []uint32{root, mids[0], mids[1]})
	if err != nil {
		t.Fatal(err)
	}
	if n := nodes[root]; n.Status != model.NodeCompleted || n.Attempt != 1 || !slices.Equal(n.Dependents, mids) {
		t.Fatalf("an earlier version's completed node: %+v", n)
	}
	if n := nodes[mids[0]]; n.Status != model.NodeCompleted || n.Attempt != 1 {
		t.Fatalf("a completed leaf: %+v", n)
	}
	if n := nodes[mids[1]]; n.Status != model.NodeDispatched {
		t.Fatalf("a dispatched node: %+v", n)
	}
}
