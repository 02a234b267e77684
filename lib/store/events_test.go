package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/store"
)

func TestCheckEventPosition(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 9)
	rdb := srv.Client(t, 9)
	rdb.Del(ctx, keys.Events)
	// No stream: any position passes.
	if err := db.CheckEventPosition(ctx, "5-0"); err != nil {
		t.Fatalf("no stream: %v", err)
	}
	for _, id := range []string{"10-0", "20-0", "30-0", "40-0"} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events, ID: id, Values: []any{"type", "job.started"}})
	}
	rdb.XTrimMinID(ctx, keys.Events, "30-0") // 10 and 20 are gone
	for _, tc := range []struct {
		after string
		want  error
	}{
		{"", nil}, {"0", nil}, {"$", nil},
		{"30-0", nil}, {"40-0", nil}, {"99-0", nil}, // kept, or newer than everything
		{"20-0", store.ErrEventsTrimmed}, {"10-0", store.ErrEventsTrimmed}, {"25-3", store.ErrEventsTrimmed},
		{"soon", store.ErrBadEventID}, {"1-x", store.ErrBadEventID},
	} {
		err := db.CheckEventPosition(ctx, tc.after)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("after %q: %v, want %v", tc.after, err, tc.want)
		}
	}
	// Everything trimmed: a position before the last event written is gone; the last one
	// itself is not (nothing came after it).
	rdb.XTrimMaxLen(ctx, keys.Events, 0)
	if err := db.CheckEventPosition(ctx, "30-0"); !errors.Is(err, store.ErrEventsTrimmed) {
		t.Errorf("emptied stream, older position: %v", err)
	}
	if err := db.CheckEventPosition(ctx, "40-0"); err != nil {
		t.Errorf("emptied stream, last position: %v", err)
	}
}
