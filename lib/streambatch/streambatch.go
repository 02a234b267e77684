// Package streambatch sends the messages of one gRPC stream one sender at a time
// (the stream's rule), those made while one is being sent together: the end of a
// SubmitJobStream that takes batches puts several submissions, or answers, in one
// message. Nothing waits on a timer: a message made when none is being sent goes at
// once.
package streambatch

import (
	"runtime"
	"slices"
	"sync"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Metadata is the key with which each end of a stream says it takes batch messages
// (value "1"): the client in the stream's opening metadata, the server in its header.
const Metadata = "hero-stream-batch"

// MaxBytes bounds a batch message's items (gRPC's default limit of a received message
// is 4 MiB): an item above it goes alone.
const MaxBytes = 1 << 20

// Offered reports whether md (a stream's opening metadata or its header) says its
// sender takes batch messages.
func Offered(md metadata.MD) bool { return slices.Contains(md.Get(Metadata), "1") }

// Sender queues items for Write. The first Send of a burst becomes the sender: it
// takes the queue (after yielding once when Yield says so), writes it, and takes
// what was queued meanwhile, until the queue is empty; a Send made while another
// sends returns at once. A Write error sticks: later items are dropped and their Send
// returns it.
type Sender[T any] struct {
	// Write sends items, in order (Messages makes the stream's messages of them).
	Write func(items []T) error
	// Yield, when it returns true, has the sender yield once (runtime.Gosched) before
	// it takes the queue. A gRPC Send only hands its message to the transport, so the
	// items about to be made by goroutines ready to run (the workers a group commit
	// has just answered, the producers just woken by their answers) would each follow
	// in a message of their own; after the yield they join this one.
	Yield func() bool

	mu      sync.Mutex
	queue   []T
	sending bool
	failed  error
}

// Send queues item and, unless another Send is sending, sends the queue. It returns
// the error of a Write this call made (or an earlier one's).
func (s *Sender[T]) Send(item T) error { return s.SendAll([]T{item}) }

// SendAll is Send for several items at once: they are queued together, in order (a
// Write takes them in one call, with what waited before them).
func (s *Sender[T]) SendAll(items []T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failed
	}
	s.queue = append(s.queue, items...)
	if s.sending {
		return nil // the sender sends it next
	}
	s.sending = true
	if s.Yield != nil && s.Yield() {
		s.mu.Unlock()
		runtime.Gosched()
		s.mu.Lock()
	}
	for len(s.queue) > 0 && s.failed == nil {
		out := s.queue
		s.queue = nil
		s.mu.Unlock()
		err := s.Write(out)
		s.mu.Lock()
		s.failed = err
	}
	s.queue, s.sending = nil, false
	return s.failed
}

// Messages are the messages that carry items, in order: one each without batches;
// with them, batches of at most maxItems and, but for a single larger item, maxBytes
// of their encoding, each wrapped by wrap (a batch of one is its
// item, sent as is).
func Messages[T proto.Message](items []T, batches bool, maxItems, maxBytes int, wrap func([]T) T) []T {
	if !batches {
		return items
	}
	var out []T
	for _, b := range split(items, maxItems, maxBytes) {
		if len(b) == 1 {
			out = append(out, b[0])
			continue
		}
		out = append(out, wrap(b))
	}
	return out
}

// split cuts items into batches of at most maxItems and, but for a single larger
// item, maxBytes of their encoding.
func split[T proto.Message](items []T, maxItems, maxBytes int) [][]T {
	var out [][]T
	for len(items) > 0 {
		n, size := 1, proto.Size(items[0])
		for ; n < len(items) && n < maxItems; n++ {
			if size += proto.Size(items[n]); size > maxBytes {
				break
			}
		}
		out = append(out, items[:n])
		items = items[n:]
	}
	return out
}

// Encoded is Messages for items already encoded (each one item's message, alone):
// the encoded messages that carry them, in order, cut as Messages cuts them (at most
// maxItems, and but for a single larger item maxBytes of their encoding, a batch), a
// batch being its items as the repeated message field batchField, a batch of one its
// item as it is. observe, when not nil, is told the items of each batch message.
func Encoded(items [][]byte, batches bool, maxItems, maxBytes int, batchField protowire.Number, observe func(items int)) [][]byte {
	if !batches {
		return items
	}
	out := make([][]byte, 0, 1)
	for i := 0; i < len(items); {
		n, size := 1, len(items[i])
		for i+n < len(items) && n < maxItems && size+len(items[i+n]) <= maxBytes {
			size += len(items[i+n])
			n++
		}
		if n == 1 {
			out = append(out, items[i])
			i++
			continue
		}
		m := make([]byte, 0, size+n*(protowire.SizeTag(batchField)+protowire.SizeVarint(uint64(size))))
		for _, it := range items[i : i+n] {
			m = protowire.AppendTag(m, batchField, protowire.BytesType)
			m = protowire.AppendBytes(m, it)
		}
		if observe != nil {
			observe(n)
		}
		out = append(out, m)
		i += n
	}
	return out
}
