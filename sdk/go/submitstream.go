package hero

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/streambatch"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Submit's submissions travel over one SubmitJobStream per client (when the
// connection is signed once, or with an operator secret): a submission is a message
// on an open stream instead of a call of its own, which costs the client and the
// server a fraction of a call. Each caller still waits for its own answer. When the
// server takes batches (its stream header says "hero-stream-batch: 1"; the client says
// the same when it opens the stream, and the server then answers in batches too) the
// submissions go in flights: a flight is one message of the submissions made since
// the last one went, and up to submitWindow flights are out (sent, some of their
// answers awaited) at once. A submission made while the window is full is held, and
// the held ones go together as the next flight when a flight's last answer comes (or
// when they fill a batch): concurrent producers share messages as well as the stream,
// the flights' sizes follow the load (a group commit, no timer), a submission made
// alone goes at once, and the server stores one flight while the next one is on its
// way. Each answer is matched to its submission by seq, whatever the order in which
// the server answers. A stream that breaks fails the submissions waiting on it
// (Unavailable, as a call would) and the next submission opens another; a server
// without the method (Unimplemented) is sent calls from then on.

// submitWindow bounds the flights of a stream that are out at once, by default
// (Config.SubmitWindow).
const submitWindow = 4

// streamBatchItems bounds the submissions of a batch message (and streambatch.MaxBytes
// their size).
const streamBatchItems = 256

// errNoStream says the server does not serve SubmitJobStream: send a call instead.
var errNoStream = errors.New("hero: the server has no SubmitJobStream")

// submitStreams holds the client's open submission stream.
type submitStreams struct {
	cc          herov1.CoordinatorClient
	window      int // flights out at once (0: submitWindow)
	mu          sync.Mutex
	cur         *submitStream
	unsupported bool
}

// submitStream is one open SubmitJobStream and the submissions waiting on it.
type submitStream struct {
	st      grpc.BidiStreamingClient[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse]
	cancel  context.CancelFunc
	sendMu  sync.Mutex  // one Send or CloseSend at a time (the stream's rule)
	batches atomic.Bool // the server takes batch messages (its stream header said so)
	sender  streambatch.Sender[*outItem]
	mu      sync.Mutex
	seq     uint64
	pending map[uint64]pendingSubmit
	err     error         // set when the stream ended: what its waiting submissions got
	done    chan struct{} // closed when the stream ended
	// The client's group commit (with a server that takes batches): a submission
	// made while window flights are out is held, and the held ones go as one flight
	// when a flight's last answer came (flushing: one is on its way, counted in
	// flights) or when they fill a batch; with fewer out, a submission goes at once.
	window   int
	flights  int // the flights out (and the one flushing)
	held     []*outItem
	flushing *flight        // the flight the held ones go in, once flushHeld takes them
	owner    *submitStreams // ends the stream when a flush's send fails
	// flush wakes the stream's flusher (flusher) to send what was held: one
	// goroutine for the stream's life, not one per flight, which would grow a new
	// stack through the send every time.
	flush chan struct{}
}

// flight is the submissions sent together: left, those whose answers are awaited.
type flight struct{ left int }

// pendingSubmit is a submission whose answer is awaited: where to hand it, and the
// flight it went in (nil while held).
type pendingSubmit struct {
	ch chan streamAnswer
	f  *flight
}

// streamAnswer is a submission's outcome: its job (and whether it existed), or err.
type streamAnswer struct {
	job      *model.Job
	existing bool
	err      error
}

