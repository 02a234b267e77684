package rrq

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A call whose frame waits behind the connection's writer (the executor reads nothing
// more, its socket is full) waits for its answer, not for its write: when its context
// ends it returns at once, abandoned to the connection, instead of waiting for the
// writer (up to WriteTimeout) first. Its slot comes back when the connection fails.
func TestQueuedCallEndsWithItsContext(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "stuck.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			accepted <- nc // held, never read
		}
	}()
	c, _ := newTestClient(t, UnixEndpoint(path), ClientOptions{MaxInFlight: 4, Pipeline: 4, WriteTimeout: 10 * time.Minute})
	connOf := func() *conn {
		c.mu.Lock()
		defer c.mu.Unlock()
		for cn := range c.conns {
			return cn
		}
		return nil
	}
	writer := func(f func(cn *conn) bool) func() bool {
		return func() bool {
			cn := connOf()
			if cn == nil {
				return false
			}
			cn.wmu.Lock()
			defer cn.wmu.Unlock()
			return f(cn)
		}
	}
	// The first call's frame is larger than the socket holds: its write blocks.
	first := make(chan error, 1)
	go func() {
		_, err := c.Execute(testCtx(t, time.Minute), NewRequest("job-1", "echo", []any{strings.Repeat("x", 8<<20)}, nil))
		first <- err
	}()
	server := <-accepted
	defer server.Close()
	eventually(t, "the first frame's write under way", writer(func(cn *conn) bool { return cn.writing }))
	ctx, cancel := context.WithCancel(t.Context())
	second := make(chan error, 1)
	go func() {
		_, err := c.Execute(ctx, NewRequest("job-2", "echo", nil, nil))
		second <- err
	}()
	eventually(t, "the second frame queued behind it", writer(func(cn *conn) bool { return len(cn.wq) == 1 }))
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("queued call after its context ended: %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a queued call did not return when its context ended: it waits for the write ahead of it")
	}
	if s := c.Stats(); s.Abandoned != 1 || s.InFlight != 2 {
		t.Fatalf("stats %+v: want the queued call abandoned, its slot held", s)
	}
	// The executor goes away: the write fails, the connection with it; both slots free.
	server.Close()
	if err := <-first; err == nil {
		t.Fatal("the first call succeeded with no executor reading")
	}
	eventually(t, "every slot free", func() bool { return c.Stats().InFlight == 0 })
}
