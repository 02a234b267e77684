package hero

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
)

// The submissions of the stream are written as they travel, field by field from the
// caller's model.Job (protoconv.AppendJob), without their messages in between
// (herov1.SubmitJobRequest with its herov1.Job, proto.Size of each to cut the
// batches, and the codec's own size and marshal): answerCodec sends them as they are.
// TestStreamRequestsAsProto checks them against the messages.

// outItem is one submission on its way: its seq and its SubmitJobStreamRequest's
// encoding.
type outItem struct {
	seq uint64
	b   []byte
}

// encodedMsg is a message already encoded, which answerCodec sends as it is.
type encodedMsg struct{ b []byte }

// The fields written here: SubmitJobStreamRequest's and SubmitJobRequest's.
const (
	fieldRequestSeq    = 1
	fieldRequestSubmit = 2
	fieldRequestTP     = 3
	fieldRequestBatch  = 4
)

// submitFields are a submission's SubmitJobRequest fields but its job.
type submitFields struct {
	contextID                                      uint32
	uniqueKey, runAt, delay, debounceKey, debounce string
	uniqueTTL                                      uint32
}

// appendSubmitRequest appends the encoding of the SubmitJobRequest of j (its
// context_id set to f's, as Client.jobPB sets it) with f.
func appendSubmitRequest(b []byte, f submitFields, j *model.Job) ([]byte, error) {
	jj := *j
	jj.ContextID = f.contextID
	job, err := protoconv.AppendJob(make([]byte, 0, 256), &jj)
	if err != nil {
		return nil, err
	}
	if b == nil { // its size: one allocation
		b = make([]byte, 0, len(job)+32+len(f.uniqueKey)+len(f.runAt)+len(f.delay)+len(f.debounceKey)+len(f.debounce))
	}
	if f.contextID != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(f.contextID))
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, job)
	b = appendStringField(b, 3, f.uniqueKey)
	if f.uniqueTTL != 0 {
		b = protowire.AppendTag(b, 4, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(f.uniqueTTL))
	}
	b = appendStringField(b, 5, f.runAt)
	b = appendStringField(b, 6, f.delay)
	b = appendStringField(b, 7, f.debounceKey)
	b = appendStringField(b, 8, f.debounce)
	return b, nil
}

// appendStreamRequest appends the encoding of a SubmitJobStreamRequest: submission seq
// (sub, its SubmitJobRequest's encoding) with its traceparent tp.
func appendStreamRequest(b []byte, seq uint64, sub []byte, tp string) []byte {
	if b == nil { // its size: one allocation
		b = make([]byte, 0, len(sub)+len(tp)+24)
	}
	if seq != 0 {
		b = protowire.AppendTag(b, fieldRequestSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, seq)
	}
	b = protowire.AppendTag(b, fieldRequestSubmit, protowire.BytesType)
	b = protowire.AppendBytes(b, sub)
	return appendStringField(b, fieldRequestTP, tp)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}
