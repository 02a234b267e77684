package rrq

// wake wakes whoever waits for a change (a free slot, a pool's capacity): a channel
// closed at each change, made only when someone waits for it — a change that nobody
// waits for (a call's end, most of the time) makes no channel. Its owner's mutex
// guards it.
type wake struct {
	ch   chan struct{}
	done bool // closed for good: wait returns a closed channel
}

// wait returns the channel the next change (or the close) closes.
func (w *wake) wait() <-chan struct{} {
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// fire wakes the waiters, if any.
func (w *wake) fire() {
	if w.done || w.ch == nil {
		return
	}
	close(w.ch)
	w.ch = nil
}

// close wakes the waiters and every later one at once.
func (w *wake) close() {
	if w.done {
		return
	}
	w.done = true
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	close(w.ch)
}
