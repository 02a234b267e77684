package myceliumemu_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/mycelium"
	"github.com/hero-coordinator/hero/lib/testutil/myceliumemu"
)

// As a v0.7.10 node: a long poll holds the node's lock, so a push, a status call and
// an admin call on that node wait until the poll ends; on another node they do not.
func TestLongPollHoldsTheNodeLock(t *testing.T) {
	t.Parallel()
	e := setup(t, "a", "b")
	polled := make(chan error, 1)
	go func() {
		_, err := e.c["a"].Pop(e.ctx, []byte("nothing"), 2*time.Second, true)
		polled <- err
	}()
	if err := e.net.WaitUntil(e.ctx, func() bool { return e.net.Stats().Polling == 1 }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	id := e.push("a", "b", "t", "x")
	waited := time.Since(start)
	if waited < time.Second {
		t.Fatalf("a push waited %v behind a pending 2 s long poll on its node, want the poll's end", waited)
	}
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	if e.node("a").LockWaits() != 1 {
		t.Fatalf("lock waits %d, want 1", e.node("a").LockWaits())
	}
	// A call on the other node is not held up by a's poll.
	go func() {
		_, err := e.c["a"].Pop(e.ctx, []byte("nothing"), 2*time.Second, true)
		polled <- err
	}()
	if err := e.net.WaitUntil(e.ctx, func() bool { return e.net.Stats().Polling == 1 }); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := e.c["b"].Info(e.ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("b's admin call took %v while a polled", d)
	}
	// The same node's status and admin calls wait.
	start = time.Now()
	if st := e.state("a", id); st != "received" {
		t.Fatalf("state %q", st)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("a status call took %v during a's long poll, want it to wait", d)
	}
	<-polled
}

// As a v0.7.10 node (mycelium-api/src/message.rs: the handler awaits the node's lock,
// then wraps get_message in its timeout): a pop with timeout 0 made while another long
// poll holds the lock waits for that poll to end, then looks at the inbox and answers
// 200 with the message queued meanwhile. A long poll whose client goes away releases
// the lock at once (axum drops the handler's future): the waiting pop goes next.
func TestShortPopWaitsForTheLongPollFirst(t *testing.T) {
	t.Parallel()
	e := setup(t, "a", "b")
	polled := make(chan error, 1)
	go func() {
		_, err := e.c["a"].Pop(e.ctx, []byte("nothing"), 2*time.Second, true)
		polled <- err
	}()
	if err := e.net.WaitUntil(e.ctx, func() bool { return e.net.Stats().Polling == 1 }); err != nil {
		t.Fatal(err)
	}
	e.push("b", "a", "t", "queued") // b's push: a's lock is not needed to deliver
	start := time.Now()
	m, err := e.c["a"].Pop(e.ctx, []byte("t"), 0, true)
	waited := time.Since(start)
	if err != nil || m == nil || string(m.Payload) != "queued" {
		t.Fatalf("pop with timeout 0 behind a long poll: %+v %v, want the queued message", m, err)
	}
	if waited < time.Second {
		t.Fatalf("pop with timeout 0 answered after %v, while a 2 s long poll held the lock", waited)
	}
	if err := <-polled; err != nil {
		t.Fatal(err)
	}

	// A long poll whose client goes away releases the lock: the short pop behind it
	// answers long before the poll's 30 s.
	long := e.client(e.node("a"))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := long.Pop(ctx, []byte("nothing"), 30*time.Second, true)
		done <- err
	}()
	if err := e.net.WaitUntil(e.ctx, func() bool { return e.net.Stats().Polling == 1 }); err != nil {
		t.Fatal(err)
	}
	short := make(chan *mycelium.InboundMessage, 1)
	go func() {
		m, err := e.c["a"].Pop(e.ctx, []byte("t"), 0, false)
		if err != nil {
			t.Error(err)
		}
		short <- m
	}()
	if err := e.net.WaitUntil(e.ctx, func() bool { return e.node("a").LockWaits() == 2 }); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	cancel()
	<-done
	if m := <-short; m == nil || string(m.Payload) != "queued" {
		t.Fatalf("pop after the poll's client left: %+v", m)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the pop behind an abandoned poll waited %v", d)
	}
	start = time.Now()
	e.push("a", "b", "t", "after")
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a push after the poll's client left waited %v", d)
	}
}

