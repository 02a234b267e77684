// Package tick runs a function on a fixed period. It is a package of its own so that
// a service that only needs a ticker (the router) links nothing else with it.
package tick

import (
	"context"
	"time"
)

// Every calls fn every period until ctx ends (not at once: the first call is one
// period in).
func Every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}
