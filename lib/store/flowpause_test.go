package store_test

import (
	"context"
	"testing"

	"github.com/hero-coordinator/hero/lib/keys"
)

// A paused flow's ready nodes are not dispatched (lua/pause_flow.lua, lib_dispatch):
// the dispatch answers "paused" and the nodes stay ready; a resume clears the pause
// and enters the flow in coord:delayed, due now; then they dispatch.
func TestPausedFlowDispatchesNothing(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	f, jobs := flowWith(t, s, db, 2)
	if changed, err := db.PauseFlow(ctx, f.ID, "pause", "7", "hold"); err != nil || !changed {
		t.Fatalf("pause: %v %v", changed, err)
	}
	if changed, _ := db.PauseFlow(ctx, f.ID, "pause", "7", "hold"); changed {
		t.Fatal("a second pause changed the flow")
	}
	res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.MsgKey != "" || r.Why != "paused" {
			t.Fatalf("dispatch of a paused flow's node: %+v", r)
		}
	}
	if changed, err := db.PauseFlow(ctx, f.ID, "resume", "7", "go"); err != nil || !changed {
		t.Fatalf("resume: %v %v", changed, err)
	}
	coord := srv.Client(t, 0)
	if coord.ZScore(ctx, keys.Delayed, "10:flow:"+itoa(f.ID)).Err() != nil {
		t.Fatal("a resumed flow is not in coord:delayed")
	}
	res, err = db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0)
	if err != nil || res[0].MsgKey == "" {
		t.Fatalf("dispatch after the resume: %+v, %v", res, err)
	}
	if c.HExists(ctx, keys.DAG(f.ID), "paused").Val() {
		t.Fatal("the resumed flow's DAG still says paused")
	}
}
