package main

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/streambatch"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// streamAnswer is a stream submission's answer: its job (and whether it existed
// already), or its refusal.
type streamAnswer struct {
	seq      uint64
	job      *model.Job
	existing bool
	err      *herov1.StreamError
}

// The fields of SubmitJobStreamResponse and SubmitJobResponse that answerMessages
// writes.
const (
	fieldSeq    = 1 // SubmitJobStreamResponse.seq
	fieldSubmit = 2 // SubmitJobStreamResponse.submit
	fieldBatch  = 4 // SubmitJobStreamResponse.batch
	fieldJob    = 1 // SubmitJobResponse.job
	fieldExists = 2 // SubmitJobResponse.existing
)

// answerMessages are the encoded SubmitJobStreamResponse messages that carry the
// answers, in order, as streambatch.Messages makes them of the answers' messages: one
// each without batches; with them, batches of at most maxItems answers and, but for a
// single larger answer, maxBytes of their encoding (a batch of one is its answer
// alone); observe is told the answers of each batch message. A job's answer is
// written field by field (protoconv.AppendJob), a refusal's through its message
// (TestAnswerMessagesAsProto checks both against the messages).
func answerMessages(out []streamAnswer, batches bool, maxItems, maxBytes int, observe func(items int)) ([][]byte, error) {
	// every answer's encoding, one after the other in all
	all := make([]byte, 0, 160*len(out))
	items := make([][]byte, len(out))
	var job []byte
	for i, a := range out {
		start := len(all)
		var err error
		if all, job, err = appendAnswer(all, job, a); err != nil {
			return nil, err
		}
		items[i] = all[start:len(all):len(all)]
	}
	return streambatch.Encoded(items, batches, maxItems, maxBytes, fieldBatch, observe), nil
}

// appendAnswer appends the encoding of a's SubmitJobStreamResponse to b (job: a
// scratch buffer for the job's encoding, returned for the next).
func appendAnswer(b, job []byte, a streamAnswer) ([]byte, []byte, error) {
	if a.err != nil {
		out, err := proto.MarshalOptions{}.MarshalAppend(b, &herov1.SubmitJobStreamResponse{Seq: a.seq, Error: a.err})
		return out, job, err
	}
	job = job[:0]
	if a.job != nil {
		var err error
		if job, err = protoconv.AppendJob(job, a.job); err != nil {
			return b, job, err
		}
	}
	submit := 0 // SubmitJobResponse's size
	if a.job != nil {
		submit += protowire.SizeTag(fieldJob) + protowire.SizeBytes(len(job))
	}
	if a.existing {
		submit += protowire.SizeTag(fieldExists) + 1
	}
	if a.seq != 0 {
		b = protowire.AppendTag(b, fieldSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, a.seq)
	}
	b = protowire.AppendTag(b, fieldSubmit, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(submit))
	if a.job != nil {
		b = protowire.AppendTag(b, fieldJob, protowire.BytesType)
		b = protowire.AppendBytes(b, job)
	}
	if a.existing {
		b = protowire.AppendTag(b, fieldExists, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b, job, nil
}