// stream returns the open stream, opening one when there is none.
func (s *submitStreams) stream() (*submitStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unsupported {
		return nil, errNoStream
	}
	if s.cur != nil {
		return s.cur, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := s.cc.SubmitJobStream(metadata.AppendToOutgoingContext(ctx, streambatch.Metadata, "1"), grpc.ForceCodecV2(newAnswerCodec()))
	if err != nil {
		cancel()
		return nil, err
	}
	ss := newSubmitStream(st, cancel)
	if s.window > 0 {
		ss.window = s.window
	}
	ss.owner = s
	s.cur = ss
	go s.receive(ss)
	return ss, nil
}

// receive hands each answer to its submission; when the stream ends it fails those
// still waiting and forgets the stream.
func (s *submitStreams) receive(ss *submitStream) {
	// The header comes before the first answer (an older server sends it with that
	// answer): until then submissions go one a message.
	if md, err := ss.st.Header(); err == nil && streambatch.Offered(md) {
		ss.batches.Store(true)
	}
	var m streamAnswers // each message's answers, decoded into the jobs (answerCodec)
	for {
		if err := ss.st.RecvMsg(&m); err != nil {
			s.end(ss, err)
			return
		}
		for _, a := range m.items {
			ss.answer(a.seq, a.a)
		}
	}
}

// answer hands the answer of submission seq to the submission waiting for it; the
// last of those out sends what was held meanwhile.
func (ss *submitStream) answer(seq uint64, a streamAnswer) {
	ss.mu.Lock()
	p, ok := ss.pending[seq]
	delete(ss.pending, seq)
	flush := ok && ss.landed(p.f)
	ss.mu.Unlock()
	if ok {
		p.ch <- a
	}
	if flush {
		// not from this goroutine: a send that waits on flow control must not hold
		// up the answers; and the producers woken meanwhile join the message
		ss.wakeFlusher()
	}
}

// wakeFlusher has the flusher send what was held (landed said so). It never waits:
// a wake-up not yet taken means the flusher has not yet taken the flight that one
// was for, and landed counts no other flight until it has (flushing).
func (ss *submitStream) wakeFlusher() {
	select {
	case ss.flush <- struct{}{}:
	default:
	}
}

// flusher sends what was held each time it is woken (wakeFlusher), until the stream
// ended.
func (ss *submitStream) flusher() {
	for {
		select {
		case <-ss.flush:
			ss.flushHeld()
		case <-ss.done:
			return
		}
	}
}

// landed counts an answer (or a submission given up) of flight f (ss.mu held): when
// it was the flight's last, the flight is no longer out, and true says the held ones
// are to be flushed (flushHeld), as the next flight, counted now.
func (ss *submitStream) landed(f *flight) bool {
	if f == nil { // held: not sent
		return false
	}
	if f.left--; f.left > 0 {
		return false
	}
	ss.flights--
	if len(ss.held) == 0 || ss.flushing != nil || ss.flights >= ss.window || ss.pending == nil {
		return false
	}
	ss.flushing = &flight{}
	ss.flights++
	return true
}

// hold takes a new submission (ss.mu held): it returns what to send now, itself
// with what was held before it (a flight), or nil when it is held (sent with the
// next flight: when a flight out landed, or when the held fill a batch). Without
// batch messages nothing is held (and flights are not counted).
func (ss *submitStream) hold(item *outItem) []*outItem {
	if !ss.batches.Load() {
		return []*outItem{item}
	}
	if (ss.flights < ss.window && ss.flushing == nil) || len(ss.held)+1 >= streamBatchItems {
		batch := append(ss.held, item)
		ss.held = nil
		ss.flights++
		ss.board(batch, &flight{})
		return batch
	}
	ss.held = append(ss.held, item)
	return nil
}

// board puts the submissions of batch still awaited in flight f (ss.mu held).
func (ss *submitStream) board(batch []*outItem, f *flight) {
	for _, r := range batch {
		if p, ok := ss.pending[r.seq]; ok {
			p.f = f
			ss.pending[r.seq] = p
			f.left++
		}
	}
	if f.left == 0 { // all of them given up: not out
		ss.flights--
	}
}

// flushHeld sends what was held, in one message: the flight counted by landed.
func (ss *submitStream) flushHeld() {
	ss.mu.Lock()
	batch, f := ss.held, ss.flushing
	ss.held, ss.flushing = nil, nil
	ended := ss.pending == nil
	if !ended {
		ss.board(batch, f)
	}
	ss.mu.Unlock()
	if len(batch) == 0 || ended {
		return
	}
	if err := ss.sender.SendAll(batch); err != nil && !errors.Is(err, io.EOF) {
		ss.owner.end(ss, err) // fails the submissions waiting on it
	}
}

// end closes a stream that failed with err.
func (s *submitStreams) end(ss *submitStream, err error) {
	switch {
	case status.Code(err) == codes.Unimplemented:
		err = errNoStream
	case errors.Is(err, io.EOF):
		err = status.Error(codes.Unavailable, "the server closed the submission stream")
	}
	s.mu.Lock()
	if s.cur == ss {
		s.cur = nil
	}
	if err == errNoStream {
		s.unsupported = true
	}
	s.mu.Unlock()
	ss.cancel()
	ss.mu.Lock()
	if ss.err != nil { // ended already
		ss.mu.Unlock()
		return
	}
	ss.err = err
	waiting := ss.pending
	ss.pending, ss.held = nil, nil
	close(ss.done)
	ss.mu.Unlock()
	for _, p := range waiting {
		p.ch <- streamAnswer{err: err}
	}
}

// closeWait bounds how long close waits for the server to end the stream.
const closeWait = 2 * time.Second

// close ends the open stream, if any: it closes its side and waits (at most
// closeWait) for the server to answer what is waiting and end the stream, so that
// the server sees a stream ended, not one cancelled.
func (s *submitStreams) close() {
	s.mu.Lock()
	ss := s.cur
	s.cur = nil
	s.mu.Unlock()
	if ss == nil {
		return
	}
	ss.sendMu.Lock()
	err := ss.st.CloseSend()
	ss.sendMu.Unlock()
	if err == nil {
		select {
		case <-ss.done:
		case <-time.After(closeWait):
		}
	}
	ss.cancel()
}

// submit sends one submission and waits for its answer (or ctx, or until when it is
// not zero: then as a context that ended at until). errNoStream: the server has no
// such method and nothing was submitted.
func (s *submitStreams) submit(ctx context.Context, until time.Time, req []byte) (*Submitted, error) {
	if err := ctx.Err(); err != nil { // as a call: nothing is sent for a caller that gave up
		return nil, status.FromContextError(err).Err()
	}
	if !until.IsZero() && !time.Now().Before(until) {
		return nil, status.FromContextError(context.DeadlineExceeded).Err()
	}
	ss, err := s.stream()
	if err != nil {
		return nil, err
	}
	ch := answerChans.Get().(chan streamAnswer)
	ss.mu.Lock()
	if ss.pending == nil { // ended meanwhile
		err := ss.err
		ss.mu.Unlock()
		return nil, err
	}
	ss.seq++
	item := &outItem{seq: ss.seq, b: appendStreamRequest(nil, ss.seq, req, traceparentOf(ctx))}
	ss.pending[item.seq] = pendingSubmit{ch: ch}
	batch := ss.hold(item)
	ss.mu.Unlock()
	if batch != nil {
		err = ss.sender.SendAll(batch)
	}
	if err != nil && !errors.Is(err, io.EOF) { // io.EOF: the stream ended; its status comes to ch
		// (the submissions it held wait on the stream, which end fails)
		ss.forget(item.seq)
		s.end(ss, err)
		return nil, err
	}
	var expired <-chan time.Time
	if !until.IsZero() {
		t := timers.Get().(*time.Timer)
		t.Reset(time.Until(until))
		defer stopTimer(t)
		expired = t.C
	}
	select {
	case a := <-ch:
		answerChans.Put(ch) // empty again, and no longer pending: nothing else sends to it
		if a.err != nil {
			return nil, a.err
		}
		return &Submitted{Job: a.job, Existing: a.existing}, nil
	case <-ctx.Done():
		ss.forget(item.seq)
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-expired:
		ss.forget(item.seq)
		return nil, status.FromContextError(context.DeadlineExceeded).Err()
	}
}

// answerChans are the channels on which submissions wait for their answers, each
// reused once its answer was taken (one allocation less a submission).
var answerChans = sync.Pool{New: func() any { return make(chan streamAnswer, 1) }}

// timers bound the waits of submissions made without a deadline of their own
// (stopped, then reused: stopTimer).
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// stopTimer stops t, empties its channel (a timer that fired under the channel
// semantics before Go 1.23, which a program's go.mod may ask for) and puts it back.
func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	timers.Put(t)
}

