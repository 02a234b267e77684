package main

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/hero-coordinator/hero/lib/streambatch"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// streamInflight bounds the submissions of one SubmitJobStream being stored at once
// (and so its workers; a group commit stores up to maxGroupJobs at once anyway):
// beyond it the stream is not read until one is answered (the producer's sends wait on
// HTTP/2 flow control).
const streamInflight = maxGroupJobs

// itemStreams are the streaming methods whose items are observed one by one
// (hero_api_requests_total, hero_api_request_duration_seconds), not the stream as a
// whole.
var itemStreams = map[string]bool{herov1.Coordinator_SubmitJobStream_FullMethodName: true}

// SubmitJobStream serves job.submit over one stream: each request is a submission of
// its own (the same checks, rate limit and group commit as a SubmitJob call),
// answered when stored, in any order, by its seq; a refused one is answered with its
// error and the stream goes on. A request may carry several submissions (batch), each
// handled as if it came alone; to a client that takes batches, the answers ready
// while another is being sent go out together. The stream ends when the producer
// closes its side and every submission read has been answered; or, when the caller's
// credentials are revoked, at once (after the answers of the submissions being
// stored), with the refusal: its requests are received in a goroutine of their own.
//
// The submissions are stored by the stream's workers, started as more submissions
// wait at once (up to streamInflight) and kept until the stream ends: a goroutine
// per submission would grow a new stack through the store call every time.
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
	)
	worker := func(w streamWork) {
		defer wg.Done()
		for ok := true; ok; w, ok = <-work {
			_ = out.Send(c.streamSubmit(w.ctx, w.r, w.limit)) // a failed send ends the stream: the client learns it so
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
		items := r.Batch
		if len(items) > 0 {
			received(len(items))
		}
		if len(items) == 0 || r.Submit != nil { // a submission of its own (with a batch too: first)
			items = append([]*herov1.SubmitJobStreamRequest{{Seq: r.Seq, Submit: r.Submit, Traceparent: r.Traceparent}}, items...)
		}
		for _, it := range items {
			w := streamWork{ctx: ctx, r: it, limit: !first} // the context is authenticated by the opening message
			first = false
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

// streamIn is one request of a stream, or why none came.
type streamIn struct {
	r   *herov1.SubmitJobStreamRequest
	err error
}

// receive reads a stream's requests in a goroutine of its own, one ahead of the
// handler (which reads them from the channel); stop ends it once the handler is done.
func receive(st grpc.BidiStreamingServer[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse]) (<-chan streamIn, func()) {
	ch, done := make(chan streamIn), make(chan struct{})
	go func() {
		for {
			r, err := st.Recv()
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
// After a failed send the rest are dropped: the stream's end tells the client.
func answerSender(st grpc.BidiStreamingServer[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse], batches bool, observe func(items int)) *streambatch.Sender[*herov1.SubmitJobStreamResponse] {
	return &streambatch.Sender[*herov1.SubmitJobStreamResponse]{
		Yield: func() bool { return batches },
		Write: func(out []*herov1.SubmitJobStreamResponse) error {
			wrap := func(b []*herov1.SubmitJobStreamResponse) *herov1.SubmitJobStreamResponse {
				return &herov1.SubmitJobStreamResponse{Batch: b}
			}
			for _, m := range streambatch.Messages(out, batches, streamInflight, streambatch.MaxBytes, wrap) {
				if len(m.Batch) > 0 {
					observe(len(m.Batch))
				}
				if err := st.Send(m); err != nil {
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

// streamWork is one submission of a stream for its workers.
type streamWork struct {
	ctx   context.Context
	r     *herov1.SubmitJobStreamRequest
	limit bool
}

// streamSubmit stores one submission of a stream and makes its answer. limit: count it
// against the caller's rate (the opening one was counted when the stream was opened).
func (c *coordinatorServer) streamSubmit(ctx context.Context, r *herov1.SubmitJobStreamRequest, limit bool) *herov1.SubmitJobStreamResponse {
	start := time.Now()
	out := &herov1.SubmitJobStreamResponse{Seq: r.Seq}
	res, err := c.streamItem(ctx, r, limit)
	if err == nil {
		out.Submit = res
	} else {
		out.Error = streamError(grpcError(err))
	}
	if c.s.metrics != nil {
		code := codes.OK
		if out.Error != nil {
			code = codes.Code(out.Error.Code)
		}
		c.s.metrics.observe("grpc", "SubmitJobStream", code.String(), start)
	}
	return out
}

func (c *coordinatorServer) streamItem(ctx context.Context, r *herov1.SubmitJobStreamRequest, limit bool) (*herov1.SubmitJobResponse, error) {
	if err := streamRevoked(ctx); err != nil {
		return nil, err
	}
	// Once begun, a submission is stored and answered as it is, even if the stream's
	// context ends meanwhile: its answer must not say "refused" of a stored job.
	ctx = context.WithoutCancel(ctx)
	p := principal(ctx)
	if limit && c.limits != nil {
		if err := c.limits.allow(p.key(), 1); err != nil {
			return nil, err
		}
	}
	if r.Traceparent != "" {
		tctx, err := withTraceparent(ctx, []string{r.Traceparent})
		if err != nil {
			return nil, err
		}
		ctx = tctx
	}
	if len(r.Batch) > 0 {
		return nil, invalidParams("batch", "the stream item (seq %d) holds a batch: a batch's items are submissions", r.Seq)
	}
	sr := r.Submit
	if sr == nil {
		return nil, invalidParams("submit", "the stream item (seq %d) has no submission", r.Seq)
	}
	it := submitItemFromPB(sr.Job, sr.UniqueKey, sr.UniqueTtlSeconds, sr.RunAt, sr.Delay, debounceParams{DebounceKey: sr.DebounceKey, Debounce: sr.Debounce})
	x, err := c.s.jobSubmit(ctx, p, jobSubmitParams{ContextID: sr.ContextId, Job: it.Job, UniqueKey: it.UniqueKey, UniqueTTLSeconds: it.UniqueTTLSeconds, delayParams: it.delayParams, debounceParams: it.debounceParams})
	if err != nil {
		return nil, err
	}
	return submitResultToPB(*x), nil
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
