// Package fault tells a passing fault (Redis restarting, a connection dropped, a
// failover under way) from a lasting error, and paces the retries of work that must
// not be dropped: an outcome computed by a job is worth more than a connection.
package fault

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
)

// transientPrefixes are the Redis error replies (and go-redis errors) that pass:
// the server is loading its data set, read-only during a failover (or a blocked pop
// cut short when its master became a replica: UNBLOCKED), busy with a script, or the
// connection broke.
var transientPrefixes = []string{
	"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY ", "UNBLOCKED ",
	"redis: Conn is in a bad state",
	"redis: connection pool timeout",
}

// transientParts are pieces of error texts that say the connection failed, for errors
// wrapped as text on their way (a script's error, gRPC's status message), or that the
// server lacks one of the store's Redis functions for now: a replica promoted before
// it had the libraries loaded just before its master died (replication is
// asynchronous), or a Redis restarted without its data. The loader (supervisor-daemon)
// loads them again at its next check (lib/store), and a call of the other services
// waits for that rather than failing a job or dropping its end.
var transientParts = []string{
	"connection refused", "connection reset", "broken pipe", "i/o timeout", "EOF",
	"use of closed network connection", "no route to host", "network is unreachable",
	"Function not found",
}

// Transient reports whether err is a fault that passes by itself: retrying the same
// operation later may succeed. A context canceled is not (the caller gave up);
// a deadline exceeded is (a call that timed out).
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true // dial errors, timeouts
	}
	msg := err.Error()
	for {
		for _, p := range transientPrefixes {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		// "<what>: <cause>": look at the cause too.
		_, rest, ok := strings.Cut(msg, ": ")
		if !ok {
			break
		}
		msg = rest
	}
	text := err.Error()
	for _, p := range transientParts {
		if strings.Contains(text, p) {
			return true
		}
	}
	return false
}

// Backoff paces retries: First, doubled after each failure up to Max, with a
// quarter of jitter. The zero value starts at 50 ms and caps at 2 s.
type Backoff struct {
	First, Max time.Duration
	next       time.Duration
}

// Next returns the delay before the next try.
func (b *Backoff) Next() time.Duration {
	if b.First <= 0 {
		b.First = 50 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 2 * time.Second
	}
	if b.next == 0 {
		b.next = b.First
	}
	d := b.next
	b.next = min(b.next*2, b.Max)
	jitter := time.Duration(time.Now().UnixNano() % int64(d/4+1))
	return d - d/8 + jitter
}

// Reset starts over at First (after a success).
func (b *Backoff) Reset() { b.next = 0 }

// Sleep waits for the next delay; false when ctx ended first.
func (b *Backoff) Sleep(ctx context.Context) bool { return Sleep(ctx, b.Next()) }

// Sleep waits for d; false when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
