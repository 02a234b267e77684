// Package groupcommit gathers work that many goroutines submit one item at a time
// into groups that one call handles together (a database's group commit): the first
// item waiting starts a group, and every item that arrives while a group is being
// handled joins the next one. There is no timer: under light load each group is a
// single item and waits for nothing; under heavy load groups grow up to a maximum and
// the per-call cost (a Redis round trip, an RPC) is shared by all their items. Up to
// Inflight groups are handled at once (default one): the next group starts as soon as
// fewer are, so that the caller's work on one group (encoding, decoding) overlaps the
// server's on another. With Beside, a group starts beside others only while they are
// small (light load: an item need not wait for the call in flight to return); under
// heavy load the groups go one after the other and stay large.
package groupcommit

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
)

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("groupcommit: closed")

// Func handles a group. It returns one result and one error per item (in order); a
// short answer fails the items it leaves out.
type Func[T, R any] func(ctx context.Context, items []T) ([]R, []error)

// Params configure a Committer.
type Params[T, R any] struct {
	Fn  Func[T, R]
	Max int // items per group (default 64)
	// Inflight bounds the groups handled at once (default 1). With more than one,
	// groups handled side by side may end in any order: items handed in together
	// (DoMany) beyond Max, or by callers that did not wait for each other, have no
	// order between them.
	Inflight int
	// Beside (with Inflight > 1; 0: no bound) is how many items the groups being
	// handled may hold in all for another group to start beside them: a group waits
	// for the calls in flight to return (and takes in the items that arrive meanwhile)
	// while they hold more. Under light load the groups are small and each starts at
	// once; under heavy load they grow past Beside and go one at a time, as large as
	// with Inflight 1 (calls side by side would each take half the items).
	Beside int
}

// Committer gathers groups in its own goroutine and handles up to Inflight of them at
// once (with Inflight > 1, each on one of Inflight goroutines of its own), until Close.
type Committer[T, R any] struct {
	fn       Func[T, R]
	max      int
	inflight int // Params.Inflight
	beside   int // Params.Beside
	// flightMu guards groups and items, the groups being handled and their items (with
	// Inflight > 1); freed is signalled when one of them is handled.
	flightMu sync.Mutex
	groups   int
	items    int
	freed    chan struct{}
	running  sync.WaitGroup
	// work hands an admitted group to one of Inflight goroutines that live as long
	// as the Committer (with Inflight > 1): a goroutine per group started with a small
	// stack and grew it again in each group's call (the runner's finish: ~4% of its
	// CPU in stack copies).
	work    chan []*request[T, R]
	ch      chan *request[T, R]
	closing chan struct{}
	mu      sync.RWMutex // held for reading while a Do sends, for writing to close
	closed  bool
	wg      sync.WaitGroup
}

type request[T, R any] struct {
	item T
	res  R
	err  error
	done chan struct{} // closed when handled; nil for an item of DoMany (many)
	many *manyWait
}

// manyWait is what the items of one DoMany wait on together: the last one handled
// closes done.
type manyWait struct {
	left atomic.Int64
	done chan struct{}
}

// handled marks r handled: its waiter (DoMany's once all its items are) may go on.
func (r *request[T, R]) handled() {
	if r.many == nil {
		close(r.done)
		return
	}
	if r.many.left.Add(-1) == 0 {
		close(r.many.done)
	}
}

// New starts a Committer.
func New[T, R any](p Params[T, R]) *Committer[T, R] {
	if p.Max <= 0 {
		p.Max = 64
	}
	if p.Inflight <= 0 {
		p.Inflight = 1
	}
	c := &Committer[T, R]{fn: p.Fn, max: p.Max, ch: make(chan *request[T, R], 4*p.Max), closing: make(chan struct{}),
		inflight: p.Inflight, beside: max(p.Beside, 0), freed: make(chan struct{}, 1)}
	if p.Inflight > 1 {
		c.work = make(chan []*request[T, R], p.Inflight)
		c.wg.Add(p.Inflight)
		for range p.Inflight {
			go c.handler()
		}
	}
	c.wg.Add(1)
	go c.loop()
	return c
}

// handler handles the groups loop admits beside others, until loop ends (it closes
// work).
func (c *Committer[T, R]) handler() {
	defer c.wg.Done()
	for group := range c.work {
		c.run(group)
		c.handled(len(group))
		c.running.Done()
	}
}

// Do submits an item and waits for its result. ctx bounds the wait to be taken into
// a group; once its group is being handled the item's result is awaited (the group's
// call gets a context of its own, so that one caller giving up cannot fail the rest).
func (c *Committer[T, R]) Do(ctx context.Context, item T) (R, error) {
	r := &request[T, R]{item: item, done: make(chan struct{})}
	var zero R
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return zero, ErrClosed
	}
	select {
	case c.ch <- r:
		c.mu.RUnlock()
	case <-ctx.Done():
		c.mu.RUnlock()
		return zero, ctx.Err()
	}
	<-r.done
	return r.res, r.err
}

