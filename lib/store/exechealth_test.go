package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// ExecutorHealthyElsewhere counts only live processes (a heartbeat within ProcessTTL)
// of runner ids that announced the executor, other than the asking one, without a
// current unhealthy mark; a cleared or ended mark counts the process again.
func TestExecutorHealthyElsewhere(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 4)
	healthy := func(worker string) bool {
		t.Helper()
		ok, err := db.ExecutorHealthyElsewhere(ctx, "spec", worker)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if healthy("a") {
		t.Fatal("healthy elsewhere with no runner announcing the executor")
	}
	for _, id := range []uint32{1, 2} {
		if _, _, err := s.CreateRunner(ctx, 4, &model.Runner{ID: id, Local: true}, "1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"spec"}); err != nil {
		t.Fatal(err)
	}
	// Runner 2 has no "spec": its process never counts.
	if err := s.Heartbeat(ctx, 2, "other", []uint32{4}); err != nil {
		t.Fatal(err)
	}
	if healthy("a") {
		t.Fatal("a process of a runner without the executor counted")
	}
	if err := s.Heartbeat(ctx, 1, "a", []uint32{4}); err != nil {
		t.Fatal(err)
	}
	if healthy("a") {
		t.Fatal("the asking process counted itself")
	}
	if err := s.Heartbeat(ctx, 1, "b", []uint32{4}); err != nil {
		t.Fatal(err)
	}
	if !healthy("a") {
		t.Fatal("live process b of runner 1 not counted")
	}
	if err := db.MarkExecutorUnhealthy(ctx, "spec", "b", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if healthy("a") {
		t.Fatal("process b marked unhealthy still counted")
	}
	if err := db.MarkExecutorUnhealthy(ctx, "spec", "b", time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if !healthy("a") {
		t.Fatal("an ended mark still excluded b")
	}
	if err := db.MarkExecutorUnhealthy(ctx, "spec", "b", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := db.ClearExecutorUnhealthy(ctx, "spec", "b"); err != nil {
		t.Fatal(err)
	}
	if !healthy("a") {
		t.Fatal("a cleared mark still excluded b")
	}
}

// Executors declared at runner creation are announced: the context accepts their
// handler jobs before (or without) any runner process; a retried creation announces
// them again.
func TestCreateRunnerDeclaresExecutors(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 5)
	r, _, err := s.CreateRunner(ctx, 5, &model.Runner{ID: 3, Pubkey: "ab", Executors: []string{"remote_exec"}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Executors) != 1 || r.Executors[0] != "remote_exec" {
		t.Fatalf("runner executors %v", r.Executors)
	}
	for name, want := range map[string]bool{"remote_exec": true, "other": false} {
		if ok, err := db.ExecutorServed(ctx, name); err != nil || ok != want {
			t.Fatalf("ExecutorServed(%s) = %v, %v; want %v", name, ok, err, want)
		}
	}
	if _, _, err := s.CreateRunner(ctx, 5, &model.Runner{ID: 4, Local: true, Executors: []string{"bad name"}}, "1"); err == nil || !strings.Contains(err.Error(), "executors") {
		t.Fatalf("a bad executor name: %v", err)
	}
	// A create whose announce was lost (its process ended between the runner's store
	// and the announce) is whole again when retried: the retry announces too.
	rc := srv.Client(t, 5)
	rc.HDel(ctx, keys.Runner(3), "executors")
	rc.HDel(ctx, keys.Executors, "remote_exec")
	if ok, _ := db.ExecutorServed(ctx, "remote_exec"); ok {
		t.Fatal("the executor is still served after its announce was taken away")
	}
	if _, created, err := s.CreateRunner(ctx, 5, &model.Runner{ID: 3, Pubkey: "ab", Executors: []string{"remote_exec"}}, "1"); err != nil || created {
		t.Fatalf("the retried create: created %v, %v", created, err)
	}
	if ok, err := db.ExecutorServed(ctx, "remote_exec"); err != nil || !ok {
		t.Fatalf("after the retried create, ExecutorServed(remote_exec) = %v, %v", ok, err)
	}
}
