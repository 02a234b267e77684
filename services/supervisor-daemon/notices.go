package main

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/store"
)

// notice is one pub/sub message, or (again) a channel subscribed again after its
// connection was lost: its messages of the meantime are missed.
type notice struct {
	channel, payload string
	again            bool
}

// followNotices follows channels on every server of the placement (a context's
// scripts publish on the server that holds it; one subscription per server) until ctx
// ends, handing each message and each renewed subscription to handle. It reports when
// the subscriptions are live.
func followNotices(ctx context.Context, st *store.Store, channels []string, handle func(notice), ready chan<- struct{}) error {
	ch := make(chan notice)
	for _, srv := range st.Servers() {
		sub := srv.Coord().Subscribe(ctx, channels...)
		defer func() { _ = sub.Close() }()
		for range channels { // one confirmation per channel
			if _, err := sub.Receive(ctx); err != nil {
				return err
			}
		}
		go func() {
			for m := range sub.ChannelWithSubscriptions() {
				var n notice
				switch m := m.(type) {
				case *redis.Message:
					n = notice{channel: m.Channel, payload: m.Payload}
				case *redis.Subscription:
					if m.Kind != "subscribe" {
						continue
					}
					n = notice{channel: m.Channel, again: true}
				default:
					continue
				}
				select {
				case ch <- n:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	close(ready)
	for {
		select {
		case <-ctx.Done():
			return nil
		case n := <-ch:
			handle(n)
		}
	}
}
