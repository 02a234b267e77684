package obs

import (
	"io"
	"sync"
	"time"
)

// BatchWriter hands log lines to an underlying writer from one goroutine, in batches:
// the first line into an empty buffer arms a timer (linger), and the lines that come
// until it fires, or until flushAt bytes wait, go out in one write. A service busy
// with thousands of jobs a second makes a few hundred write system calls a second
// instead of one per line; an idle one holds no timer. Lines keep their order and
// are at most linger late. When the underlying writer falls behind by max bytes,
// Write waits for it (logs are back-pressured, never dropped). Close writes what is
// left; a line logged after Close is written directly.
type BatchWriter struct {
	w       io.Writer
	linger  time.Duration
	flushAt int
	max     int

	wake    chan struct{} // the first line into an empty buffer
	full    chan struct{} // flushAt bytes wait
	closing chan struct{}
	done    chan struct{}

	mu     sync.Mutex
	room   *sync.Cond // a batch was taken: writers waiting for room go on
	buf    []byte     // lines waiting
	spare  []byte     // the buffer the flusher gave back
	closed bool
	err    error // the underlying writer's last error
}

// Log batching defaults (lib/app's services use them).
const (
	DefaultLogLinger  = 10 * time.Millisecond
	DefaultLogFlushAt = 64 << 10
	DefaultLogMax     = 4 << 20
)

// NewBatchWriter starts a BatchWriter over w. linger ≤ 0 writes each batch as soon as
// the flusher gets to it (lines that come meanwhile still share a write).
func NewBatchWriter(w io.Writer, linger time.Duration, flushAt, max int) *BatchWriter {
	if flushAt <= 0 {
		flushAt = DefaultLogFlushAt
	}
	if max < flushAt {
		max = flushAt
	}
	b := &BatchWriter{w: w, linger: linger, flushAt: flushAt, max: max,
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
	b.room = sync.NewCond(&b.mu)
	go b.flush()
	return b
}

// Write queues p (one log line: zerolog writes a whole event per call) and returns at
// once unless max bytes are already waiting.
func (b *BatchWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	for len(b.buf) >= b.max && !b.closed {
		b.room.Wait()
	}
	if b.closed {
		b.mu.Unlock()
		return b.w.Write(p)
	}
	first := len(b.buf) == 0
	b.buf = append(b.buf, p...)
	full := len(b.buf) >= b.flushAt
	b.mu.Unlock()
	if first {
		signal(b.wake)
	}
	if full {
		signal(b.full)
	}
	return len(p), nil
}

// signal sends on a channel of one slot unless a signal waits there already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (b *BatchWriter) flush() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		b.mu.Lock()
		n, closed := len(b.buf), b.closed
		b.mu.Unlock()
		if n == 0 {
			if closed {
				return
			}
			select {
			case <-b.wake:
			case <-b.closing:
			}
			continue
		}
		drain(b.wake) // lines wait: a wake-up for them is stale
		if !closed && n < b.flushAt && b.linger > 0 {
			timer.Reset(b.linger)
			select {
			case <-timer.C:
			case <-b.full:
				timer.Stop()
			case <-b.closing:
				timer.Stop()
			}
		}
		b.mu.Lock()
		batch := b.buf
		b.buf, b.spare = b.spare[:0], nil
		drain(b.full) // it was about this batch
		b.mu.Unlock()
		b.room.Broadcast()
		_, err := b.w.Write(batch)
		b.mu.Lock()
		if err != nil {
			b.err = err
		}
		if cap(batch) <= 2*b.max {
			b.spare = batch[:0]
		}
		b.mu.Unlock()
	}
}

func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// Close writes the lines still waiting and stops the flusher. It returns the
// underlying writer's last error.
func (b *BatchWriter) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.done
		return nil
	}
	b.closed = true
	close(b.closing)
	b.mu.Unlock()
	b.room.Broadcast()
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
