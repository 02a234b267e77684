package main

import (
	"context"
	"sync"
)

// pollGate puts the gateway's own calls to its Mycelium node before its long poll.
// A Mycelium v0.7.10 node holds its node-wide lock for the whole of a long poll, so a
// push (or a status or admin call) made while the gateway polls would wait for the
// poll to end: up to --poll-timeout. Instead, every other call enters the gate first,
// which cancels the poll in flight — the gateway polls with peek, so a poll abandoned
// mid-way loses nothing, and a node drops an abandoned request's handler and with it
// the lock — and holds the next long poll back until no call is in progress. While
// calls are in progress the poll loop only peeks with timeout 0, which holds the lock
// for no longer than a look at the inbox, so a stream of pushes cannot starve inbound
// messages.
type pollGate struct {
	mu     sync.Mutex
	calls  int
	cancel context.CancelFunc // the long poll in flight, nil when none
	idle   chan struct{}      // closed when calls drops to 0
}

func newPollGate() *pollGate {
	idle := make(chan struct{})
	close(idle)
	return &pollGate{idle: idle}
}

// enter registers a call: the long poll in flight is cancelled and no new one starts
// until the returned function has been called.
func (p *pollGate) enter() (leave func()) {
	p.mu.Lock()
	p.calls++
	if p.calls == 1 {
		p.idle = make(chan struct{})
	}
	if p.cancel != nil {
		p.cancel()
		p.cancel = nil
	}
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.calls--
			if p.calls == 0 {
				close(p.idle)
			}
			p.mu.Unlock()
		})
	}
}

// begin starts a long poll: it returns the poll's context and its end when no call is
// in progress, or a nil context and a channel closed when the calls in progress end.
func (p *pollGate) begin(ctx context.Context) (pctx context.Context, end func(), busy <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls > 0 {
		return nil, nil, p.idle
	}
	pctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	return pctx, func() {
		p.mu.Lock()
		p.cancel = nil
		p.mu.Unlock()
		cancel()
	}, nil
}
