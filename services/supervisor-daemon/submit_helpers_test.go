package main

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/store"
)

// benchService is a service on st for the submit path's tests and benchmarks.
func benchService(_ testing.TB, st *store.Store) *service {
	return &service{store: st, waiter: newWaiter(), log: zerolog.Nop()}
}
