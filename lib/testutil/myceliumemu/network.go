package myceliumemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// DefaultSendWindow is how long a node keeps trying to deliver a message
// before it aborts it: five minutes, as in Mycelium.
const DefaultSendWindow = 5 * time.Minute

// ChunkSize is the size of a message's data chunks (v0.7.10's AVERAGE_CHUNK_SIZE):
// a message of n bytes travels as ceil(n/1300) chunks between its INIT and its DONE.
const ChunkSize = 1300

// TopicMatch is how popMessage's topic filter selects messages.
type TopicMatch int

const (
	// TopicMatchExact selects messages whose topic equals the filter, which is
	// what Mycelium v0.7.10 implements (its inbox compares the whole topic). The
	// default.
	TopicMatchExact TopicMatch = iota
	// TopicMatchPrefix selects messages whose topic starts with the filter,
	// which is what api.yaml's prose describes ("checks if the message has the
	// given string at the start") but no node release does. Code that is
	// correct under both settings is safe against either.
	TopicMatchPrefix
)

// Options configure a Network. The zero value is usable.
type Options struct {
	// Seed makes node identities deterministic: a node's keys derive from
	// (Seed, name) through DeriveIdentity. Empty means a random seed, so every
	// Network has fresh keys.
	Seed string
	// SendWindow is how long an undelivered message (held by a partition,
	// addressed to an unknown node, dropped, or rejected by the receiver's
	// topic rules) stays "pending" before it is aborted. Zero means
	// DefaultSendWindow.
	SendWindow time.Duration
	// TopicMatch selects exact (default, as v0.7.10) or prefix topic filtering.
	TopicMatch TopicMatch
	// RandSeed seeds the generator behind SetDropRate, for repeatable runs.
	RandSeed uint64
	// TransferTime is how long a message's chunks take to cross, from the moment
	// the receiver acknowledges its INIT to its DONE (see SetTransferTime). Zero:
	// a message crosses at once.
	TransferTime time.Duration
}

// Stats counts what the network did. Counters only grow, except Held and
// Polling, which are current values.
type Stats struct {
	Sent       int // messages and replies pushed through any node's API
	Delivered  int // copies put into an inbox or handed to a waiting pusher (duplicates count twice)
	Dropped    int // messages lost to DropNext or SetDropRate
	Duplicated int // messages delivered twice because of Duplicate
	Rejected   int // messages refused by the receiver's topic rules
	Held       int // messages currently held (partition, or unknown destination)
	Expired    int // messages aborted after the send window without delivery
	Popped     int // messages removed from an inbox by popMessage
	Polling    int // popMessage requests currently waiting for a message
	Chunks     int // data chunks sent (a message of n bytes is ceil(n/ChunkSize) of them)
	Lost       int // transfers the receiver lost mid-way (it restarted between INIT and DONE)
	Sending    int // transfers in progress: INIT acknowledged, DONE not yet
	// Tasks is how many sender tasks the nodes keep: a v0.7.10 node runs one per
	// message it pushed, ticking every 100 ms for two send windows (10 minutes) —
	// the load each message costs a node, whatever becomes of it.
	Tasks int
}

// Network is a set of emulated Mycelium nodes that can message each other. It
// is a test fixture: it implements the message API of a node as api.yaml
// describes it, not Mycelium's routing, encryption or wire protocol.
type Network struct {
	seed string

	mu       sync.Mutex
	nodes    []*Node
	byName   map[string]*Node
	changed  chan struct{} // closed and replaced on every change
	window   time.Duration
	match    TopicMatch
	rng      *mrand.Rand
	delay    time.Duration
	transfer time.Duration
	dropRate float64
	dropNext int
	dupNext  int
	parts    map[[2]*Node]bool
	held     []*envelope
	timers   map[*time.Timer]struct{}
	stats    Stats
	closed   bool
}

// envelope is one message (or reply) travelling through the network.
type envelope struct {
	id       string
	src      *Node
	dstIP    netip.Addr
	topic    []byte
	payload  []byte
	reply    bool
	copies   int
	chunks   int
	deadline time.Time
	out      *outMsg // the sender's status record
	done     bool    // delivered or aborted
	held     bool    // in Network.held
	expiry   bool    // an abort timer is set
	// receiver is the node that acknowledged the INIT (its pending set holds the
	// message until the DONE); nil before.
	receiver *Node
}

