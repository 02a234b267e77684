package hero

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The answers of the submission stream are decoded straight into the jobs Submit
// returns: a SubmitJobStreamResponse, one answer or a batch of them, read field by
// field (protowire) into each submission's model.Job, without the herov1.Job in
// between, and with the job's strings cut from one copy of the message instead of
// one allocation each. The usual answer, a new job's, holds only scalar, string and
// list fields. An answer with anything else (env_vars, result, origin, dep_results,
// limits, a flow, a field with another wire type than its own, a message field
// twice) is decoded by proto.Unmarshal and converted as any other answer
// (answersOf): so the two ways give the same jobs (TestDecodeAnswersAsProto).

// streamAnswers is a SubmitJobStreamResponse as the client's stream decodes it: each
// submission's answer, by seq, in the message's order.
type streamAnswers struct {
	items []seqAnswer
}

type seqAnswer struct {
	seq uint64
	a   streamAnswer
}

// answerCodec is the submission stream's codec: the proto codec, but for the answers,
// which it decodes into streamAnswers (decodeAnswers), and the submissions, which it
// sends as they were written (encodedMsg).
type answerCodec struct{ proto encoding.CodecV2 }

func newAnswerCodec() answerCodec { return answerCodec{proto: encoding.GetCodecV2("proto")} }

func (c answerCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*encodedMsg); ok { // written as it travels (streamencode.go)
		return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
	}
	return c.proto.Marshal(v)
}
func (c answerCodec) Name() string { return c.proto.Name() }

func (c answerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*streamAnswers)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	return decodeAnswers(data.Materialize(), m) // a copy of its own: the jobs' strings keep it
}

// decodeAnswers decodes a SubmitJobStreamResponse's bytes (b, owned: the jobs'
// strings point into it) into m.
func decodeAnswers(b []byte, m *streamAnswers) error {
	m.items = m.items[:0]
	if fastAnswers(string(b), m) {
		return nil
	}
	m.items = m.items[:0]
	var r herov1.SubmitJobStreamResponse
	if err := proto.Unmarshal(b, &r); err != nil {
		return err
	}
	m.items = answersOf(&r, m.items)
	return nil
}

// answersOf are r's answers (one, or its batch's), each as a call's outcome.
func answersOf(r *herov1.SubmitJobStreamResponse, out []seqAnswer) []seqAnswer {
	if len(r.Batch) == 0 {
		return append(out, seqAnswer{seq: r.Seq, a: answerOf(r)})
	}
	for _, a := range r.Batch {
		out = append(out, seqAnswer{seq: a.Seq, a: answerOf(a)})
	}
	return out
}

// fastAnswers decodes s, a SubmitJobStreamResponse, into m when it holds only what
// the fast way reads; false: decode it the usual way.
func fastAnswers(s string, m *streamAnswers) bool {
	var top fastAnswer
	batch := false
	ok := protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		if num != 4 {
			return top.field(s, num, typ)
		}
		// batch: each item an answer of its own
		v, n := protoconv.ConsumeBytes(s, typ)
		if n < 0 {
			return -1
		}
		var a fastAnswer
		if !a.decode(v) {
			return -1
		}
		m.items = append(m.items, seqAnswer{seq: a.seq, a: a.answer()})
		batch = true
		return n
	})
	if ok && !batch {
		m.items = append(m.items[:0], seqAnswer{seq: top.seq, a: top.answer()})
	}
	return ok
}

// fastAnswer is one SubmitJobStreamResponse as the fast way reads it.
type fastAnswer struct {
	seq              uint64
	job              *model.Job // nil: no job in its submit
	submit, existing bool
	err              *herov1.StreamError
}

// decode reads an answer; false: not for the fast way.
func (a *fastAnswer) decode(s string) bool {
	return protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		if num == 4 {
			// a batch in a batch's item, which no server sends: the usual way, which
			// refuses it when its items are not well formed (answerOf does not read it)
			return -1
		}
		return a.field(s, num, typ)
	})
}

