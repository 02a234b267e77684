package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// benchService is a service on st for the submit path's tests and benchmarks, its
// group commit running until the test ends.
func benchService(t testing.TB, st *store.Store) *service {
	groups := newSubmitGroups(st.SubmitGuarded, st.ServerFor, maxGroupJobs, submitInflight, nil)
	t.Cleanup(groups.shutdown)
	return &service{store: st, waiter: newWaiter(), log: zerolog.Nop(), contexts: newContextCache(st, time.Minute), groups: groups}
}

// submitStore is a store on a fresh Redis with actors 1 (context 1's admin) and 2
// (its executor) and runner 1 of context 1 serving sh.
func submitStore(t testing.TB) (*redistest.Server, *store.Store) {
	t.Helper()
	srv := redistest.Start(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{URL: srv.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	for id := uint32(1); id <= 2; id++ {
		if _, _, err := st.CreateActor(ctx, &model.Actor{ID: id, Pubkey: strings.Repeat("ab", 32)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.CreateContext(ctx, &model.Context{ID: 1, Admins: []uint32{1}, Readers: []uint32{}, Executors: []uint32{2}}, "t"); err != nil {
		t.Fatal(err)
	}
	db, err := st.Ctx(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateRunner(ctx, 1, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "t"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	return srv, st
}

// waitClosed waits until ch is closed (another goroutine's progress) or fails the test.
func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}