// outMsg is a sender's record of an outbound message (for getMessageInfo).
type outMsg struct {
	dst      netip.Addr
	state    string
	created  time.Time
	deadline time.Time
	size     int
	chunks   int
}

// inFlight reports whether the sender is still trying to deliver the message.
func (o *outMsg) inFlight() bool { return o.state == statePending || o.state == stateSending }

// NewNetwork returns an empty network. Add nodes with AddNode; Close it when
// done.
func NewNetwork(opts Options) *Network {
	seed := opts.Seed
	if seed == "" {
		var b [16]byte
		rand.Read(b[:])
		seed = hex.EncodeToString(b[:])
	}
	w := opts.SendWindow
	if w <= 0 {
		w = DefaultSendWindow
	}
	return &Network{
		seed:     seed,
		byName:   map[string]*Node{},
		changed:  make(chan struct{}),
		window:   w,
		match:    opts.TopicMatch,
		rng:      mrand.New(mrand.NewPCG(opts.RandSeed, opts.RandSeed^0x9e3779b97f4a7c15)),
		transfer: max(opts.TransferTime, 0),
		parts:    map[[2]*Node]bool{},
		timers:   map[*time.Timer]struct{}{},
	}
}

// NewForTest starts a network with one node per name (API on 127.0.0.1:0)
// and closes it when tb ends.
func NewForTest(tb testing.TB, names ...string) *Network {
	tb.Helper()
	n := NewNetwork(Options{})
	tb.Cleanup(func() { n.Close() })
	for _, name := range names {
		if _, err := n.AddNode(name); err != nil {
			tb.Fatalf("myceliumemu: %v", err)
		}
	}
	return n
}

// Seed returns the seed node identities derive from.
func (n *Network) Seed() string { return n.seed }

// AddNode creates node name and serves its API on 127.0.0.1 at a free port.
func (n *Network) AddNode(name string) (*Node, error) {
	return n.AddNodeAt(name, "127.0.0.1:0")
}

// AddNodeAt creates node name and serves its API on listenAddr
// ("host:port"; port 0 picks a free one, kept across StopAPI/StartAPI).
func (n *Network) AddNodeAt(name, listenAddr string) (*Node, error) {
	if name == "" {
		return nil, errors.New("myceliumemu: node name is empty")
	}
	id := DeriveIdentity(n.seed, name)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errors.New("myceliumemu: network closed")
	}
	if _, dup := n.byName[name]; dup {
		n.mu.Unlock()
		return nil, fmt.Errorf("myceliumemu: node %q exists", name)
	}
	nd := newNode(n, id, listenAddr)
	n.nodes = append(n.nodes, nd)
	n.byName[name] = nd
	n.mu.Unlock()
	if err := nd.StartAPI(); err != nil {
		n.mu.Lock()
		delete(n.byName, name)
		n.nodes = n.nodes[:len(n.nodes)-1]
		n.mu.Unlock()
		return nil, err
	}
	n.mu.Lock()
	n.retryHeldLocked() // a node appearing is a route appearing
	n.mu.Unlock()
	return nd, nil
}

// Node returns the node called name, or nil.
func (n *Network) Node(name string) *Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byName[name]
}

// Nodes returns the nodes in the order they were added.
func (n *Network) Nodes() []*Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Node(nil), n.nodes...)
}

// Close stops every node's API and every pending timer. It is idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	for t := range n.timers {
		t.Stop()
	}
	n.timers = nil
	nodes := append([]*Node(nil), n.nodes...)
	n.notifyLocked()
	n.mu.Unlock()
	for _, nd := range nodes {
		nd.StopAPI()
	}
	return nil
}

// SetDelay delays the delivery of every message pushed from now on by d
// (0: deliver during the push call). Delayed messages may overtake one
// another, as on a real network.
func (n *Network) SetDelay(d time.Duration) {
	n.mu.Lock()
	n.delay = max(d, 0)
	n.mu.Unlock()
}