// field reads the answer's field num (but batch) from s: what it took, or -1.
func (a *fastAnswer) field(s string, num protowire.Number, typ protowire.Type) int {
	switch num {
	case 1:
		if typ != protowire.VarintType {
			return -1
		}
		v, n := protoconv.Varint(s)
		a.seq = v
		return n
	case 2, 3:
		v, n := protoconv.ConsumeBytes(s, typ)
		if n < 0 || num == 2 && (a.submit || !a.decodeSubmit(v)) || num == 3 && (a.err != nil || !a.decodeError(v)) {
			return -1 // a message field twice (proto merges them): the usual way
		}
		return n
	}
	return protoconv.SkipField(s, typ)
}

// answer is the answer as a call's outcome (answerOf's).
func (a *fastAnswer) answer() streamAnswer {
	if a.err != nil {
		return answerOf(&herov1.SubmitJobStreamResponse{Seq: a.seq, Error: a.err})
	}
	if !a.submit {
		return answerOf(&herov1.SubmitJobStreamResponse{Seq: a.seq})
	}
	j := a.job
	if j == nil {
		j = jobOf(nil)
	}
	return streamAnswer{job: j, existing: a.existing}
}

// decodeSubmit reads a SubmitJobResponse without a flow.
func (a *fastAnswer) decodeSubmit(s string) bool {
	a.submit = true
	return protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		switch num {
		case 1:
			v, n := protoconv.ConsumeBytes(s, typ)
			if n < 0 || a.job != nil {
				return -1
			}
			if a.job = decodeJob(v); a.job == nil {
				return -1
			}
			return n
		case 2:
			v, n := protoconv.ConsumeVarint(s, typ)
			a.existing = v != 0
			return n
		case 30: // a flow: the usual way
			return -1
		}
		return protoconv.SkipField(s, typ)
	})
}

// decodeError reads a StreamError.
func (a *fastAnswer) decodeError(s string) bool {
	e := &herov1.StreamError{}
	a.err = e
	return protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		switch num {
		case 1, 3:
			v, n := protoconv.ConsumeVarint(s, typ)
			if num == 1 {
				e.Code = uint32(v)
			} else {
				e.RetryAfterMs = v
			}
			return n
		case 2:
			v, n := protoconv.ConsumeString(s, typ)
			e.Message = v
			return n
		}
		return protoconv.SkipField(s, typ)
	})
}

// decodeJob reads a Job into the model.Job that jobOf makes of it; nil: not for the
// fast way.
func decodeJob(s string) *model.Job {
	j := &model.Job{}
	ok := protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		switch {
		case num == 10: // prerequisites
			v, n := protoconv.ConsumeString(s, typ)
			if n >= 0 {
				j.Prerequisites = append(j.Prerequisites, v)
			}
			return n
		case num == 11: // dependends, packed or not
			return protoconv.AppendUint32s(&j.Dependends, s, typ)
		case num < jobFields && jobStrings[num] != nil:
			v, n := protoconv.ConsumeString(s, typ)
			if n >= 0 {
				jobStrings[num](j, v)
			}
			return n
		case num < jobFields && jobVarints[num] != nil:
			v, n := protoconv.ConsumeVarint(s, typ)
			if n >= 0 {
				jobVarints[num](j, v)
			}
			return n
		case num == 8 || num == 9 || num == 33 || num == 34 || num == 35: // maps, JSON, limits: the usual way
			return -1
		}
		// a field this version does not know: skipped, as JobFromPB leaves it
		return protoconv.SkipField(s, typ)
	})
	if !ok {
		return nil
	}
	j.EnvVars, j.Result = map[string]string{}, map[string]string{}
	if j.Prerequisites == nil {
		j.Prerequisites = []string{}
	}
	if j.Dependends == nil {
		j.Dependends = []uint32{}
	}
	return j
}

// jobFields bounds the Job's field numbers that the tables below name.
const jobFields = 72

