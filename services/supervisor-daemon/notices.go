package main

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/store"
)

// notice is one pub/sub message, or (again) a channel subscribed (again: after its
// connection was lost its messages of the meantime are missed; or an on-demand
// channel's subscription confirmed), or (off) an on-demand channel's unsubscription
// confirmed. server is the index of the server it came from (Store.Servers).
type notice struct {
	channel, payload string
	again, off       bool
	server           int
}

// followNotices follows channels on every server of the placement (a context's
// scripts publish on the server that holds it; one subscription per server) until ctx
// ends, handing each message and each renewed subscription to handle. It reports when
// the subscriptions are live. demand (nil: none) is given the subscriptions once they
// are: it subscribes them to its channel only while some call needs it
// (onDemandChannel), and their confirmations come to handle as notices again and off.
func followNotices(ctx context.Context, st *store.Store, channels []string, demand *onDemandChannel, handle func(notice), ready chan<- struct{}) error {
	ch := make(chan notice)
	var subs []*redis.PubSub
	for i, srv := range st.Servers() {
		sub := srv.Coord().Subscribe(ctx, channels...)
		defer func() { _ = sub.Close() }()
		for range channels { // one confirmation per channel
			if _, err := sub.Receive(ctx); err != nil {
				return err
			}
		}
		subs = append(subs, sub)
		go func() {
			for m := range sub.ChannelWithSubscriptions() {
				var n notice
				switch m := m.(type) {
				case *redis.Message:
					n = notice{channel: m.Channel, payload: m.Payload, server: i}
				case *redis.Subscription:
					switch m.Kind {
					case "subscribe":
						n = notice{channel: m.Channel, again: true, server: i}
					case "unsubscribe":
						n = notice{channel: m.Channel, off: true, server: i}
					default:
						continue
					}
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
	if demand != nil {
		demand.attach(ctx, subs)
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
