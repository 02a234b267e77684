package main

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/streambatch"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The answers' messages as answerMessages writes them are the messages
// streambatch.Messages made of the answers' proto messages (as the stream sent them
// before): the same messages, as many, cut at the same answers, with and without
// batches, at any bound of answers and bytes; jobs' answers, existing ones, jobs with
// maps (written through their message), refusals with and without a retry hint.
func TestAnswerMessagesAsProto(t *testing.T) {
	fresh := &model.Job{ID: 7, CallerID: 1, ContextID: 1, FunctionName: "go#noop", ScriptType: "go", Timeout: 60, Status: model.JobStatus("dispatched"),
		CreatedAt: 1700000000, UpdatedAt: 1700000001, CreatedAtMs: 1700000000123, DispatchedMs: 1700000000124, ReadyAtMs: 1700000000124,
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Prerequisites: []string{"a"}, Dependends: []uint32{1, 300}}
	withMaps := &model.Job{ID: 8, Script: "echo ☃", ScriptType: "sh", EnvVars: map[string]string{"A": "1"}, Limits: &model.JobLimits{Pids: 5}, ExitCode: -1}
	answers := []streamAnswer{
		{seq: 1, job: fresh},
		{seq: 2, job: fresh, existing: true},
		{seq: 3, err: &herov1.StreamError{Code: 8, Message: "rate", RetryAfterMs: 250}},
		{seq: 4, job: withMaps},
		{seq: 5, err: &herov1.StreamError{Code: 3, Message: "job.script: refused"}},
		{seq: 300, job: &model.Job{}},
	}
	old := make([]*herov1.SubmitJobStreamResponse, len(answers)) // as streamSubmit made them before
	for i, a := range answers {
		old[i] = &herov1.SubmitJobStreamResponse{Seq: a.seq, Error: a.err}
		if a.err == nil {
			old[i].Submit = &herov1.SubmitJobResponse{Job: protoconv.JobToPB(a.job), Existing: a.existing}
		}
	}
	wrap := func(b []*herov1.SubmitJobStreamResponse) *herov1.SubmitJobStreamResponse {
		return &herov1.SubmitJobStreamResponse{Batch: b}
	}
	one, _ := proto.Marshal(old[0])
	for _, batches := range []bool{false, true} {
		for _, maxItems := range []int{1, 2, 3, 256} {
			for _, maxBytes := range []int{1, len(one), 2*len(one) + 10, streambatch.MaxBytes} {
				name := fmt.Sprintf("batches %v, %d items, %d bytes", batches, maxItems, maxBytes)
				var seen []int
				got, err := answerMessages(answers, batches, maxItems, maxBytes, func(n int) { seen = append(seen, n) })
				if err != nil {
					t.Fatal(err)
				}
				want := streambatch.Messages(old, batches, maxItems, maxBytes, wrap)
				if len(got) != len(want) {
					t.Fatalf("%s: %d messages, want %d", name, len(got), len(want))
				}
				var wantSeen []int
				for i, w := range want {
					var m herov1.SubmitJobStreamResponse
					if err := proto.Unmarshal(got[i], &m); err != nil {
						t.Fatalf("%s: message %d: %v", name, i, err)
					}
					if !proto.Equal(&m, w) {
						t.Fatalf("%s: message %d:\n got %v\nwant %v", name, i, &m, w)
					}
					if len(w.Batch) > 0 {
						wantSeen = append(wantSeen, len(w.Batch))
					}
				}
				if fmt.Sprint(seen) != fmt.Sprint(wantSeen) {
					t.Errorf("%s: observed batches %v, want %v", name, seen, wantSeen)
				}
			}
		}
	}
}

// BenchmarkAnswerEncoding: a batch of 16 new jobs' answers encoded as the stream sends
// them, written field by field (wire: answerMessages) and, as before, through their
// messages (proto: JobToPB, streambatch.Messages and the codec's Marshal).
func BenchmarkAnswerEncoding(b *testing.B) {
	answers := make([]streamAnswer, 16)
	for i := range answers {
		answers[i] = streamAnswer{seq: uint64(1000 + i), job: &model.Job{ID: uint32(5000 + i), CallerID: 1, ContextID: 1, FunctionName: "go#noop", ScriptType: "go",
			Timeout: 60, Status: model.JobStatus("dispatched"), CreatedAt: 1700000000, UpdatedAt: 1700000000, CreatedAtMs: 1700000000123,
			DispatchedMs: 1700000000124, ReadyAtMs: 1700000000124}}
	}
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := answerMessages(answers, true, streamInflight, streambatch.MaxBytes, func(int) {}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		wrap := func(m []*herov1.SubmitJobStreamResponse) *herov1.SubmitJobStreamResponse {
			return &herov1.SubmitJobStreamResponse{Batch: m}
		}
		for range b.N {
			out := make([]*herov1.SubmitJobStreamResponse, len(answers))
			for i, a := range answers {
				out[i] = &herov1.SubmitJobStreamResponse{Seq: a.seq, Submit: &herov1.SubmitJobResponse{Job: protoconv.JobToPB(a.job), Existing: a.existing}}
			}
			for _, m := range streambatch.Messages(out, true, streamInflight, streambatch.MaxBytes, wrap) {
				if _, err := proto.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
