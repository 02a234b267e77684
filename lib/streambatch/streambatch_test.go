package streambatch

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// held is a Write whose first call waits until release is closed (entered is closed
// when it is in it) and that keeps what it was given.
type held struct {
	entered, release chan struct{}
	mu               sync.Mutex
	writes           [][]string
	err              error
}

func (h *held) write(items []string) error {
	h.mu.Lock()
	h.writes = append(h.writes, items)
	first := len(h.writes) == 1
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.release
	}
	return h.err
}

// The items sent while a Write is in progress go next, together, in order; a Send
// made while another sends returns at once.
func TestSenderJoinsWhatWaits(t *testing.T) {
	h := &held{entered: make(chan struct{}), release: make(chan struct{})}
	s := &Sender[string]{Write: h.write}
	first := make(chan error, 1)
	go func() { first <- s.Send("1") }()
	<-h.entered
	for _, it := range []string{"2", "3", "4"} {
		if err := s.Send(it); err != nil { // queued: returns at once (else this test hangs)
			t.Fatal(err)
		}
	}
	close(h.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := s.Send("5"); err != nil { // alone: at once
		t.Fatal(err)
	}
	if got := fmt.Sprint(h.writes); got != "[[1] [2 3 4] [5]]" {
		t.Errorf("writes %s; want [[1] [2 3 4] [5]]", got)
	}
}

// SendAll's items go in one Write, in order, with what waited before them; alone, at
// once.
func TestSendAll(t *testing.T) {
	h := &held{entered: make(chan struct{}), release: make(chan struct{})}
	s := &Sender[string]{Write: h.write}
	first := make(chan error, 1)
	go func() { first <- s.SendAll([]string{"1", "2"}) }()
	<-h.entered
	if err := s.Send("3"); err != nil {
		t.Fatal(err)
	}
	if err := s.SendAll([]string{"4", "5", "6"}); err != nil { // queued: returns at once
		t.Fatal(err)
	}
	close(h.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := s.SendAll([]string{"7", "8"}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(h.writes); got != "[[1 2] [3 4 5 6] [7 8]]" {
		t.Errorf("writes %s; want [[1 2] [3 4 5 6] [7 8]]", got)
	}
}

// A Write's error goes to the Send that wrote, drops what waited, and sticks.
func TestSenderFailure(t *testing.T) {
	h := &held{entered: make(chan struct{}), release: make(chan struct{}), err: errors.New("broken")}
	s := &Sender[string]{Write: h.write}
	first := make(chan error, 1)
	go func() { first <- s.Send("1") }()
	<-h.entered
	if err := s.Send("2"); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	if err := <-first; err == nil || err.Error() != "broken" {
		t.Fatalf("the writing Send returned %v; want the Write's error", err)
	}
	if err := s.Send("3"); err == nil || err.Error() != "broken" {
		t.Errorf("a Send after the failure returned %v; want the Write's error", err)
	}
	if got := fmt.Sprint(h.writes); got != "[[1]]" {
		t.Errorf("writes %s; want [[1]] (nothing after the failure)", got)
	}
}

// split keeps to the item count and, but for one larger item, the size limit.
func TestSplit(t *testing.T) {
	m := func(s string) *wrapperspb.StringValue { return wrapperspb.String(s) }
	big := strings.Repeat("x", 60)
	items := []*wrapperspb.StringValue{m("a"), m("b"), m("c"), m(big), m(big), m("d"), m(strings.Repeat("y", 200))}
	var got []string
	for _, b := range split(items, 2, 100) {
		var vs []string
		for _, it := range b {
			vs = append(vs, it.Value[:1])
		}
		got = append(got, strings.Join(vs, ""))
	}
	if fmt.Sprint(got) != "[ab cx xd y]" {
		t.Errorf("batches %v; want [ab cx xd y]", got)
	}
}

// Messages: one a message without batches; with them, batch messages within the
// limits, a batch of one sent as its item.
func TestMessages(t *testing.T) {
	answer := func(seq uint64, script string) *herov1.SubmitJobStreamResponse {
		return &herov1.SubmitJobStreamResponse{Seq: seq, Submit: &herov1.SubmitJobResponse{Job: &herov1.Job{Script: script}}}
	}
	wrap := func(b []*herov1.SubmitJobStreamResponse) *herov1.SubmitJobStreamResponse {
		return &herov1.SubmitJobStreamResponse{Batch: b}
	}
	big := strings.Repeat("x", 600)
	for _, tc := range []struct {
		name    string
		batches bool
		scripts []string
		want    string
	}{
		{"batches", true, []string{"a", "b", "c"}, "[[1 2 3]]"},
		{"no batches", false, []string{"a", "b", "c"}, "[1 2 3]"},
		{"over the size limit", true, []string{big, big, "c"}, "[1 [2 3]]"},
		{"one", true, []string{"a"}, "[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var items []*herov1.SubmitJobStreamResponse
			for i, script := range tc.scripts {
				items = append(items, answer(uint64(i+1), script))
			}
			var got []any
			for _, m := range Messages(items, tc.batches, 256, 1000, wrap) {
				if len(m.Batch) == 0 {
					got = append(got, m.Seq)
					continue
				}
				var seqs []uint64
				for _, b := range m.Batch {
					seqs = append(seqs, b.Seq)
				}
				got = append(got, seqs)
			}
			if fmt.Sprint(got) != tc.want {
				t.Errorf("messages %v; want %s", got, tc.want)
			}
		})
	}
}

// Encoded cuts and wraps encoded items as Messages does their messages: the same
// messages, at every bound of items and bytes, with and without batches, and tells
// observe each batch's items.
func TestEncodedAsMessages(t *testing.T) {
	var items []*herov1.SubmitJobStreamRequest
	var enc [][]byte
	for i := range 7 {
		r := &herov1.SubmitJobStreamRequest{Seq: uint64(i + 1), Traceparent: strings.Repeat("t", i*40)}
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		items, enc = append(items, r), append(enc, b)
	}
	wrap := func(b []*herov1.SubmitJobStreamRequest) *herov1.SubmitJobStreamRequest {
		return &herov1.SubmitJobStreamRequest{Batch: b}
	}
	for _, batches := range []bool{false, true} {
		for _, maxItems := range []int{1, 2, 3, 256} {
			for _, maxBytes := range []int{1, 50, 200, MaxBytes} {
				var seen []int
				got := Encoded(enc, batches, maxItems, maxBytes, 4, func(n int) { seen = append(seen, n) })
				want := Messages(items, batches, maxItems, maxBytes, wrap)
				if len(got) != len(want) {
					t.Fatalf("batches %v, %d items, %d bytes: %d messages, want %d", batches, maxItems, maxBytes, len(got), len(want))
				}
				var wantSeen []int
				for i, w := range want {
					var m herov1.SubmitJobStreamRequest
					if err := proto.Unmarshal(got[i], &m); err != nil || !proto.Equal(&m, w) {
						t.Fatalf("batches %v, %d items, %d bytes: message %d %v (%v), want %v", batches, maxItems, maxBytes, i, &m, err, w)
					}
					if len(w.Batch) > 0 {
						wantSeen = append(wantSeen, len(w.Batch))
					}
				}
				if fmt.Sprint(seen) != fmt.Sprint(wantSeen) {
					t.Errorf("observed %v, want %v", seen, wantSeen)
				}
			}
		}
	}
}