// newSubmitStream is an open stream's client side. Its submissions are sent by a
// streambatch.Sender: those made while one is being sent go next, in one message when
// the server takes batches (the sender first yields for them then: the producers just
// woken by their answers add their next submissions). A failed send's error goes to
// the submission that made it; the others it held wait on the stream, which fails.
func newSubmitStream(st grpc.BidiStreamingClient[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse], cancel context.CancelFunc) *submitStream {
	ss := &submitStream{st: st, cancel: cancel, pending: map[uint64]pendingSubmit{}, done: make(chan struct{}), window: submitWindow,
		flush: make(chan struct{}, 1)}
	ss.sender.Yield = ss.batches.Load
	ss.sender.Write = ss.write
	go ss.flusher()
	return ss
}

// write sends submissions: one a message, or, when the server takes batches, in as few
// batch messages as streamBatchItems and streambatch.MaxBytes allow. A submission
// whose caller gave up while it waited to be sent (its context ended: it is no longer
// pending) is left out, as a call cancelled before it is sent stores nothing.
func (ss *submitStream) write(out []*outItem) error {
	out = ss.stillWaited(out)
	if len(out) == 0 {
		return nil
	}
	items := make([][]byte, len(out))
	for i, it := range out {
		items[i] = it.b
	}
	ss.sendMu.Lock()
	defer ss.sendMu.Unlock()
	for _, m := range streambatch.Encoded(items, ss.batches.Load(), streamBatchItems, streambatch.MaxBytes, fieldRequestBatch, nil) {
		if err := ss.st.SendMsg(&encodedMsg{b: m}); err != nil {
			return err
		}
	}
	return nil
}

