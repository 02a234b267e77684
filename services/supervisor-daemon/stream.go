package main

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/streambatch"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// streamInflight bounds the submissions of one SubmitJobStream being stored at once
// (a group commit stores up to maxGroupJobs at once anyway): beyond it the stream is
// not read until some are answered (the producer's sends wait on HTTP/2 flow control).
const streamInflight = maxGroupJobs

// itemStreams are the streaming methods whose items are observed one by one
// (hero_api_requests_total, hero_api_request_duration_seconds), not the stream as a
// whole.
var itemStreams = map[string]bool{herov1.Coordinator_SubmitJobStream_FullMethodName: true}

// SubmitJobStream serves job.submit over one stream: each request is a submission of
// its own (the same checks, rate limit and group commit as a SubmitJob call),
// answered when stored, in any order, by its seq; a refused one is answered with its
// error and the stream goes on. A request may carry several submissions (batch), each
// handled as if it came alone, but together: their context is authorized once, their
// jobs join the group commit together and their answers go in one message (to a
// client that takes batches; the answers ready while another is being sent go
// together too). The stream ends when the producer closes its side and every
// submission read has been answered; or, when the caller's credentials are revoked,
// at once (after the answers of the submissions being stored), with the refusal: its
// requests are received in a goroutine of their own.
//
// The requests are stored by the stream's workers, each a request's submissions (up
// to streamInflight) at a time, started as more requests wait at once and kept until
// the stream ends: a goroutine per request would grow a new stack through the store
// call every time.
func (c *coordinatorServer) SubmitJobStream(st grpc.BidiStreamingServer[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse]) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	if err := st.SendHeader(metadata.Pairs(streambatch.Metadata, "1")); err != nil {
		return err
	}
	var (
		wg       sync.WaitGroup
		out      = answerSender(st, streambatch.Offered(md), c.observeBatch("sent"))
		received = c.observeBatch("received")
		work     = make(chan streamWork)
		workers  int
		inflight = newInflight(streamInflight)
	)
	worker := func(w streamWork) {
		defer wg.Done()
		for ok := true; ok; w, ok = <-work {
			// a failed send ends the stream: the client learns it so
			_ = out.SendAll(c.streamSubmit(w.ctx, w.items))
			inflight.answered(len(w.items))
		}
	}
	defer wg.Wait()
	defer close(work)
	requests, stop := receive(st)
	defer stop()
	ctx := st.Context() // the stream's context once its opening message is authenticated
	first := true       // the opening submission was counted against the rate when the stream opened
	for {
		var in streamIn
		select {
		case in = <-requests:
		case <-ctx.Done():
			return streamEnd(ctx)
		}
		if errors.Is(in.err, io.EOF) {
			return nil
		}
		if in.err != nil {
			return in.err
		}
		ctx = st.Context()
		r := in.r
		items := r.batch
		if len(items) > 0 {
			received(len(items))
		}
		switch {
		case len(items) == 0: // a submission of its own
			items = []streamReq{r.first}
		case r.first.submit: // with a batch too: first
			items = append([]streamReq{r.first}, items...)
		}
		for len(items) > 0 {
			n := min(len(items), streamInflight)
			w := streamWork{ctx: ctx, items: make([]streamItem, n)}
			for i := range items[:n] {
				w.items[i] = streamItem{r: &items[i], limit: !first} // the context is authenticated by the opening message
				first = false
			}
			items = items[n:]
			if !inflight.take(ctx, n) {
				return streamEnd(ctx)
			}
			select {
			case work <- w: // an idle worker took it
				continue
			default:
			}
			if workers < streamInflight {
				workers++
				wg.Add(1)
				go worker(w)
				continue
			}
			select {
			case work <- w:
			case <-ctx.Done():
				return streamEnd(ctx)
			}
		}
	}
}

// inflight counts the submissions of a stream being stored, up to max: the stream's
// handler takes room for them (take), its workers give it back once they are
// answered (answered).
type inflight struct {
	max, n int      // n: the handler's count, which it alone reads and writes
	done   chan int // the submissions answered since, from the workers
}

func newInflight(max int) *inflight { return &inflight{max: max, done: make(chan int, max)} }

// take waits until n more submissions fit (or none is being stored: n ≤ max) and
// counts them; false when ctx ended first.
func (f *inflight) take(ctx context.Context, n int) bool {
	for more := true; more; { // what was answered meanwhile
		select {
		case k := <-f.done:
			f.n -= k
		default:
			more = false
		}
	}
	for f.n > 0 && f.n+n > f.max {
		select {
		case k := <-f.done:
			f.n -= k
		case <-ctx.Done():
			return false
		}
	}
	f.n += n
	return true
}

// answered gives back the room of k submissions answered. It never waits: the
// submissions counted are at most max, each of them in one send at most.
func (f *inflight) answered(k int) { f.done <- k }

// streamIn is one request of a stream, or why none came.
type streamIn struct {
	r   *streamRequest
	err error
}

