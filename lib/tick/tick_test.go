package tick

import (
	"context"
	"testing"
	"time"
)

// Every calls fn each period until its context ends.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() {
			if calls++; calls == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Every did not end with its context")
	}
	if calls != 3 {
		t.Fatalf("%d calls, want 3 (none after the context ended)", calls)
	}
}
