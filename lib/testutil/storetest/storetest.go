// Package storetest holds seeding helpers for tests that drive lib/store directly.
package storetest

import (
	"context"
	"testing"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// StartFlow loads a created flow's jobs, plans its DAG and starts it, as the
// scheduler does, without dispatching anything. It returns the jobs as loaded (what a
// start reads of them: store's LoadStartJobs) and the
// ids of the nodes ready at the start; it fails the test if the flow does not start.
func StartFlow(t testing.TB, db *store.DB, f *model.Flow) ([]*model.Job, []uint32) {
	t.Helper()
	ctx := context.Background()
	jobs, err := db.LoadStartJobs(ctx, f.CallerID, f.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := store.PlanDAG(f, jobs)
	if err != nil {
		t.Fatal(err)
	}
	ready, _, started, err := db.StartFlow(ctx, f, jobs, deps, "1")
	if err != nil || !started {
		t.Fatalf("start flow %d: started %v, %v", f.ID, started, err)
	}
	return jobs, ready
}