// receive reads a stream's requests in a goroutine of its own, one ahead of the
// handler (which reads them from the channel); stop ends it once the handler is done.
// They are decoded into their submissions as they come (streamRequest), the opening
// one with its digest, which authenticates the stream.
func receive(st grpc.BidiStreamingServer[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse]) (<-chan streamIn, func()) {
	ch, done := make(chan streamIn), make(chan struct{})
	go func() {
		for opening := true; ; opening = false {
			r := &streamRequest{opening: opening}
			err := st.RecvMsg(r)
			select {
			case ch <- streamIn{r, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch, func() { close(done) }
}

// streamEnd is how a stream whose context ended ends: with the refusal of a
// revocation, or as the client's cancellation.
func streamEnd(ctx context.Context) error {
	if err := streamRevoked(ctx); err != nil {
		return grpcError(err)
	}
	return status.FromContextError(ctx.Err()).Err()
}

// answerSender sends a stream's answers (streambatch.Sender): those ready while one
// is being sent go next, in one message to a client that takes batches (which the
// sender first yields for: the workers a group commit has just answered add theirs).
// The messages are written as they travel (answerMessages), without their proto
// messages in between. After a failed send the rest are dropped: the stream's end
// tells the client.
func answerSender(st grpc.BidiStreamingServer[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse], batches bool, observe func(items int)) *streambatch.Sender[streamAnswer] {
	return &streambatch.Sender[streamAnswer]{
		Yield: func() bool { return batches },
		Write: func(out []streamAnswer) error {
			msgs, err := answerMessages(out, batches, streamInflight, streambatch.MaxBytes, observe)
			if err != nil {
				return status.Errorf(codes.Internal, "the answers: %v", err)
			}
			for _, m := range msgs {
				if err := st.SendMsg(&auth.Encoded{B: m}); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// observeBatch observes the items of a batch message (hero_api_stream_batch_items) in
// direction.
func (c *coordinatorServer) observeBatch(direction string) func(items int) {
	if c.batches == nil {
		return func(int) {}
	}
	h := c.batches.WithLabelValues(direction)
	return func(items int) { h.Observe(float64(items)) }
}

// streamWork is what a worker of a stream stores at once: the submissions of one
// request (or streamInflight of them).
type streamWork struct {
	ctx   context.Context
	items []streamItem
}

// streamItem is one submission of a stream. limit: count it against the caller's rate
// (the opening one was counted when the stream was opened).
type streamItem struct {
	r     *streamReq
	limit bool
}

// streamSubmit stores submissions of a stream (submitEach: each as if it came alone)
// and makes their answers, in order.
func (c *coordinatorServer) streamSubmit(ctx context.Context, items []streamItem) []streamAnswer {
	start := time.Now()
	out := make([]streamAnswer, len(items))
	errs := make([]error, len(items))
	revoked := streamRevoked(ctx)
	// Once begun, a submission is stored and answered as it is, even if the stream's
	// context ends meanwhile: its answer must not say "refused" of a stored job.
	ctx = context.WithoutCancel(ctx)
	p := principal(ctx)
	key := p.key() // the caller's rate, for each item but the opening one
	subs := make([]eachSubmit, 0, len(items))
	at := make([]int, 0, len(items)) // the item of each of subs
	for i, it := range items {
		out[i].seq = it.r.seq
		if revoked != nil {
			errs[i] = revoked
			continue
		}
		sub, err := c.checkStreamItem(ctx, key, it)
		if err != nil {
			errs[i] = err
			continue
		}
		subs = append(subs, sub)
		at = append(at, i)
	}
	if len(subs) > 0 {
		res, serrs := c.s.submitEach(ctx, p, subs, "job.submit")
		for n, i := range at {
			if serrs[n] != nil {
				errs[i] = serrs[n]
				continue
			}
			out[i].job, out[i].existing = res[n].Job, res[n].Existing
		}
	}
	results := make([]string, len(items)) // each item's code
	for i, err := range errs {
		results[i] = codes.OK.String()
		if err != nil {
			out[i].err = streamError(grpcError(err))
			results[i] = codes.Code(out[i].err.Code).String()
		}
	}
	if c.s.metrics != nil {
		c.s.metrics.observeAll("grpc", "SubmitJobStream", results, start)
	}
	return out
}

// checkStreamItem checks one submission of a stream (its rate, counted against the
// caller's key, its traceparent, its form) and makes it a submission for submitEach.
func (c *coordinatorServer) checkStreamItem(ctx context.Context, key string, it streamItem) (eachSubmit, error) {
	r := it.r
	if it.limit && c.limits != nil {
		if err := c.limits.allow(key, 1); err != nil {
			return eachSubmit{}, err
		}
	}
	tp := ""
	if r.tp != "" {
		tctx, err := withTraceparent(ctx, []string{r.tp})
		if err != nil {
			return eachSubmit{}, err
		}
		ctx, tp = tctx, traceparentOf(tctx)
	}
	if r.nested {
		return eachSubmit{}, invalidParams("batch", "the stream item (seq %d) holds a batch: a batch's items are submissions", r.seq)
	}
	if !r.submit {
		return eachSubmit{}, invalidParams("submit", "the stream item (seq %d) has no submission", r.seq)
	}
	item := submitItem{UniqueKey: r.uniqueKey, UniqueTTLSeconds: r.uniqueTTL, delayParams: delayParams{RunAt: r.runAt, Delay: r.delay},
		debounceParams: debounceParams{DebounceKey: r.debounceKey, Debounce: r.debounce}}
	if r.hasJob { // as submitItemFromPB: none given, none made (submission refuses it)
		item.Job = &r.job
	}
	return eachSubmit{ctx: ctx, tp: tp, ctxID: r.ctxID, item: item}, nil
}

// streamError is a refused item's status as the stream carries it.
func streamError(err error) *herov1.StreamError {
	st := status.Convert(err)
	out := &herov1.StreamError{Code: uint32(st.Code()), Message: st.Message()}
	if d := retryAfter(st); d > 0 {
		out.RetryAfterMs = uint64(d.Milliseconds())
	}
	return out
}

// retryAfter is the status's retry hint (RetryInfo), 0 when none.
func retryAfter(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			return ri.RetryDelay.AsDuration()
		}
	}
	return 0
}
