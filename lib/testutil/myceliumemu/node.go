package myceliumemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Transmission states reported by getMessageInfo. The emulator moves a
// message from pending (INIT not acknowledged) to sending (its chunks crossing,
// with a transfer time: SetTransferTime) to received (delivered) to read (popped
// or peeked by the receiver), or from pending or sending to aborted (send window
// over).
const (
	statePending  = "pending"
	stateSending  = "sending"
	stateReceived = "received"
	stateRead     = "read"
	stateAborted  = "aborted"
)

// Message is a message in a node's inbox, as a test sees it.
type Message struct {
	ID      string
	SrcIP   netip.Addr
	SrcPK   string
	DstIP   netip.Addr
	DstPK   string
	Topic   []byte // nil when the message has none (replies never have one)
	Payload []byte
	Reply   bool // it answers the earlier message with the same ID
}

type inMsg struct {
	Message
	out *outMsg // the sender's record, to mark it read
}

// Node is one emulated Mycelium node: an identity, an inbox, an outbox of
// sent-message records, topic rules, and an HTTP API on its own port.
type Node struct {
	net  *Network
	name string
	addr string // listen address; after the first start, the bound one

	// Guarded by net.mu.
	id      Identity // changes when the node restarts without its key file
	inbox   []*inMsg
	pending map[string]*envelope // transfers in progress to this node (INIT acknowledged, no DONE yet)
	outbox  map[string]*outMsg
	waiters map[string]chan Message // pushes waiting for a reply, by message id
	topics  topicConfig
	started time.Time
	garbage int // popMessage answers still to be garbage (GarbageNext)
	// Pop clients, told apart by their User-Agent (PollClients, MaxPollClients,
	// PollsBy): a test instrument, kept across Restart.
	pollers    map[string]int // client → its popMessage requests in progress
	maxPollers int            // the most distinct clients with a pop in progress at once
	pollsBy    map[string]int // client → popMessage requests it made

	lock nodeLock // the node-wide lock every API call takes

	apiMu  sync.Mutex
	srv    *http.Server
	ln     net.Listener
	cancel context.CancelFunc // ends the current API generation's requests
	url    string
}

func newNode(n *Network, id Identity, addr string) *Node {
	nd := &Node{net: n, name: id.Name, id: id, addr: addr, outbox: map[string]*outMsg{}, pending: map[string]*envelope{},
		waiters: map[string]chan Message{}, topics: newTopicConfig(), started: time.Now()}
	nd.lock.queued = func() {
		n.mu.Lock()
		n.notifyLocked()
		n.mu.Unlock()
	}
	return nd
}

// Name returns the node's name.
func (nd *Node) Name() string { return nd.name }

// Identity returns the node's name, public key, address and subnet.
func (nd *Node) Identity() Identity {
	nd.net.mu.Lock()
	defer nd.net.mu.Unlock()
	return nd.id
}

// PK returns the node's public key (64 hex characters).
func (nd *Node) PK() string { return nd.Identity().PK }

// IP returns the node's overlay address.
func (nd *Node) IP() netip.Addr { return nd.Identity().IP }

// Subnet returns the node's /64 overlay subnet.
func (nd *Node) Subnet() netip.Prefix { return nd.Identity().Subnet }

// URL returns the base URL of the node's API, e.g. "http://127.0.0.1:40123".
// It stays the same across StopAPI/StartAPI.
func (nd *Node) URL() string {
	nd.apiMu.Lock()
	defer nd.apiMu.Unlock()
	return nd.url
}

// StartAPI serves the node's HTTP API (again) on its address. Starting a
// running API does nothing.
func (nd *Node) StartAPI() error {
	nd.apiMu.Lock()
	defer nd.apiMu.Unlock()
	if nd.srv != nil {
		return nil
	}
	nd.net.mu.Lock()
	closed := nd.net.closed
	nd.net.mu.Unlock()
	if closed {
		return errors.New("myceliumemu: network closed")
	}
	ln, err := net.Listen("tcp", nd.addr)
	if err != nil {
		return err
	}
	nd.addr = ln.Addr().String()
	nd.url = "http://" + nd.addr
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           nd.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	nd.srv, nd.cancel, nd.ln = srv, cancel, ln
	go srv.Serve(ln)
	return nil
}

