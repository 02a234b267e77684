package main

import (
	"context"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
)

// coord:jobdone is followed only while a call needs it: nobody subscribed while no
// job.run waits (Redis sends a finish's notice to no one, and supervisor-daemon reads
// none), subscribed on every server by the time need returns (a notice published
// then is received), and given up once the last call released it.
func TestJobDoneFollowedOnlyWhileNeeded(t *testing.T) {
	srv, st := submitStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := newOnDemandChannel(keys.JobDone, 0, time.Minute)
	d.offs = make(chan struct{}, 4)
	got := make(chan string, 16)
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- followNotices(ctx, st, []string{keys.FlowDone}, d, func(n notice) {
			switch {
			case n.channel == keys.JobDone && (n.again || n.off):
				d.confirmed(n.server, n.off)
			case n.channel == keys.JobDone:
				got <- n.payload
			}
		}, ready)
	}()
	select {
	case <-ready:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatal("no subscription within a minute")
	}
	rc := srv.Client(t, 0)
	subscribers := func() int64 {
		t.Helper()
		n, err := rc.PubSubNumSub(ctx, keys.JobDone).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n[keys.JobDone]
	}
	if n := subscribers(); n != 0 {
		t.Fatalf("%d subscribers of %s while no call waits, want 0", n, keys.JobDone)
	}
	for round := 1; round <= 2; round++ {
		release := d.need(ctx)
		second := d.need(ctx) // two calls at once share the subscription
		if n := subscribers(); n != 1 {
			t.Fatalf("round %d: %d subscribers once need returned, want 1", round, n)
		}
		if err := rc.Publish(ctx, keys.JobDone, "1:2:3").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-got:
			if p != "1:2:3" {
				t.Fatalf("round %d: notice %q", round, p)
			}
		case <-time.After(time.Minute):
			t.Fatalf("round %d: the notice published while a call needed the channel did not come", round)
		}
		release()
		release() // a second release of one call changes nothing
		if n := subscribers(); n != 1 {
			t.Fatalf("round %d: %d subscribers while a call still needs the channel, want 1", round, n)
		}
		second()
		select {
		case <-d.offs:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: not unsubscribed after the last call released the channel", round)
		}
		if n := subscribers(); n != 0 {
			t.Fatalf("round %d: %d subscribers after the last release, want 0", round, n)
		}
	}
}