// SetTransferTime makes the chunks of every message pushed from now on take d to
// cross, between the receiver's acknowledgement of the message's INIT and its DONE
// (0: at once). Meanwhile the sender reports the message as "sending" and the
// receiver holds it as a pending transfer: a receiver that restarts then loses it,
// as a v0.7.10 node does (its sender, past the INIT, only resends chunks and the
// DONE, which the restarted node ignores, until its send window ends: aborted).
func (n *Network) SetTransferTime(d time.Duration) {
	n.mu.Lock()
	n.transfer = max(d, 0)
	n.mu.Unlock()
}

// SetDropRate makes every message pushed from now on get lost with
// probability p (0 ≤ p ≤ 1). A lost message stays "pending" for its sender
// and is aborted after the send window, as when Mycelium cannot reach the
// receiver.
func (n *Network) SetDropRate(p float64) {
	n.mu.Lock()
	n.dropRate = min(max(p, 0), 1)
	n.mu.Unlock()
}

// DropNext loses the next k messages pushed (see SetDropRate).
func (n *Network) DropNext(k int) {
	n.mu.Lock()
	n.dropNext = max(k, 0)
	n.mu.Unlock()
}

// Duplicate delivers each of the next k messages twice, with the same id, to
// test that consumers are idempotent.
func (n *Network) Duplicate(k int) {
	n.mu.Lock()
	n.dupNext = max(k, 0)
	n.mu.Unlock()
}

// SetSendWindow changes how long undelivered messages pushed from now on
// stay pending before they are aborted.
func (n *Network) SetSendWindow(d time.Duration) {
	n.mu.Lock()
	if d <= 0 {
		d = DefaultSendWindow
	}
	n.window = d
	n.mu.Unlock()
}

// SetTopicMatch switches between prefix and exact topic filtering.
func (n *Network) SetTopicMatch(m TopicMatch) {
	n.mu.Lock()
	n.match = m
	n.mu.Unlock()
}

func pairKey(a, b *Node) [2]*Node {
	if a.name > b.name {
		a, b = b, a
	}
	return [2]*Node{a, b}
}

// Partition cuts the link between a and b, both ways. Messages between them
// are held, not lost: Heal delivers those still within their send window;
// the rest are aborted when their window ends (Mycelium keeps retrying a
// message for its send window, then gives up).
func (n *Network) Partition(a, b *Node) {
	if a == b {
		return
	}
	n.mu.Lock()
	n.parts[pairKey(a, b)] = true
	n.mu.Unlock()
}

// Heal removes every partition and delivers the held messages.
func (n *Network) Heal() {
	n.mu.Lock()
	clear(n.parts)
	n.retryHeldLocked()
	n.mu.Unlock()
}

// Stats returns the counters.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.stats
	s.Held = len(n.held)
	now := time.Now()
	for _, nd := range n.nodes {
		s.Sending += len(nd.pending)
		for _, o := range nd.outbox {
			if now.Before(o.deadline.Add(o.deadline.Sub(o.created))) {
				s.Tasks++
			}
		}
	}
	return s
}

// WaitUntil calls cond whenever the network changes (a message sent,
// delivered, dropped, held, popped, …) until it returns true or ctx ends.
// cond runs without the network's lock, so it may call Stats, Inbox and the
// like.
func (n *Network) WaitUntil(ctx context.Context, cond func() bool) error {
	for {
		n.mu.Lock()
		ch := n.changed
		n.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notifyLocked wakes everyone waiting for a change.
func (n *Network) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// afterLocked runs f (with the lock held) after d, unless the network closes.
func (n *Network) afterLocked(d time.Duration, f func()) {
	if n.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.closed {
			return
		}
		delete(n.timers, t)
		f()
	})
	n.timers[t] = struct{}{}
}

// nodeForLocked returns the node whose subnet holds ip, or nil.
func (n *Network) nodeForLocked(ip netip.Addr) *Node {
	for _, nd := range n.nodes {
		if nd.id.Subnet.Contains(ip) {
			return nd
		}
	}
	return nil
}