// StopAPI closes the node's HTTP API: the listener and every open
// connection, including long polls in progress (their clients see the
// connection drop). The node stays on the network: messages sent to it are
// still delivered to its inbox, as when only a Mycelium daemon's API is
// unreachable. StartAPI brings the API back on the same port.
func (nd *Node) StopAPI() {
	nd.apiMu.Lock()
	defer nd.apiMu.Unlock()
	if nd.srv == nil {
		return
	}
	// The connections go first: a long poll cancelled before its connection is
	// closed would answer (an empty 200) instead of dropping, as a dead API does.
	_ = nd.srv.Close()
	// Serve may not have taken the listener yet (then Close does not close it): closed
	// here, so that the port is free for StartAPI at once.
	_ = nd.ln.Close()
	nd.cancel()
	nd.srv, nd.cancel, nd.ln = nil, nil, nil
}

// APIRunning reports whether the HTTP API is being served.
func (nd *Node) APIRunning() bool {
	nd.apiMu.Lock()
	defer nd.apiMu.Unlock()
	return nd.srv != nil
}

// Restart emulates a restart of the Mycelium process: the API goes down, the
// inbox, the outbox records, waiting pushes, topic configuration and transfers in
// progress to this node are lost (a node keeps them in memory only: a message
// whose INIT it had acknowledged is lost for good, its sender only resends chunks),
// messages this node had not delivered yet are abandoned, and the API comes back
// on the same port with a new start time. The identity is kept: it comes from the
// node's key file (RestartWithoutKeyFile for a node without one).
func (nd *Node) Restart() error { return nd.restart(false) }

// RestartWithoutKeyFile is Restart for a node whose key is not saved (no key file,
// or one on storage that did not survive): it comes back with a new identity — a new
// key, hence a new overlay address and subnet. Messages for its old key find no
// node: they are held until their send window ends, then aborted.
func (nd *Node) RestartWithoutKeyFile() error { return nd.restart(true) }

func (nd *Node) restart(newKey bool) error {
	nd.StopAPI()
	n := nd.net
	n.mu.Lock()
	if newKey {
		var b [16]byte
		rand.Read(b[:])
		nd.id = DeriveIdentity(hex.EncodeToString(b[:]), nd.name)
	}
	nd.inbox = nil
	nd.outbox = map[string]*outMsg{}
	nd.waiters = map[string]chan Message{}
	nd.topics = newTopicConfig()
	nd.pending = map[string]*envelope{}
	nd.started = time.Now()
	kept := n.held[:0]
	for _, e := range n.held {
		if e.src == nd {
			e.held, e.done = false, true
			continue
		}
		kept = append(kept, e)
	}
	n.held = kept
	if newKey {
		n.retryHeldLocked() // a held message for the new address finds it
	}
	n.notifyLocked()
	n.mu.Unlock()
	return nd.StartAPI()
}

// GarbageNext makes the node's next k popMessage answers a 200 whose body is not
// JSON (what a confused proxy or a broken node build sends). No message is taken
// by such an answer.
func (nd *Node) GarbageNext(k int) {
	nd.net.mu.Lock()
	nd.garbage += k
	nd.net.mu.Unlock()
}

// pollClient records a popMessage request of client in progress until the returned
// function is called.
func (nd *Node) pollClient(client string) (done func()) {
	n := nd.net
	n.mu.Lock()
	if nd.pollers == nil {
		nd.pollers, nd.pollsBy = map[string]int{}, map[string]int{}
	}
	nd.pollers[client]++
	nd.pollsBy[client]++
	nd.maxPollers = max(nd.maxPollers, len(nd.pollers))
	n.notifyLocked()
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		if nd.pollers[client]--; nd.pollers[client] == 0 {
			delete(nd.pollers, client)
		}
		n.notifyLocked()
		n.mu.Unlock()
	}
}

// PollClients returns how many distinct clients (told apart by their User-Agent
// header) have a popMessage request in progress on this node now, waiting for the
// node's lock or holding it.
func (nd *Node) PollClients() int {
	nd.net.mu.Lock()
	defer nd.net.mu.Unlock()
	return len(nd.pollers)
}