// jobStrings set the Job's string fields (JobFromPB's conversions).
var jobStrings = [jobFields]func(j *model.Job, v string){
	4:  func(j *model.Job, v string) { j.Script = v },
	5:  func(j *model.Job, v string) { j.ScriptType = model.ScriptType(v) },
	14: func(j *model.Job, v string) { j.Status = model.JobStatus(v) },
	17: func(j *model.Job, v string) { j.Error = v },
	20: func(j *model.Job, v string) { j.Worker = v },
	28: func(j *model.Job, v string) { j.FunctionName = v },
	29: func(j *model.Job, v string) { j.Args = rawOf(v) },
	30: func(j *model.Job, v string) { j.Kwargs = rawOf(v) },
	31: func(j *model.Job, v string) { j.TraceID = v },
	36: func(j *model.Job, v string) { j.ResultJSON = rawOf(v) },
	37: func(j *model.Job, v string) { j.Traceparent = v },
	44: func(j *model.Job, v string) { j.ConcurrencyKey = v },
	46: func(j *model.Job, v string) { j.Held = v },
	60: func(j *model.Job, v string) { j.ConcurrencyPolicy = v },
	61: func(j *model.Job, v string) { j.DebounceKey = v },
	70: func(j *model.Job, v string) { j.ScheduleID = v },
}

// jobVarints set the Job's integer and bool fields (JobFromPB's conversions: a
// uint32 takes the value's low 32 bits, as proto does).
var jobVarints = [jobFields]func(j *model.Job, v uint64){
	1:  func(j *model.Job, v uint64) { j.ID = uint32(v) },
	2:  func(j *model.Job, v uint64) { j.CallerID = uint32(v) },
	3:  func(j *model.Job, v uint64) { j.ContextID = uint32(v) },
	6:  func(j *model.Job, v uint64) { j.Timeout = uint32(v) },
	7:  func(j *model.Job, v uint64) { j.Retries = uint8(min(uint32(v), 255)) },
	12: func(j *model.Job, v uint64) { j.CreatedAt = int64(v) },
	13: func(j *model.Job, v uint64) { j.UpdatedAt = int64(v) },
	15: func(j *model.Job, v uint64) { j.RunnerID = uint32(v) },
	16: func(j *model.Job, v uint64) { j.FlowID = uint32(v) },
	18: func(j *model.Job, v uint64) { j.ExitCode = int(int32(v)) },
	19: func(j *model.Job, v uint64) { j.Attempt = uint32(v) },
	21: func(j *model.Job, v uint64) { j.StartedAt = int64(v) },
	22: func(j *model.Job, v uint64) { j.FinishedAt = int64(v) },
	23: func(j *model.Job, v uint64) { j.CreatedAtMs = int64(v) },
	24: func(j *model.Job, v uint64) { j.ReadyAtMs = int64(v) },
	25: func(j *model.Job, v uint64) { j.DispatchedMs = int64(v) },
	26: func(j *model.Job, v uint64) { j.StartedAtMs = int64(v) },
	27: func(j *model.Job, v uint64) { j.FinishedAtMs = int64(v) },
	32: func(j *model.Job, v uint64) { j.DLQAtMs = int64(v) },
	38: func(j *model.Job, v uint64) { j.Fatal = v != 0 },
	39: func(j *model.Job, v uint64) { j.StopAsked = v != 0 },
	40: func(j *model.Job, v uint64) { j.RetryAfterMs = int64(v) },
	41: func(j *model.Job, v uint64) { j.StartedAtUs = int64(v) },
	42: func(j *model.Job, v uint64) { j.FinishedAtUs = int64(v) },
	43: func(j *model.Job, v uint64) { j.Priority = uint8(min(uint32(v), 255)) },
	45: func(j *model.Job, v uint64) { j.ConcurrencyLimit = uint32(v) },
	47: func(j *model.Job, v uint64) { j.RunAtMs = int64(v) },
	71: func(j *model.Job, v uint64) { j.ScheduleTickMs = int64(v) },
}

// rawOf is JobFromPB's rawOrNil.
func rawOf(v string) []byte {
	if v == "" {
		return nil
	}
	return []byte(v)
}

var _ encoding.CodecV2 = answerCodec{}