// Request bodies over 2 MiB are refused with 413 and nothing is sent; just under
// the limit is accepted.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	e := setup(t, "a", "b")
	max := mycelium.MaxPayloadLen(mycelium.ToPK(e.node("b").PK()), []byte("t"))
	if _, err := e.c["a"].Push(e.ctx, mycelium.ToPK(e.node("b").PK()), []byte("t"), make([]byte, max), nil); err != nil {
		t.Fatalf("a payload of the largest size a node takes (%d bytes): %v", max, err)
	}
	// The client refuses a larger one itself; sent anyway, the node answers 413.
	if _, err := e.c["a"].Push(e.ctx, mycelium.ToPK(e.node("b").PK()), []byte("t"), make([]byte, max+3), nil); !errors.Is(err, mycelium.ErrTooLarge) || !mycelium.Permanent(err) {
		t.Fatalf("client push over the limit: %v", err)
	}
	body := `{"dst":{"pk":"` + e.node("b").PK() + `"},"topic":"dA==","payload":"` + strings.Repeat("A", myceliumemu.MaxBodyBytes) + `"}`
	resp, err := http.Post(e.node("a").URL()+"/api/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(msg), "length limit exceeded") {
		t.Fatalf("push over %d bytes: %d %s, want 413", myceliumemu.MaxBodyBytes, resp.StatusCode, msg)
	}
	if n := e.node("b").InboxLen(); n != 1 {
		t.Fatalf("inbox holds %d, want only the message under the limit", n)
	}
}

// GarbageNext: the next pop answers 200 with a body that is not JSON and takes no
// message.
func TestGarbageNext(t *testing.T) {
	t.Parallel()
	e := setup(t, "a", "b")
	e.push("a", "b", "t", "kept")
	e.node("b").GarbageNext(1)
	if _, err := e.c["b"].Pop(e.ctx, nil, 0, false); !errors.Is(err, mycelium.ErrNotJSON) {
		t.Fatalf("garbage pop: %v", err)
	}
	if m := e.pop("b", "t", 0); m == nil || string(m.Payload) != "kept" {
		t.Fatalf("after garbage: %+v", m)
	}
}

// The node tells pop clients apart by their User-Agent: one client's pops, however
// many, count once; two clients polling at the same time (one of them waiting for the
// lock) count twice, and stay counted in MaxPollClients after they end.
func TestPollClientsCountsDistinctClientsAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, "a")
	nd := e.node("a")
	client := func(ua string) *mycelium.Client {
		c, err := mycelium.New(mycelium.Config{BaseURL: nd.URL(), UserAgent: ua, LongPollGrace: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	one, two := client("one"), client("two")
	for range 3 {
		if _, err := one.Pop(e.ctx, nil, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	if got := nd.MaxPollClients(); got != 1 {
		t.Fatalf("one client's pops in a row: %d clients at once, want 1", got)
	}
	polled := make(chan error, 2)
	for _, c := range []*mycelium.Client{one, two} {
		go func() {
			_, err := c.Pop(e.ctx, nil, time.Second, true)
			polled <- err
		}()
	}
	if err := e.net.WaitUntil(e.ctx, func() bool { return nd.PollClients() == 2 }); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-polled; err != nil {
			t.Fatal(err)
		}
	}
	if err := e.net.WaitUntil(e.ctx, func() bool { return nd.PollClients() == 0 }); err != nil {
		t.Fatal(err)
	}
	if got, by := nd.MaxPollClients(), nd.PollsBy(); got != 2 || by["one"] != 4 || by["two"] != 1 {
		t.Fatalf("max clients at once %d, pops by client %v; want 2, one: 4, two: 1", got, by)
	}
}
