package rrq

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A call whose frame waits behind the connection's writer (the executor reads nothing,
// its socket is full) returns when its context ends, instead of after the write ahead
// of it (up to WriteTimeout): its frame is taken back unsent, its slot freed, and the
// connection, which is sound, keeps serving the call being written and the next ones.
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
			accepted <- nc // not read until the test says so
		}
	}()
	// One connection: every call shares it, so the second frame queues behind the first.
	c, _ := newTestClient(t, UnixEndpoint(path), ClientOptions{MaxInFlight: 4, Pipeline: 4, Connections: 1, WriteTimeout: 10 * time.Minute})
	connOf := func() *conn {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.single
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
	// (Writes counts the writer's system calls as they begin: once it is 1, the writer
	// took its frames and any frame after them queues.)
	eventually(t, "the first frame's write under way", func() bool {
		return writer(func(cn *conn) bool { return cn.writing })() && c.Stats().Writes == 1
	})
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
	if s := c.Stats(); s.InFlight != 1 || s.Abandoned != 0 || s.ConnectionsLost != 0 {
		t.Fatalf("stats %+v: want the queued call gone (its slot free, not abandoned) and the connection kept", s)
	}
	if n := writer(func(cn *conn) bool { return len(cn.wq) == 0 })(); !n {
		t.Fatal("the taken-back frame is still queued")
	}

	// The executor reads again: the first frame arrives whole, and the next frame on
	// the connection is a later call's, not the one taken back.
	br := bufio.NewReaderSize(server, 64<<10)
	env, err := ReadFrame(br, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if req, err := env.Request(); err != nil || req.JobID != "job-1" {
		t.Fatalf("first frame: job %q, %v; want job-1's request", req.JobID, err)
	}
	third := make(chan error, 1)
	go func() {
		_, err := c.Execute(testCtx(t, time.Minute), NewRequest("job-3", "echo", nil, nil))
		third <- err
	}()
	env, err = ReadFrame(br, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if req, err := env.Request(); err != nil || req.JobID != "job-3" {
		t.Fatalf("next frame: job %q, %v; want job-3's request (job-2's was taken back)", req.JobID, err)
	}
	// The executor goes away: both calls in flight fail; every slot comes back.
	server.Close()
	if err := <-first; err == nil {
		t.Fatal("job-1 succeeded with no executor answering")
	}
	if err := <-third; err == nil {
		t.Fatal("job-3 succeeded with no executor answering")
	}
	eventually(t, "every slot free", func() bool { return c.Stats().InFlight == 0 })
}
