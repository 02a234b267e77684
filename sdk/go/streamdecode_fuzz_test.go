package hero

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/hero-coordinator/hero/lib/testutil/protorand"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// FuzzDecodeAnswers: whatever bytes a server sends as the submission stream's answers,
// the field-by-field decoder (answerCodec) never panics and reads them as
// proto.Unmarshal and the usual conversion do — an error both ways, or the same
// answers (sameAnswers). make fuzz runs it for a bounded count.
func FuzzDecodeAnswers(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	job := &herov1.Job{}
	protorand.Fill(f, r, job.ProtoReflect(), map[protoreflect.FieldNumber]bool{8: true, 9: true, 33: true, 34: true, 35: true})
	for _, m := range []*herov1.SubmitJobStreamResponse{
		{Seq: 9, Submit: &herov1.SubmitJobResponse{Job: job}},
		{Batch: []*herov1.SubmitJobStreamResponse{
			{Seq: 1, Submit: &herov1.SubmitJobResponse{Job: job, Existing: true}},
			{Seq: 2, Error: &herov1.StreamError{Code: 8, Message: "rate", RetryAfterMs: 250}},
			{Seq: 3},
		}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAnswers(t, b) })
}
