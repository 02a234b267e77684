package hero

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// streamServer serves SubmitJobStream: it answers a batch of submissions in reverse
// order once `batch` of them arrived, refuses the script "refuse" (InvalidArgument),
// rate-limits the script "limited" once (ResourceExhausted with a retry hint) and
// breaks the stream at the script "break" (each such break once per key). With
// batches, its header says it takes batch messages, and it answers a client that
// said the same in batch messages.
type streamServer struct {
	herov1.UnimplementedCoordinatorServer
	batch   int
	batches bool
	clients []string // each stream's opening hero-stream-batch metadata
	msgs    int      // messages received
	mu      sync.Mutex
	streams int
	auth    []string
	seen    map[string]int // script → submissions received
	tps     []string
	ended   chan error // the error that ended each stream's reading (io.EOF: the client closed its side)
	// received, when set, is told each submission's script as it arrives
	received chan string
}

func (s *streamServer) SubmitJobStream(st grpc.BidiStreamingServer[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse]) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	s.mu.Lock()
	s.streams++
	s.auth = append(s.auth, md.Get("authorization")...)
	s.clients = append(s.clients, strings.Join(md.Get("hero-stream-batch"), ","))
	s.mu.Unlock()
	batched := s.batches && slices.Contains(md.Get("hero-stream-batch"), "1")
	if s.batches {
		if err := st.SendHeader(metadata.Pairs("hero-stream-batch", "1")); err != nil {
			return err
		}
	}
	var held []*herov1.SubmitJobStreamRequest
	for {
		m, err := st.Recv()
		if err != nil {
			if s.ended != nil {
				s.ended <- err
			}
			return nil
		}
		s.mu.Lock()
		s.msgs++
		s.mu.Unlock()
		items := m.Batch
		if len(items) == 0 {
			items = []*herov1.SubmitJobStreamRequest{m}
		}
		for _, r := range items {
			if err := s.take(st, r, &held, batched); err != nil {
				return err
			}
		}
		// A client that takes batches sends more only when its answers came (its
		// group commit): a batch message's submissions are answered at its end.
		if batched && len(held) > 0 {
			if err := s.answerHeld(st, &held, batched); err != nil {
				return err
			}
		}
	}
}

// take handles one submission: it holds it until `batch` are held, then answers them
// (in one batch message when batched).
func (s *streamServer) take(st grpc.BidiStreamingServer[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse], r *herov1.SubmitJobStreamRequest, held *[]*herov1.SubmitJobStreamRequest, batched bool) error {
	script := r.Submit.GetJob().GetScript()
	s.mu.Lock()
	s.seen[script]++
	n := s.seen[script]
	if r.Traceparent != "" {
		s.tps = append(s.tps, r.Traceparent)
	}
	s.mu.Unlock()
	if s.received != nil {
		s.received <- script
	}
	if script == "break" && n == 1 {
		return status.Error(codes.Unavailable, "the server went away")
	}
	*held = append(*held, r)
	if len(*held) < s.batch {
		return nil
	}
	return s.answerHeld(st, held, batched)
}

// answerHeld answers the submissions held, in reverse order.
func (s *streamServer) answerHeld(st grpc.BidiStreamingServer[herov1.SubmitJobStreamRequest, herov1.SubmitJobStreamResponse], held *[]*herov1.SubmitJobStreamRequest, batched bool) error {
	var out []*herov1.SubmitJobStreamResponse
	for i := len(*held) - 1; i >= 0; i-- {
		r := (*held)[i]
		s.mu.Lock()
		n := s.seen[r.Submit.GetJob().GetScript()]
		s.mu.Unlock()
		out = append(out, s.answer(r, n))
	}
	*held = (*held)[:0]
	if batched {
		return st.Send(&herov1.SubmitJobStreamResponse{Batch: out})
	}
	for _, a := range out {
		if err := st.Send(a); err != nil {
			return err
		}
	}
	return nil
}