// MaxPollClients returns the most distinct clients that had a popMessage request in
// progress on this node at the same time: 1 when one consumer at a time used its
// inbox.
func (nd *Node) MaxPollClients() int {
	nd.net.mu.Lock()
	defer nd.net.mu.Unlock()
	return nd.maxPollers
}

// PollsBy returns how many popMessage requests (peeks included) each client, named
// by its User-Agent header, made on this node.
func (nd *Node) PollsBy() map[string]int {
	nd.net.mu.Lock()
	defer nd.net.mu.Unlock()
	out := make(map[string]int, len(nd.pollsBy))
	for k, v := range nd.pollsBy {
		out[k] = v
	}
	return out
}

// LockWaits returns how many API calls on this node had to wait for the node's
// lock (held by a long poll or another call). A call starting to wait is a change
// that Network.WaitUntil sees.
func (nd *Node) LockWaits() int { return nd.lock.waited() }

// Inbox returns a copy of the messages waiting in the node's inbox, oldest
// first.
func (nd *Node) Inbox() []Message {
	nd.net.mu.Lock()
	defer nd.net.mu.Unlock()
	out := make([]Message, len(nd.inbox))
	for i, m := range nd.inbox {
		out[i] = m.Message
		out[i].Topic = clone(m.Topic)
		out[i].Payload = clone(m.Payload)
	}
	return out
}

// InboxLen returns the number of messages in the node's inbox.
func (nd *Node) InboxLen() int {
	nd.net.mu.Lock()
	defer nd.net.mu.Unlock()
	return len(nd.inbox)
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// receiveLocked takes one copy of e: a reply goes to the push waiting for it
// if there is one, anything else to the inbox.
func (nd *Node) receiveLocked(e *envelope) {
	n := nd.net
	n.stats.Delivered++
	m := Message{ID: e.id, SrcIP: e.src.id.IP, SrcPK: e.src.id.PK, DstIP: e.dstIP, DstPK: nd.id.PK,
		Topic: clone(e.topic), Payload: clone(e.payload), Reply: e.reply}
	if len(m.Topic) == 0 {
		m.Topic = nil
	}
	if e.reply {
		if ch, ok := nd.waiters[e.id]; ok {
			delete(nd.waiters, e.id)
			ch <- m // buffered, and only ever sent once
			return
		}
	}
	nd.inbox = append(nd.inbox, &inMsg{Message: m, out: e.out})
}

// takeLocked returns the oldest inbox message matching filter (nil: any),
// removing it unless peek.
func (nd *Node) takeLocked(filter []byte, peek bool) (Message, bool) {
	n := nd.net
	for i, m := range nd.inbox {
		if filter != nil && !n.matchTopicLocked(m.Topic, filter) {
			continue
		}
		if !peek {
			nd.inbox = append(nd.inbox[:i], nd.inbox[i+1:]...)
			n.stats.Popped++
		}
		if m.out != nil && (m.out.state == stateReceived || m.out.inFlight()) {
			m.out.state = stateRead
		}
		n.notifyLocked()
		return m.Message, true
	}
	return Message{}, false
}

// push records and sends a new message (or a reply, with replyTo set) from
// this node.
func (nd *Node) push(dstIP netip.Addr, topic, payload []byte, replyTo string, waiter chan Message) string {
	n := nd.net
	now := time.Now()
	n.mu.Lock()
	id := replyTo
	for id == "" {
		var b [8]byte
		rand.Read(b[:])
		if id = hex.EncodeToString(b[:]); nd.outbox[id] != nil {
			id = ""
		}
	}
	for k, o := range nd.outbox { // forget records well past their deadline
		if now.Sub(o.deadline) > n.window {
			delete(nd.outbox, k)
		}
	}
	chunks := (len(payload) + ChunkSize - 1) / ChunkSize
	out := &outMsg{dst: dstIP, state: statePending, created: now, deadline: now.Add(n.window), size: len(payload), chunks: chunks}
	nd.outbox[id] = out
	if waiter != nil {
		nd.waiters[id] = waiter
	}
	e := &envelope{id: id, src: nd, dstIP: dstIP, topic: clone(topic), payload: clone(payload),
		reply: replyTo != "", chunks: chunks, deadline: out.deadline, out: out}
	n.mu.Unlock()
	n.send(e)
	return id
}
