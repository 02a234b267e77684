package myceliumemu

import (
	"sync"
	"time"
)

// nodeLock is a Mycelium node's node-wide lock as v0.7.10's API takes it: every
// handler locks the node (a tokio Mutex, so waiters are served first come, first
// served), and popMessage awaits the inbox *under* that lock, so while a long poll
// waits for a message every other call on the node waits for the poll. popMessage's
// timeout covers its wait for the lock too (tokio::time::timeout wraps the whole
// future): a pop that cannot get the lock in time answers 204, a pop with timeout 0
// gets it only if it is free. A request whose client goes away stops waiting (axum
// drops the handler's future), which releases the lock it held.
type nodeLock struct {
	mu    sync.Mutex
	held  bool
	queue []chan struct{}
	waits int // acquisitions that had to wait
}

// acquire takes the lock, or gives up when done is closed or expire fires (either
// may be nil); it reports whether the lock was taken.
func (l *nodeLock) acquire(done <-chan struct{}, expire <-chan time.Time) bool {
	l.mu.Lock()
	if !l.held && len(l.queue) == 0 {
		l.held = true
		l.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	l.queue = append(l.queue, ch)
	l.waits++
	l.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-done:
	case <-expire:
	}
	l.mu.Lock()
	for i, c := range l.queue {
		if c == ch {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			l.mu.Unlock()
			return false
		}
	}
	l.mu.Unlock()
	l.release() // handed over while giving up: pass it on
	return false
}

// release hands the lock to the longest waiter, or frees it.
func (l *nodeLock) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) > 0 {
		ch := l.queue[0]
		l.queue = l.queue[1:]
		close(ch)
		return
	}
	l.held = false
}

// waited returns how many acquisitions had to wait.
func (l *nodeLock) waited() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waits
}