func (s *streamServer) answer(r *herov1.SubmitJobStreamRequest, n int) *herov1.SubmitJobStreamResponse {
	j := r.Submit.Job
	switch {
	case j.Script == "refuse":
		return &herov1.SubmitJobStreamResponse{Seq: r.Seq, Error: &herov1.StreamError{Code: uint32(codes.InvalidArgument), Message: "job.script: refused"}}
	case j.Script == "limited" && n == 1:
		return &herov1.SubmitJobStreamResponse{Seq: r.Seq, Error: &herov1.StreamError{Code: uint32(codes.ResourceExhausted), Message: "too many requests", RetryAfterMs: 10}}
	}
	return &herov1.SubmitJobStreamResponse{Seq: r.Seq, Submit: &herov1.SubmitJobResponse{Job: &herov1.Job{Id: 100 + uint32(r.Seq), Script: j.Script}}}
}

// submitConcurrently makes n submissions at once ("echo <i>") and checks that each
// is answered with its own job.
func submitConcurrently(ctx context.Context, c *Client, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			script := fmt.Sprintf("echo %d", i)
			r, err := c.Submit(ctx, &model.Job{ScriptType: model.ScriptSh, Script: script}, SubmitOptions{})
			if err == nil && (r.Job.Script != script || r.Job.ID <= 100) {
				err = fmt.Errorf("submission %q answered with %+v", script, r.Job)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Concurrent submissions share one stream; each caller gets its own answer though
// the server answers out of order.
func TestSubmitSharesOneStream(t *testing.T) {
	s := &streamServer{batch: 8, seen: map[string]int{}, ended: make(chan error, 1)}
	c := serve(t, s)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if err := submitConcurrently(ctx, c, 32); err != nil {
		t.Fatal(err)
	}
	if s.streams != 1 || len(s.auth) != 1 || s.auth[0] != "Bearer s3cret" {
		t.Errorf("%d streams, authorization %q; want one stream with the operator secret", s.streams, s.auth)
	}
	if len(s.tps) != 32 || s.tps[0] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("traceparents: %q", s.tps)
	}
	// Close ends the stream (the server reads its end), it does not cancel it.
	_ = c.Close()
	select {
	case err := <-s.ended:
		if !errors.Is(err, io.EOF) {
			t.Errorf("the stream ended with %v; want the client's end of it (io.EOF)", err)
		}
	case <-time.After(time.Minute):
		t.Error("the server's stream did not end after Close")
	}
}

// A server that takes batches (its stream header) is told the client does too, and
// its batch answers reach each caller. (How submissions share messages is
// lib/streambatch's test: here it depends on scheduling.)
func TestSubmitStreamBatches(t *testing.T) {
	s := &streamServer{batch: 8, batches: true, seen: map[string]int{}}
	c := serve(t, s)
	if err := submitConcurrently(context.Background(), c, 64); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams != 1 || len(s.clients) != 1 || s.clients[0] != "1" {
		t.Errorf("%d streams, opened with hero-stream-batch %q; want one, with \"1\"", s.streams, s.clients)
	}
	if len(s.seen) != 64 || s.msgs > 64 {
		t.Errorf("%d submissions in %d messages; want 64 in at most 64", len(s.seen), s.msgs)
	}
}

// A refused submission gets its typed error and the stream goes on; a rate-limited
// one is sent again after the hint; a stream that breaks fails what waits on it
// (Unavailable) and a unique submission is sent again on a new stream; the same
// with a server that takes batches.
func TestSubmitStreamErrors(t *testing.T) {
	for _, batches := range []bool{false, true} {
		t.Run(fmt.Sprintf("batches=%v", batches), func(t *testing.T) { submitStreamErrors(t, batches) })
	}
}

func submitStreamErrors(t *testing.T, batches bool) {
	s := &streamServer{batch: 1, batches: batches, seen: map[string]int{}}
	c := serve(t, s)
	ctx := context.Background()
	sh := func(script string) *model.Job { return &model.Job{ScriptType: model.ScriptSh, Script: script} }
	if _, err := c.Submit(ctx, sh("refuse"), SubmitOptions{}); !errors.Is(err, ErrInvalidArgument) || status.Convert(err).Message() != "job.script: refused" {
		t.Errorf("refused: %v", err)
	}
	if r, err := c.Submit(ctx, sh("limited"), SubmitOptions{}); err != nil || s.seen["limited"] != 2 || r.Job.Script != "limited" {
		t.Errorf("rate limited: %+v %v after %d sends", r, err, s.seen["limited"])
	}
	if _, err := c.Submit(ctx, sh("break"), SubmitOptions{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a broken stream without a unique key: %v; want ErrUnavailable", err)
	}
	s.seen["break"] = 0
	if r, err := c.Submit(ctx, sh("break"), SubmitOptions{UniqueKey: "k", UniqueTTL: time.Minute}); err != nil || r.Job.Script != "break" || s.seen["break"] != 2 {
		t.Errorf("a broken stream with a unique key: %+v %v after %d sends", r, err, s.seen["break"])
	}
	if s.streams != 3 {
		t.Errorf("%d streams; want 3 (the first two broke)", s.streams)
	}
}

// A server without SubmitJobStream gets calls.
func TestSubmitWithoutStream(t *testing.T) {
	f := &flaky{fail: map[string]int{}, calls: map[string]int{}}
	c := serve(t, f)
	for range 2 {
		if _, err := c.Submit(context.Background(), &model.Job{ScriptType: model.ScriptSh, Script: "true"}, SubmitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if f.calls["SubmitJob"] != 2 || !c.streams.unsupported {
		t.Errorf("%d SubmitJob calls, stream unsupported %v", f.calls["SubmitJob"], c.streams.unsupported)
	}
}

// A Submit whose context ended before it was sent sends nothing, as a call would not;
// one cancelled while it waits for its answer returns at once, and the submissions
// that shared its batch get their own answers.
func TestSubmitStreamCancelled(t *testing.T) {
	received := make(chan string, 8)
	s := &streamServer{batch: 3, seen: map[string]int{}, received: received} // answers when three came
	c := serve(t, s)
	sh := func(script string) *model.Job { return &model.Job{ScriptType: model.ScriptSh, Script: script} }
	gone, stop := context.WithCancel(context.Background())
	stop()
	if _, err := c.Submit(gone, sh("never"), SubmitOptions{}); !errors.Is(err, ErrCancelled) {
		t.Errorf("Submit with a cancelled context: %v; want ErrCancelled", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.Submit(ctx, sh("a"), SubmitOptions{})
		first <- err
	}()
	waitReceived(t, received, "a")
	cancel() // the server holds its answer until three submissions came
	select {
	case err := <-first:
		if !errors.Is(err, ErrCancelled) {
			t.Errorf("the cancelled Submit: %v; want ErrCancelled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a Submit cancelled while it waited for its answer did not return")
	}
	var wg sync.WaitGroup
	for _, script := range []string{"b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := c.Submit(context.Background(), sh(script), SubmitOptions{}); err != nil || r.Job.Script != script {
				t.Errorf("Submit %q after a cancelled one: %+v %v", script, r, err)
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen["never"] != 0 || s.seen["a"] != 1 {
		t.Errorf("the server received %v; want nothing of the Submit cancelled before it was sent", s.seen)
	}
}

func waitReceived(t *testing.T, received chan string, want string) {
	t.Helper()
	for {
		select {
		case got := <-received:
			if got == want {
				return
			}
		case <-time.After(time.Minute):
			t.Fatalf("the server did not receive %q", want)
		}
	}
}

// heldStream is a SubmitJobStream's client end whose first Send waits until release is
// closed (entered is closed when it is in it); it keeps what was sent, and its Recv
// returns what answers holds.
type heldStream struct {
	grpc.ClientStream
	entered, release chan struct{}
	answers          chan *herov1.SubmitJobStreamResponse
	mu               sync.Mutex
	sent             []uint64
	msgs             int
}

func (h *heldStream) Send(m *herov1.SubmitJobStreamRequest) error {
	h.mu.Lock()
	first := len(h.sent) == 0
	h.msgs++
	if len(m.Batch) == 0 {
		h.sent = append(h.sent, m.Seq)
	}
	for _, b := range m.Batch {
		h.sent = append(h.sent, b.Seq)
	}
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.release
	}
	return nil
}

func (h *heldStream) Recv() (*herov1.SubmitJobStreamResponse, error) {
	if a, ok := <-h.answers; ok {
		return a, nil
	}
	return nil, io.EOF
}

// SendMsg is Send as the client's stream sends its submissions: encoded as they
// travel (encodedMsg).
func (h *heldStream) SendMsg(m any) error {
	var r herov1.SubmitJobStreamRequest
	if err := proto.Unmarshal(m.(*encodedMsg).b, &r); err != nil {
		return err
	}
	return h.Send(&r)
}

// RecvMsg is Recv as the client's stream reads its answers: their encoding decoded by
// the stream's codec (answerCodec).
func (h *heldStream) RecvMsg(m any) error {
	a, err := h.Recv()
	if err != nil {
		return err
	}
	b, err := proto.Marshal(a)
	if err != nil {
		return err
	}
	return newAnswerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m)
}

func (h *heldStream) Header() (metadata.MD, error) {
	return metadata.Pairs("hero-stream-batch", "1"), nil
}
func (h *heldStream) CloseSend() error { return nil }

// A submission whose caller gave up while it waited to be sent (another's send was in
// progress) is not sent.
func TestSubmitStreamDropsWhatNobodyWaitsFor(t *testing.T) {
	h := &heldStream{entered: make(chan struct{}), release: make(chan struct{}), answers: make(chan *herov1.SubmitJobStreamResponse, 2)}
	ss := newSubmitStream(h, func() {})
	s := &submitStreams{cur: ss}
	go s.receive(ss)
	defer close(h.answers)
	req := func(script string) []byte {
		b, err := proto.Marshal(&herov1.SubmitJobRequest{Job: &herov1.Job{Script: script}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := make(chan error, 1)
	go func() {
		_, err := s.submit(context.Background(), time.Time{}, req("a"))
		first <- err
	}()
	<-h.entered // a's send is in progress
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() {
		_, err := s.submit(ctx, time.Time{}, req("b"))
		second <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for { // b waits (queued behind a's send)
		ss.mu.Lock()
		_, waiting := ss.pending[2]
		ss.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second submission never waited")
		}
		runtime.Gosched()
	}
	cancel()
	if err := <-second; status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled submission: %v; want Canceled", err)
	}
	close(h.release) // a's send ends; what was queued behind it is written next
	h.answers <- &herov1.SubmitJobStreamResponse{Seq: 1, Submit: &herov1.SubmitJobResponse{Job: &herov1.Job{Id: 1}}}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if fmt.Sprint(h.sent) != "[1]" {
		t.Errorf("sent %v; want [1] (not the submission its caller gave up)", h.sent)
	}
}

// The client's group commit with a server that takes batches, with a window of two
// flights: a submission made while fewer than two flights are out goes at once, alone;
// those made while two are out are held and go together, in one message, when one of
// the two landed (its answers came); each answer reaches its own caller, whatever the
// order in which the flights are answered.
func TestSubmitStreamGroupCommit(t *testing.T) {
	h := &heldStream{entered: make(chan struct{}), release: make(chan struct{}), answers: make(chan *herov1.SubmitJobStreamResponse, 8)}
	close(h.release) // sends return at once
	ss := newSubmitStream(h, func() {})
	ss.batches.Store(true)
	ss.window = 2
	s := &submitStreams{cur: ss}
	ss.owner = s
	go s.receive(ss)
	defer close(h.answers)
	req := func(script string) []byte {
		b, err := proto.Marshal(&herov1.SubmitJobRequest{Job: &herov1.Job{Script: script}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type result struct {
		script string
		id     uint32
		err    error
	}
	results := make(chan result, 5)
	submit := func(script string) {
		r, err := s.submit(context.Background(), time.Time{}, req(script))
		if err != nil {
			results <- result{script: script, err: err}
			return
		}
		results <- result{script: script, id: r.Job.ID}
	}
	deadline := time.Now().Add(time.Minute)
	waitSent := func(want string) {
		t.Helper()
		for {
			h.mu.Lock()
			sent := fmt.Sprint(h.sent)
			h.mu.Unlock()
			if sent == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("sent %v; want %v", sent, want)
			}
			runtime.Gosched()
		}
	}
	go submit("a")
	waitSent("[1]") // a went at once, alone: one flight out
	go submit("b")
	waitSent("[1 2]")                                // b too: two flights out, the window is full
	for n, script := range []string{"c", "d", "e"} { // held (seq 3, 4, 5) while both flights' answers are awaited
		go submit(script)
		for {
			ss.mu.Lock()
			held := len(ss.held)
			ss.mu.Unlock()
			if held == n+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d submissions held; want %d", held, n+1)
			}
			runtime.Gosched()
		}
	}
	h.mu.Lock()
	if fmt.Sprint(h.sent) != "[1 2]" || h.msgs != 2 {
		t.Errorf("sent %v in %d messages while two flights were out; want [1 2] in 2", h.sent, h.msgs)
	}
	h.mu.Unlock()
	// b's flight lands first: the three held go, as one flight, in one message
	h.answers <- &herov1.SubmitJobStreamResponse{Seq: 2, Submit: &herov1.SubmitJobResponse{Job: &herov1.Job{Id: 102}}}
	if r := <-results; r.err != nil || r.script != "b" || r.id != 102 {
		t.Fatalf("b: %+v", r)
	}
	waitSent("[1 2 3 4 5]")
	h.answers <- &herov1.SubmitJobStreamResponse{Batch: []*herov1.SubmitJobStreamResponse{
		{Seq: 5, Submit: &herov1.SubmitJobResponse{Job: &herov1.Job{Id: 105}}},
		{Seq: 4, Error: &herov1.StreamError{Code: uint32(codes.InvalidArgument), Message: "job.script: refused"}},
		{Seq: 1, Submit: &herov1.SubmitJobResponse{Job: &herov1.Job{Id: 101}}},
		{Seq: 3, Submit: &herov1.SubmitJobResponse{Job: &herov1.Job{Id: 103}}},
	}}
	got := map[string]string{}
	for range 4 {
		r := <-results
		switch {
		case status.Code(r.err) == codes.InvalidArgument:
			got[r.script] = "refused"
		case r.err != nil:
			got[r.script] = r.err.Error()
		default:
			got[r.script] = fmt.Sprint(r.id)
		}
	}
	if want := "map[a:101 c:103 d:refused e:105]"; fmt.Sprint(got) != want {
		t.Errorf("answers %v; want %v", got, want)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.msgs != 3 {
		t.Errorf("%d messages for 5 submissions; want 3 (a, b, then the three held)", h.msgs)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.flights != 0 || len(ss.pending) != 0 {
		t.Errorf("%d flights out and %d submissions pending after every answer; want none", ss.flights, len(ss.pending))
	}
}

// A submission made without a deadline of its own is bounded by CallTimeout, as a
// call is, though it waits on the stream without a context of its own: a server that
// never answers fails it with ErrTimeout, and the stream forgets it.
func TestSubmitStreamCallTimeout(t *testing.T) {
	s := &streamServer{batch: 1000, seen: map[string]int{}} // holds every submission, answers none
	c := serve(t, s)
	c.cfg.CallTimeout = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := c.Submit(context.Background(), &model.Job{ScriptType: model.ScriptSh, Script: "true"}, SubmitOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Submit = %v, want ErrTimeout", err)
		}
	case <-time.After(time.Minute): // a safety net: CallTimeout ends it
		t.Fatal("Submit did not end at CallTimeout")
	}
	ss := c.streams.cur
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.pending) != 0 {
		t.Errorf("the stream still waits for %d submissions", len(ss.pending))
	}
}

// Retries stop at until (Submit's CallTimeout) as they stop at ctx's deadline: a
// server that refuses every try for its rate is tried again until then, no further.
func TestRetryingUntil(t *testing.T) {
	c := &Client{}
	st, err := status.New(codes.ResourceExhausted, "rate").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(20 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	tries := 0
	done := make(chan error, 1)
	go func() {
		done <- c.retryingUntil(context.Background(), time.Now().Add(150*time.Millisecond), false, func() error { tries++; return st.Err() })
	}()
	select {
	case err := <-done:
		if status.Code(err) != codes.ResourceExhausted || tries < 2 || tries > 8 {
			t.Fatalf("retryingUntil = %v after %d tries, want ResourceExhausted after 2–8", err, tries)
		}
	case <-time.After(time.Minute): // a safety net: without until the refusals are tried again for ever
		t.Fatal("retryingUntil did not stop at until")
	}
}
