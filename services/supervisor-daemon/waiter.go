package main

import (
	"context"
	"sync"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// waiter wakes job.run callers when their job ends. One subscription to the
// coord:jobdone channel serves every waiting call; the scheduler publishes a job's
// reference there when the job reaches its final state.
type waiter struct {
	mu      sync.Mutex
	waiting map[model.JobRef][]chan struct{}
}

func newWaiter() *waiter { return &waiter{waiting: map[model.JobRef][]chan struct{}{}} }

func (w *waiter) watch(ref model.JobRef) chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.waiting[ref] = append(w.waiting[ref], ch)
	w.mu.Unlock()
	return ch
}

func (w *waiter) unwatch(ref model.JobRef, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	list := w.waiting[ref]
	for i, c := range list {
		if c == ch {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(w.waiting, ref)
	} else {
		w.waiting[ref] = list
	}
}

func (w *waiter) notify(ref model.JobRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.waiting[ref] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// run follows the channel until ctx ends. It reports when the subscription is live.
func (w *waiter) run(ctx context.Context, st *store.Store, log zerolog.Logger, ready chan<- struct{}) error {
	sub := st.G().Subscribe(ctx, keys.JobDone)
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil {
		return err
	}
	close(ready)
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			ref, err := model.ParseJobRef(m.Payload)
			if err != nil {
				log.Warn().Str("payload", m.Payload).Msg("bad job-done notification")
				continue
			}
			w.notify(ref)
		}
	}
}
