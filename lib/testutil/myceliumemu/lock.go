package myceliumemu

import "sync"

// nodeLock is a Mycelium node's node-wide lock as v0.7.10's API takes it: every
// handler locks the node (a tokio Mutex, so waiters are served first come, first
// served), and popMessage awaits the inbox *under* that lock, so while a long poll
// waits for a message every other call on the node waits for the poll.
//
// popMessage takes the lock *before* its timeout starts: its handler evaluates
// `state.node.lock().await` as the argument of `tokio::time::timeout(…,
// guard.get_message(…))`, so the wait for the lock is outside the timeout. A pop
// with timeout 0 made while another long poll holds the lock therefore waits for
// that poll to end, and then looks at the inbox once (a tokio Timeout polls its
// future before its delay): it may answer 200 with a message. Nothing but the
// client going away ends a wait for the lock (axum drops the handler's future),
// and a request dropped while it holds the lock releases it.
type nodeLock struct {
	mu    sync.Mutex
	held  bool
	queue []chan struct{}
	waits int // acquisitions that had to wait
	// queued is called (without mu) when a call starts waiting, so that tests
	// waiting on the network see it.
	queued func()
}

// acquire takes the lock, or gives up when done is closed (the client went away); it
// reports whether the lock was taken.
func (l *nodeLock) acquire(done <-chan struct{}) bool {
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
	if l.queued != nil {
		l.queued()
	}
	select {
	case <-ch:
		return true
	case <-done:
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
