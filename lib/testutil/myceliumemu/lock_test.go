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

// popResult is a pop's outcome.
type popResult struct {
	m   *mycelium.InboundMessage
	err error
}

// longPoll starts a pop on node `at` for topic that would wait 10 minutes, far past
// the test's 1-minute deadline, and returns once it holds the node's lock: only a
// message on that topic, or its client going away, ends it. No clock is read in
// the tests below: a call is seen waiting behind the poll (LockWaits) and answering
// after it, whatever the machine's speed.
func (e *env) longPoll(ctx context.Context, at, topic string) <-chan popResult {
	e.t.Helper()
	polling := e.net.Stats().Polling
	got := make(chan popResult, 1)
	go func() {
		m, err := e.c[at].Pop(ctx, []byte(topic), 10*time.Minute, false)
		got <- popResult{m, err}
	}()
	e.waitStats(func(s myceliumemu.Stats) bool { return s.Polling == polling+1 })
	return got
}

// waitLockWaits waits until n calls on node `at` have had to wait for its lock.
func (e *env) waitLockWaits(at string, n int) {
	e.t.Helper()
	if err := e.net.WaitUntil(e.ctx, func() bool { return e.node(at).LockWaits() == n }); err != nil {
		e.t.Fatalf("waiting for %d calls on %s to wait for its lock: %v (%d did)", n, at, err, e.node(at).LockWaits())
	}
}

// notYet fails the test when ch already has an answer.
func notYet[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s answered (%+v) while a long poll held its node's lock", what, v)
	default:
	}
}

// As a v0.7.10 node: a long poll holds the node's lock, so a push, a status call and
// an admin call on that node wait until the poll ends; on another node they do not.
func TestLongPollHoldsTheNodeLock(t *testing.T) {
	t.Parallel()
	e := setup(t, "a", "b")
	poll := e.longPoll(e.ctx, "a", "end")
	type pushResult struct {
		res *mycelium.PushResult
		err error
	}
	pushed := make(chan pushResult, 1)
	go func() {
		res, err := e.c["a"].Push(e.ctx, mycelium.ToPK(e.node("b").PK()), []byte("t"), []byte("x"), nil)
		pushed <- pushResult{res, err}
	}()
	e.waitLockWaits("a", 1)
	// A call on the other node is not held up by a's poll: it answers while the poll
	// still holds a's lock (else it would wait past the test's deadline).
	if _, err := e.c["b"].Info(e.ctx); err != nil {
		t.Fatalf("b's admin call while a polled: %v", err)
	}
	if n := e.node("b").LockWaits(); n != 0 {
		t.Fatalf("b's admin call waited for b's lock (%d waits) while a polled", n)
	}
	notYet(t, pushed, "a push on a")
	// b's message on the poll's topic ends the poll (b's push needs no lock of a's).
	e.push("b", "a", "end", "poll over")
	if r := <-poll; r.err != nil || r.m == nil || string(r.m.Payload) != "poll over" {
		t.Fatalf("the long poll: %+v %v", r.m, r.err)
	}
	p := <-pushed
	if p.err != nil {
		t.Fatalf("the push behind the poll: %v", p.err)
	}
	if e.node("a").LockWaits() != 1 {
		t.Fatalf("lock waits %d, want 1", e.node("a").LockWaits())
	}
	// The same node's status and admin calls wait.
	poll = e.longPoll(e.ctx, "a", "end")
	state := make(chan string, 1)
	go func() {
		st, err := e.c["a"].Status(e.ctx, p.res.ID)
		if err != nil {
			state <- err.Error()
			return
		}
		state <- st.State.Name
	}()
	e.waitLockWaits("a", 2)
	notYet(t, state, "a status call on a")
	e.push("b", "a", "end", "poll over")
	if r := <-poll; r.err != nil || r.m == nil {
		t.Fatalf("the second long poll: %+v %v", r.m, r.err)
	}
	if st := <-state; st != "received" {
		t.Fatalf("state %q", st)
	}
}

// As a v0.7.10 node (mycelium-api/src/message.rs: the handler awaits the node's lock,
// then wraps get_message in its timeout): a pop with timeout 0 made while another long
// poll holds the lock waits for that poll to end, then looks at the inbox and answers
// 200 with the message queued meanwhile. A long poll whose client goes away releases
// the lock at once (axum drops the handler's future): the waiting pop goes next.
func TestShortPopWaitsForTheLongPollFirst(t *testing.T) {
	t.Parallel()
	e := setup(t, "a", "b")
	poll := e.longPoll(e.ctx, "a", "end")
	e.push("b", "a", "t", "queued") // b's push: a's lock is not needed to deliver
	short := make(chan popResult, 1)
	go func() {
		m, err := e.c["a"].Pop(e.ctx, []byte("t"), 0, true)
		short <- popResult{m, err}
	}()
	e.waitLockWaits("a", 1)
	notYet(t, short, "a pop with timeout 0")
	e.push("b", "a", "end", "poll over")
	if r := <-poll; r.err != nil || r.m == nil {
		t.Fatalf("the long poll: %+v %v", r.m, r.err)
	}
	if r := <-short; r.err != nil || r.m == nil || string(r.m.Payload) != "queued" {
		t.Fatalf("pop with timeout 0 behind a long poll: %+v %v, want the queued message", r.m, r.err)
	}

	// A long poll whose client goes away releases the lock: the short pop behind it
	// answers, although the poll would have waited 10 minutes (the message is still
	// there: the pop above only peeked).
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	poll = e.longPoll(ctx, "a", "nothing")
	go func() {
		m, err := e.c["a"].Pop(e.ctx, []byte("t"), 0, false)
		short <- popResult{m, err}
	}()
	e.waitLockWaits("a", 2)
	notYet(t, short, "a pop with timeout 0")
	cancel()
	<-poll
	if r := <-short; r.err != nil || r.m == nil || string(r.m.Payload) != "queued" {
		t.Fatalf("pop after the poll's client left: %+v %v", r.m, r.err)
	}
	// And the node's lock is free: a push does not wait.
	e.push("a", "b", "t", "after")
	if n := e.node("a").LockWaits(); n != 2 {
		t.Fatalf("a push after the poll's client left waited for the lock (%d waits, want 2)", n)
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
		c, err := mycelium.New(mycelium.Config{BaseURL: nd.URL(), UserAgent: ua, LongPollGrace: time.Minute})
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
