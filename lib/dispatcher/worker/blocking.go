package worker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/fault"
)

// blockingConn is a dedicated connection for blocking pops. Its loop can be woken at
// once when it must end (CLIENT UNBLOCK from another connection), so shutdown does
// not wait for a pop's timeout.
type blockingConn struct {
	rdb  *redis.Client
	conn *redis.Conn
	id   atomic.Int64
}

func (b *blockingConn) reset(ctx context.Context) error {
	if b.conn != nil {
		_ = b.conn.Close()
	}
	b.conn = b.rdb.Conn()
	id, err := b.conn.ClientID(ctx).Result()
	if err != nil {
		_ = b.conn.Close()
		b.conn = nil
		return err
	}
	b.id.Store(id)
	return nil
}

func (b *blockingConn) close() {
	if b.conn != nil {
		_ = b.conn.Close()
	}
}

// unblockOnDone wakes b's pending pop once ctx ends, until done is closed.
func (w *Worker) unblockOnDone(ctx context.Context, b *blockingConn, done <-chan struct{}) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.rdb.ClientUnblock(uctx, b.id.Load()).Err()
		cancel()
		select {
		case <-done:
			return
		case <-t.C: // the loop may have been between two pops: wake it again
		}
	}
}

// reconnect replaces b's broken connection, retrying with backoff until it has a
// working one (true) or ctx ends (false): a failed reset leaves b without a
// connection, and a pop on none would dereference nil (a Redis restart crashed the
// runner that way).
func (w *Worker) reconnect(ctx context.Context, b *blockingConn, what string) bool {
	backoff := 100 * time.Millisecond
	for {
		err := b.reset(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.log.Error().Err(err).Str("loop", what).Msg("reconnect for blocking pops")
		if !fault.Sleep(ctx, backoff) {
			return false
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// dialLoop opens a blocking connection, retrying with backoff until ctx ends.
func (w *Worker) dialLoop(ctx context.Context, what string) *blockingConn {
	b := &blockingConn{rdb: w.rdb}
	if !w.reconnect(ctx, b, what) {
		return nil
	}
	return b
}

// openBlocking dials a blocking connection (dialLoop) whose pending pop is woken once
// ctx ends (unblockOnDone). It returns nil when ctx ended first; otherwise release,
// which the loop calls when it ends, stops the waking and closes the connection.
func (w *Worker) openBlocking(ctx context.Context, what string) (b *blockingConn, release func()) {
	b = w.dialLoop(ctx, what)
	if b == nil {
		return nil, func() {}
	}
	done := make(chan struct{})
	go w.unblockOnDone(ctx, b, done)
	return b, func() {
		close(done)
		b.close()
	}
}
