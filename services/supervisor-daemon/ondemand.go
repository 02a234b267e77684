package main

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// onDemandChannel is a pub/sub channel that supervisor-daemon follows only while some
// call needs it: coord:jobdone, whose notices only job.run calls wait for. Every
// finish of standalone jobs publishes on it; followed all the time, a replica read
// and parsed a notice for every batch of ends that nobody waited for (~9% of its CPU
// over a run of submitted jobs). A call that will wait for one takes the channel
// (need) before its job is submitted: the subscription is confirmed on every server
// before need returns, so no end of its job is published before it listens (the
// waiter keeps ends that come before the watch). The subscription ends linger after
// the last call gave the channel back; a call that comes meanwhile finds it live.
// A subscription not confirmed within wait does not hold the call: the calls' own
// safety checks (a read of the job every 5 s) catch an end the channel missed, as
// they catch one missed while a connection is renewed.
type onDemandChannel struct {
	channel string
	linger  time.Duration // how long the subscriptions stay after the last user
	wait    time.Duration // how long need waits for the confirmations

	mu    sync.Mutex
	ctx   context.Context // followNotices's
	subs  []*redis.PubSub // one per server (attach), nil before
	users int
	on    bool // subscribe sent (and no unsubscribe since)
	live  []bool
	nlive int
	ready chan struct{} // closed when every server confirmed the subscription
	idle  *time.Timer   // the unsubscription after linger
	// offs: unsubscriptions confirmed (test hook: nil in service)
	offs chan struct{}
}

func newOnDemandChannel(channel string, linger, wait time.Duration) *onDemandChannel {
	return &onDemandChannel{channel: channel, linger: linger, wait: wait}
}

// attach gives the channel the subscriptions of followNotices, one per server.
func (d *onDemandChannel) attach(ctx context.Context, subs []*redis.PubSub) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctx, d.subs = ctx, subs
	if d.users > 0 && !d.on {
		d.subscribe()
	}
}

// subscribe sends the subscriptions (d.mu held: a subscribe and an unsubscribe are
// sent in the order they were decided).
func (d *onDemandChannel) subscribe() {
	d.on = true
	d.ready = make(chan struct{})
	d.live, d.nlive = make([]bool, len(d.subs)), 0
	for _, s := range d.subs {
		// An error (a connection being renewed) is made up for by the renewal, which
		// subscribes the channel again and confirms it.
		_ = s.Subscribe(d.ctx, d.channel)
	}
	if len(d.subs) == 0 {
		close(d.ready)
	}
}

// need takes the channel until release is called: it returns once the channel is
// followed on every server, or after d.wait, or when ctx ends.
func (d *onDemandChannel) need(ctx context.Context) (release func()) {
	d.mu.Lock()
	d.users++
	if d.idle != nil {
		d.idle.Stop()
		d.idle = nil
	}
	if !d.on && d.subs != nil {
		d.subscribe()
	}
	ready := d.ready
	d.mu.Unlock()
	if ready != nil {
		t := time.NewTimer(d.wait)
		select {
		case <-ready:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	var once sync.Once
	return func() { once.Do(d.release) }
}

func (d *onDemandChannel) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.users--
	if d.users > 0 || !d.on {
		return
	}
	if d.idle != nil {
		d.idle.Stop()
	}
	d.idle = time.AfterFunc(d.linger, d.unsubscribe)
}

// unsubscribe ends the subscriptions when no call took the channel since.
func (d *onDemandChannel) unsubscribe() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.users > 0 || !d.on || d.idle == nil {
		return
	}
	d.idle = nil
	d.on = false
	for _, s := range d.subs {
		_ = s.Unsubscribe(d.ctx, d.channel)
	}
}

// confirmed takes a subscription notice of the channel from server i: subscribed (a
// confirmation, or a renewal's) or off (an unsubscription's).
func (d *onDemandChannel) confirmed(i int, off bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off {
		if d.offs != nil {
			select {
			case d.offs <- struct{}{}:
			default:
			}
		}
		return
	}
	if !d.on || i >= len(d.live) || d.live[i] {
		return
	}
	d.live[i] = true
	d.nlive++
	if d.nlive == len(d.live) {
		close(d.ready)
	}
}
