package hero

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/testutil/protorand"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// usual decodes an answer message as proto does, then converts it (the way the
// stream's answers were read before answerCodec, and still are for the uncommon ones).
func usual(t *testing.T, b []byte) ([]seqAnswer, error) {
	t.Helper()
	var r herov1.SubmitJobStreamResponse
	if err := proto.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return answersOf(&r, nil), nil
}

// sameAnswers checks that the codec's decoding of b gives what the usual way gives;
// it returns whether the fast way took it.
func sameAnswers(t *testing.T, b []byte) bool {
	t.Helper()
	want, werr := usual(t, b)
	var m streamAnswers
	err := decodeAnswers(append([]byte(nil), b...), &m)
	if (err != nil) != (werr != nil) {
		t.Fatalf("decodeAnswers: %v, proto: %v", err, werr)
	}
	if err != nil {
		return false
	}
	if len(m.items) != len(want) {
		t.Fatalf("%d answers, want %d", len(m.items), len(want))
	}
	for i, w := range want {
		g := m.items[i]
		if g.seq != w.seq || g.a.existing != w.a.existing || !reflect.DeepEqual(g.a.job, w.a.job) {
			t.Fatalf("answer %d:\n got seq %d existing %v job %+v\nwant seq %d existing %v job %+v", i, g.seq, g.a.existing, g.a.job, w.seq, w.a.existing, w.a.job)
		}
		if (g.a.err == nil) != (w.a.err == nil) || g.a.err != nil && !proto.Equal(status.Convert(g.a.err).Proto(), status.Convert(w.a.err).Proto()) {
			t.Fatalf("answer %d: error %v, want %v", i, g.a.err, w.a.err)
		}
	}
	var fast streamAnswers
	return fastAnswers(string(b), &fast)
}

// The answers decoded field by field (answerCodec) are the answers proto.Unmarshal
// and the usual conversion make: jobs with every field set (a field added to Job and
// not to decodeJob's tables fails here), jobs the fast way leaves to the usual one,
// errors, answers without a job, single answers and batches, unknown fields, lists
// packed or not, strings that are not UTF-8, and every cut of a message.
func TestDecodeAnswersAsProto(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	usualOnly := map[protoreflect.FieldNumber]bool{8: true, 9: true, 33: true, 34: true, 35: true}
	for round := range 50 {
		fastJob, fullJob := &herov1.Job{}, &herov1.Job{}
		protorand.Fill(t, r, fastJob.ProtoReflect(), usualOnly)
		protorand.Fill(t, r, fullJob.ProtoReflect(), nil)
		batch := &herov1.SubmitJobStreamResponse{Batch: []*herov1.SubmitJobStreamResponse{
			{Seq: 1, Submit: &herov1.SubmitJobResponse{Job: fastJob}},
			{Seq: 2, Submit: &herov1.SubmitJobResponse{Job: fastJob, Existing: true}},
			{Seq: 3, Error: &herov1.StreamError{Code: 8, Message: "rate", RetryAfterMs: 250}},
			{Seq: 4, Error: &herov1.StreamError{Code: 3, Message: "job.script: refused"}},
			{Seq: 5, Submit: &herov1.SubmitJobResponse{}},
			{Seq: 6},
		}}
		b, err := proto.Marshal(batch)
		if err != nil {
			t.Fatal(err)
		}
		if !sameAnswers(t, b) {
			t.Fatalf("round %d: the fast way did not take a new job's answers", round)
		}
		one, _ := proto.Marshal(&herov1.SubmitJobStreamResponse{Seq: 9, Submit: &herov1.SubmitJobResponse{Job: fastJob}})
		if !sameAnswers(t, one) {
			t.Fatal("the fast way did not take a single answer")
		}
		full, _ := proto.Marshal(&herov1.SubmitJobStreamResponse{Batch: []*herov1.SubmitJobStreamResponse{{Seq: 1, Submit: &herov1.SubmitJobResponse{Job: fullJob}}}})
		if sameAnswers(t, full) {
			t.Fatal("the fast way took a job with maps, JSON and limits")
		}
		for cut := range len(b) { // every cut: an error both ways, or the same answers
			sameAnswers(t, b[:cut])
		}
	}
	// dependends unpacked, fields this version does not know, a string that is not UTF-8
	job := protorand.UnusualJob()
	answer := func(job []byte) []byte {
		sub := protowire.AppendTag(nil, 1, protowire.BytesType)
		sub = protowire.AppendBytes(sub, job)
		item := protowire.AppendTag(nil, 1, protowire.VarintType)
		item = protowire.AppendVarint(item, 1)
		item = protowire.AppendTag(item, 2, protowire.BytesType)
		return protowire.AppendBytes(item, sub)
	}
	if !sameAnswers(t, answer(job)) {
		t.Fatal("the fast way did not take unpacked lists and unknown fields")
	}
	bad := protowire.AppendTag(append([]byte(nil), job...), 14, protowire.BytesType)
	bad = protowire.AppendString(bad, "\xff")
	sameAnswers(t, answer(bad))
	twice := append(answer(job), answer(job)[2:]...) // the submit field twice: merged by proto
	sameAnswers(t, twice)
}

// The submissions written as they travel (streamencode.go) are the messages Submit
// made before: every field of the job set at random (maps, JSON and limits too), the
// options set and not, the job's context_id the client's.
func TestStreamRequestsAsProto(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 53))
	for round := range 100 {
		pb := &herov1.Job{}
		var skip map[protoreflect.FieldNumber]bool
		if round%2 == 0 {
			skip = map[protoreflect.FieldNumber]bool{8: true, 9: true, 33: true, 34: true, 35: true}
		}
		protorand.Fill(t, r, pb.ProtoReflect(), skip)
		pb.Origin, pb.DepResults = "", ""
		j := protoconv.JobFromPB(pb)
		f := submitFields{contextID: uint32(round % 3)}
		if round%4 < 2 {
			f = submitFields{contextID: 7, uniqueKey: "k ☃", uniqueTTL: 60, runAt: "2030-01-01T00:00:00Z", delay: "5s", debounceKey: "d", debounce: "1s"}
		}
		sub, err := appendSubmitRequest(nil, f, j)
		if err != nil {
			t.Fatal(err)
		}
		job := protoconv.JobToPB(j)
		job.ContextId = f.contextID
		want := &herov1.SubmitJobRequest{ContextId: f.contextID, Job: job, UniqueKey: f.uniqueKey, UniqueTtlSeconds: f.uniqueTTL,
			RunAt: f.runAt, Delay: f.delay, DebounceKey: f.debounceKey, Debounce: f.debounce}
		var got herov1.SubmitJobRequest
		if err := proto.Unmarshal(sub, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("round %d:\n got %v\nwant %v", round, &got, want)
		}
		for _, tp := range []string{"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
			var m herov1.SubmitJobStreamRequest
			if err := proto.Unmarshal(appendStreamRequest(nil, uint64(round), sub, tp), &m); err != nil {
				t.Fatal(err)
			}
			if w := (&herov1.SubmitJobStreamRequest{Seq: uint64(round), Submit: want, Traceparent: tp}); !proto.Equal(&m, w) {
				t.Fatalf("round %d: stream request\n got %v\nwant %v", round, &m, w)
			}
		}
	}
}
