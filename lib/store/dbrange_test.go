package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// A store whose Redis user may not run CONFIG (the services' ACL users) still knows
// the server's number of databases, so a context beyond them is refused before
// anything is sent: a pipeline whose SELECT is refused would run its other commands in
// the connection's previous database, another context's.
func TestDatabasesCountedWithoutConfig(t *testing.T) {
	srv.Flush(t)
	ctx := context.Background()
	admin := srv.Client(t, 0)
	if err := admin.Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">noconfig-pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(ctx, "ACL", "DELUSER", "noconfig").Err() })
	s, err := store.Open(ctx, store.Options{URL: "redis://noconfig:noconfig-pw@" + srv.Addr + "/0", ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	last, err := s.Ctx(redistest.Databases - 1)
	if err != nil {
		t.Fatalf("context %d (the last database): %v", redistest.Databases-1, err)
	}
	if _, err := last.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Set(ctx, "probe", "1", 0).Err() }); err != nil {
		t.Fatal(err)
	}
	// A command in a database that exists leaves the shared connection there: a context
	// beyond the databases must not reach it.
	_, err = s.Ctx(redistest.Databases)
	var ve *model.ValidationError
	if !errors.As(err, &ve) || ve.Field != "context_id" || !strings.Contains(err.Error(), "beyond the databases") {
		t.Fatalf("context %d: want a validation error naming context_id and the databases, got %v", redistest.Databases, err)
	}
	for _, n := range []int{1, redistest.Databases - 1} {
		want := 0
		if n == redistest.Databases-1 {
			want = 1
		}
		if keys := srv.Keys(t, n); len(keys) != want {
			t.Fatalf("db %d holds %v", n, keys)
		}
	}
}

// countDatabases finds counts that are not a power of two as well.
func TestDatabasesCountedOddCount(t *testing.T) {
	other := redistest.Start(t, redistest.Options{Databases: 37})
	ctx := context.Background()
	if err := other.Client(t, 0).Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">noconfig-pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(ctx, store.Options{URL: "redis://noconfig:noconfig-pw@" + other.Addr + "/0", ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Ctx(36); err != nil {
		t.Fatalf("context 36 of 37 databases: %v", err)
	}
	if _, err := s.Ctx(37); err == nil {
		t.Fatal("context 37 of 37 databases was accepted")
	}
}