// send puts a message on the network: it applies the drop, duplicate and
// delay switches and then delivers (or holds) it.
func (n *Network) send(e *envelope) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.stats.Sent++
	lost := false
	if n.dropNext > 0 {
		n.dropNext--
		lost = true
	} else if n.dropRate > 0 && n.rng.Float64() < n.dropRate {
		lost = true
	}
	if lost {
		n.stats.Dropped++
		n.expireLocked(e) // aborted at the deadline
		n.notifyLocked()
		return
	}
	e.copies = 1
	if n.dupNext > 0 {
		n.dupNext--
		e.copies = 2
		n.stats.Duplicated++
	}
	if n.delay > 0 {
		n.afterLocked(n.delay, func() { n.deliverLocked(e) })
		n.notifyLocked()
		return
	}
	n.deliverLocked(e)
}

// expireLocked arranges for e to be aborted at its deadline unless it is
// delivered first.
func (n *Network) expireLocked(e *envelope) {
	if e.expiry {
		return
	}
	e.expiry = true
	n.afterLocked(time.Until(e.deadline), func() { n.abortLocked(e) })
}

func (n *Network) abortLocked(e *envelope) {
	if e.done {
		return
	}
	e.done = true
	if e.held {
		e.held = false
		for i, h := range n.held {
			if h == e {
				n.held = append(n.held[:i], n.held[i+1:]...)
				break
			}
		}
	}
	if e.receiver != nil && e.receiver.pending[e.id] == e {
		delete(e.receiver.pending, e.id) // the ABORT the sender sends: the receiver drops it
	}
	if e.out.inFlight() {
		e.out.state = stateAborted
	}
	n.stats.Expired++
	n.notifyLocked()
}

// deliverLocked moves e on: the INIT to its receiver (which then holds it as a
// pending transfer while its chunks cross, with a transfer time), or the DONE that
// completes it into the receiver's inbox. It holds e while there is no route
// (partition, unknown destination).
func (n *Network) deliverLocked(e *envelope) {
	if e.done || n.closed {
		return
	}
	if !time.Now().Before(e.deadline) {
		n.abortLocked(e)
		return
	}
	dst := n.nodeForLocked(e.dstIP)
	if dst == nil || e.src != dst && n.parts[pairKey(e.src, dst)] {
		if !e.held {
			e.held = true
			n.held = append(n.held, e)
		}
		n.expireLocked(e)
		n.notifyLocked()
		return
	}
	switch {
	case e.receiver == nil && !e.reply && !dst.topics.accepts(e.topic, e.src.id.IP):
		// The receiver does not acknowledge it; the sender keeps trying until
		// the deadline, then aborts. Later topic changes do not revive it.
		n.stats.Rejected++
		n.expireLocked(e)
		n.notifyLocked()
		return
	case e.receiver == nil && n.transfer > 0:
		n.initLocked(e, dst)
		return
	case e.receiver != nil && (e.receiver != dst || dst.pending[e.id] != e):
		// The receiver lost the transfer (it restarted after the INIT): it ignores
		// the chunks and the DONE the sender resends until its window ends.
		n.stats.Lost++
		n.expireLocked(e)
		n.notifyLocked()
		return
	}
	if e.receiver == nil {
		n.stats.Chunks += e.chunks
	}
	delete(dst.pending, e.id)
	e.done = true
	for range e.copies {
		dst.receiveLocked(e)
	}
	if e.out.inFlight() {
		e.out.state = stateReceived
	}
	n.notifyLocked()
}

// initLocked: dst acknowledged e's INIT and holds it as a pending transfer; its
// chunks cross in the network's transfer time, then the DONE completes it.
func (n *Network) initLocked(e *envelope, dst *Node) {
	e.receiver = dst
	dst.pending[e.id] = e
	if e.out.state == statePending {
		e.out.state = stateSending
	}
	n.stats.Chunks += e.chunks
	n.expireLocked(e)
	n.afterLocked(n.transfer, func() { n.deliverLocked(e) })
	n.notifyLocked()
}

// retryHeldLocked tries to deliver every held message again.
func (n *Network) retryHeldLocked() {
	held := n.held
	n.held = nil
	for _, e := range held {
		e.held = false
		n.deliverLocked(e)
	}
	n.notifyLocked()
}

// matchTopicLocked applies the network's topic filter rule.
func (n *Network) matchTopicLocked(topic, filter []byte) bool {
	if n.match == TopicMatchExact {
		return bytes.Equal(topic, filter)
	}
	return bytes.HasPrefix(topic, filter)
}