// stillWaited are the submissions of out whose callers still wait for them, in order.
func (ss *submitStream) stillWaited(out []*outItem) []*outItem {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.pending == nil { // the stream ended: its end answered them all
		return out
	}
	n := 0
	for _, r := range out {
		if _, ok := ss.pending[r.seq]; ok {
			n++
		}
	}
	if n == len(out) {
		return out
	}
	kept := make([]*outItem, 0, n)
	for _, r := range out {
		if _, ok := ss.pending[r.seq]; ok {
			kept = append(kept, r)
		}
	}
	return kept
}

// forget drops a submission whose caller gave up (or whose send failed): its flight
// no longer waits for its answer.
func (ss *submitStream) forget(seq uint64) {
	ss.mu.Lock()
	p, ok := ss.pending[seq]
	delete(ss.pending, seq)
	flush := ok && ss.landed(p.f)
	ss.mu.Unlock()
	if flush {
		ss.wakeFlusher()
	}
}

// answerOf is a stream answer as a call's outcome: its response, or its error as the
// status a SubmitJob call would have failed with.
func answerOf(r *herov1.SubmitJobStreamResponse) streamAnswer {
	if e := r.Error; e != nil {
		st := status.New(codes.Code(e.Code), e.Message)
		if e.RetryAfterMs > 0 {
			if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(e.RetryAfterMs) * time.Millisecond)}); err == nil {
				st = d
			}
		}
		return streamAnswer{err: st.Err()}
	}
	if r.Submit == nil {
		return streamAnswer{err: status.Errorf(codes.Internal, "submission %d: the server's answer has neither a job nor an error", r.Seq)}
	}
	return streamAnswer{job: jobOf(r.Submit.Job), existing: r.Submit.Existing}
}

// traceparentOf is the W3C traceparent the caller put in ctx's outgoing metadata (as
// for a call), "" when none.
func traceparentOf(ctx context.Context) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get("traceparent"); len(v) > 0 {
		return v[0]
	}
	return ""
}