// DoMany is Do for several items at once, each with its own result and error, in
// order: they are handed in together, so that they join the same group (or, beyond
// Max, the next ones), and their caller waits once for them all instead of once per
// item. ctx bounds the wait to be taken into a group: an item not handed in when it
// ends gets its error; those handed in are awaited.
func (c *Committer[T, R]) DoMany(ctx context.Context, items []T) ([]R, []error) {
	res, errs := make([]R, len(items)), make([]error, len(items))
	if len(items) == 0 {
		return res, errs
	}
	reqs := make([]request[T, R], len(items))
	w := &manyWait{done: make(chan struct{})}
	w.left.Store(int64(len(items)))
	sent := 0
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		for i := range errs {
			errs[i] = ErrClosed
		}
		return res, errs
	}
send:
	for i := range reqs {
		reqs[i].item, reqs[i].many = items[i], w
		select {
		case c.ch <- &reqs[i]:
			sent++
		case <-ctx.Done():
			break send
		}
	}
	c.mu.RUnlock()
	if sent < len(items) {
		for i := sent; i < len(items); i++ {
			errs[i] = ctx.Err()
		}
		if w.left.Add(int64(sent-len(items))) == 0 {
			close(w.done)
		}
	}
	<-w.done
	for i := range sent {
		res[i], errs[i] = reqs[i].res, reqs[i].err
	}
	return res, errs
}

// Queued is the number of items handed in that wait for a group (a group being
// handled holds none of them).
func (c *Committer[T, R]) Queued() int { return len(c.ch) }

// Close handles what was submitted and stops the goroutine. Call it after the last Do.
func (c *Committer[T, R]) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.closing)
	}
	c.mu.Unlock()
	c.wg.Wait()
}

func (c *Committer[T, R]) loop() {
	defer c.wg.Done()
	defer func() {
		c.running.Wait()
		if c.work != nil {
			close(c.work) // the handlers end
		}
	}()
	one := c.inflight == 1
	group := make([]*request[T, R], 0, c.max)
	for {
		if !one {
			group = make([]*request[T, R], 0, c.max) // the last one is being handled
		}
		group = group[:0]
		select {
		case r := <-c.ch:
			group = append(group, r)
		case <-c.closing:
			// Handle what is still queued, then stop.
			c.running.Wait()
			for {
				select {
				case r := <-c.ch:
					c.run([]*request[T, R]{r})
				default:
					return
				}
			}
		}
		// Let the callers that are ready to run hand in their items first: they join
		// this group instead of each waiting for a group of its own.
		runtime.Gosched()
		c.fill(&group)
		if one {
			c.run(group)
			continue
		}
		c.admit(&group)
		c.running.Add(1)
		c.work <- group // admitted: fewer than Inflight are handled, a handler is free or about to be
	}
}

// admit waits until group may be handled beside those being handled (fewer than
// Inflight are, and they hold at most Beside items) and counts it among them; the items
// that arrive meanwhile join it.
func (c *Committer[T, R]) admit(group *[]*request[T, R]) {
	for {
		c.flightMu.Lock()
		if c.groups < c.inflight && (c.groups == 0 || c.beside == 0 || c.items <= c.beside) {
			c.groups++
			c.items += len(*group)
			c.flightMu.Unlock()
			return
		}
		c.flightMu.Unlock()
		<-c.freed
		c.fill(group)
	}
}

// handled counts a group of n items handled and wakes admit.
func (c *Committer[T, R]) handled(n int) {
	c.flightMu.Lock()
	c.groups--
	c.items -= n
	c.flightMu.Unlock()
	select {
	case c.freed <- struct{}{}:
	default:
	}
}

// fill adds to group the items waiting, up to Max.
func (c *Committer[T, R]) fill(group *[]*request[T, R]) {
	for len(*group) < c.max {
		select {
		case r := <-c.ch:
			*group = append(*group, r)
		default:
			return
		}
	}
}

func (c *Committer[T, R]) run(group []*request[T, R]) {
	items := make([]T, len(group))
	for i, r := range group {
		items[i] = r.item
	}
	res, errs := c.fn(context.Background(), items)
	for i, r := range group {
		switch {
		case i < len(errs) && errs[i] != nil:
			r.err = errs[i]
		case i < len(res):
			r.res = res[i]
		default:
			r.err = errors.New("groupcommit: no result for the item")
		}
		r.handled()
	}
}
