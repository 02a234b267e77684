package main

import (
	"encoding/json"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// A SubmitJobStream's requests are decoded straight into the submissions the stream
// checks (streamReq, each with its jobIn), read field by field (protowire) from the
// bytes as received, without the herov1 messages in between, and with the strings
// cut from one copy of the message instead of one allocation each. The codec hands
// the stream the bytes (auth.WireMessage) and records the digest of those same bytes
// for the opening message, which authenticates the stream. The usual submission
// holds only scalar, string and list fields; a request with anything else (env_vars,
// limits, a field with another wire type than its own, a message field twice, a
// batch in a batch's item) or that proto refuses is decoded by proto.Unmarshal and
// converted as before (requestOf): the two ways give the same submissions, and bad
// bytes the same error (TestDecodeRequestsAsProto, FuzzDecodeRequests).

// streamRequest is a SubmitJobStreamRequest as the stream reads it: its own fields
// (first) and its batch's items.
type streamRequest struct {
	opening bool // the stream's opening message: its digest is recorded
	first   streamReq
	batch   []streamReq
}

// streamReq is one SubmitJobStreamRequest's submission: what checkStreamItem reads.
type streamReq struct {
	seq    uint64
	tp     string
	nested bool // an item of a batch holding a batch itself (refused)
	submit bool // it holds a SubmitJobRequest
	hasJob bool // its SubmitJobRequest holds a job
	ctxID  uint32
	// the SubmitJobRequest's other fields
	uniqueKey, runAt, delay, debounceKey, debounce string
	uniqueTTL                                      uint32
	job                                            jobIn
}

var _ auth.WireMessage = (*streamRequest)(nil)

func (r *streamRequest) Digested() bool { return r.opening }

// DecodeWire decodes a SubmitJobStreamRequest (s: a copy of its own).
func (r *streamRequest) DecodeWire(s string) error {
	r.first, r.batch = streamReq{}, r.batch[:0]
	if fastRequest(s, r) {
		return nil
	}
	var m herov1.SubmitJobStreamRequest
	if err := proto.Unmarshal([]byte(s), &m); err != nil {
		return err
	}
	requestOf(&m, r)
	return nil
}

// requestOf sets r to m's submissions (the usual way).
func requestOf(m *herov1.SubmitJobStreamRequest, r *streamRequest) {
	r.first, r.batch = reqOf(m), r.batch[:0]
	r.first.nested = false // the request's own: its batch is its items
	for _, it := range m.Batch {
		r.batch = append(r.batch, reqOf(it))
	}
}

// reqOf is m's submission as checkStreamItem reads it.
func reqOf(m *herov1.SubmitJobStreamRequest) streamReq {
	out := streamReq{seq: m.Seq, tp: m.Traceparent, nested: len(m.Batch) > 0, submit: m.Submit != nil}
	if sr := m.Submit; sr != nil {
		out.ctxID, out.uniqueKey, out.uniqueTTL = sr.ContextId, sr.UniqueKey, sr.UniqueTtlSeconds
		out.runAt, out.delay, out.debounceKey, out.debounce = sr.RunAt, sr.Delay, sr.DebounceKey, sr.Debounce
		if sr.Job != nil {
			out.hasJob = true
			jobInFromPBInto(&out.job, sr.Job)
		}
	}
	return out
}

// fastRequest decodes s into r when it holds only what the fast way reads; false:
// decode it the usual way.
func fastRequest(s string, r *streamRequest) bool {
	if n := requestItems(s); n > cap(r.batch) {
		r.batch = make([]streamReq, 0, n) // one allocation
	}
	return protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		if num != 4 {
			return r.first.field(s, num, typ)
		}
		// batch: each item a submission of its own
		v, n := protoconv.ConsumeBytes(s, typ)
		if n < 0 {
			return -1
		}
		r.batch = append(r.batch, streamReq{})
		if !r.batch[len(r.batch)-1].decode(v) {
			return -1
		}
		return n
	})
}

// requestItems counts the batch items of a SubmitJobStreamRequest (as far as it reads).
func requestItems(s string) int {
	items := 0
	protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		if num == 4 {
			items++
		}
		return protoconv.SkipField(s, typ)
	})
	return items
}

// decode reads an item of a batch; false: not for the fast way (a batch in it too).
func (q *streamReq) decode(s string) bool {
	return protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		if num == 4 {
			return -1
		}
		return q.field(s, num, typ)
	})
}

// field reads the request's field num (but batch) from s: what it took, or -1.
func (q *streamReq) field(s string, num protowire.Number, typ protowire.Type) int {
	switch num {
	case 1:
		v, n := protoconv.ConsumeVarint(s, typ)
		q.seq = v
		return n
	case 2:
		v, n := protoconv.ConsumeBytes(s, typ)
		if n < 0 || q.submit || !q.decodeSubmit(v) {
			return -1 // a message field twice (proto merges them): the usual way
		}
		return n
	case 3:
		v, n := protoconv.ConsumeString(s, typ)
		q.tp = v
		return n
	}
	return protoconv.SkipField(s, typ)
}

// decodeSubmit reads a SubmitJobRequest.
func (q *streamReq) decodeSubmit(s string) bool {
	q.submit = true
	return protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		switch num {
		case 1, 4:
			v, n := protoconv.ConsumeVarint(s, typ)
			if num == 1 {
				q.ctxID = uint32(v)
			} else {
				q.uniqueTTL = uint32(v)
			}
			return n
		case 2:
			v, n := protoconv.ConsumeBytes(s, typ)
			if n < 0 || q.hasJob || !decodeJobIn(v, &q.job) {
				return -1
			}
			q.hasJob = true
			return n
		case 3, 5, 6, 7, 8:
			v, n := protoconv.ConsumeString(s, typ)
			*q.submitString(num) = v
			return n
		}
		return protoconv.SkipField(s, typ)
	})
}

// submitString is the SubmitJobRequest's string field num (3, 5 to 8).
func (q *streamReq) submitString(num protowire.Number) *string {
	switch num {
	case 3:
		return &q.uniqueKey
	case 5:
		return &q.runAt
	case 6:
		return &q.delay
	case 7:
		return &q.debounceKey
	}
	return &q.debounce
}

// decodeJobIn reads a Job into in as jobInFromPBInto sets it; false: not for the
// fast way.
func decodeJobIn(s string, in *jobIn) bool {
	var args, kwargs string
	ok := protoconv.EachField(s, func(s string, num protowire.Number, typ protowire.Type) int {
		switch {
		case num == 10: // prerequisites
			v, n := protoconv.ConsumeString(s, typ)
			if n >= 0 {
				in.Prerequisites = append(in.Prerequisites, v)
			}
			return n
		case num == 11: // dependends, packed or not
			return protoconv.AppendUint32s(&in.Dependends, s, typ)
		case num == 29 || num == 30:
			v, n := protoconv.ConsumeString(s, typ)
			if num == 29 {
				args = v
			} else {
				kwargs = v
			}
			return n
		case num < jobInFields && jobInStrings[num] != nil:
			v, n := protoconv.ConsumeString(s, typ)
			*jobInStrings[num](in) = v
			return n
		case num < jobInFields && jobInVarints[num] != nil:
			v, n := protoconv.ConsumeVarint(s, typ)
			*jobInVarints[num](in) = uint32(v) // its low 32 bits, as proto takes them
			return n
		}
		return skipJobField(s, num, typ)
	})
	in.Args, in.Kwargs = json.RawMessage(args), json.RawMessage(kwargs)
	return ok
}

// skipJobField takes a Job field that jobIn does not hold: proto checks a string's
// UTF-8 even so; a map or a message (env_vars, result, limits) is for the usual way.
// A field with another wire type than its own is one proto does not know: skipped.
func skipJobField(s string, num protowire.Number, typ protowire.Type) int {
	if fd := jobFieldDescs.ByNumber(num); fd != nil && typ == protowire.BytesType {
		switch {
		case fd.IsMap() || fd.Kind() == protoreflect.MessageKind:
			return -1
		case fd.Kind() == protoreflect.StringKind:
			_, n := protoconv.ConsumeString(s, typ)
			return n
		}
	}
	return protoconv.SkipField(s, typ)
}

// jobFieldDescs are the Job's fields, which skipJobField looks up.
var jobFieldDescs = (&herov1.Job{}).ProtoReflect().Descriptor().Fields()

// jobInFields bounds the Job's field numbers that the tables below name.
const jobInFields = 61

// jobInStrings are jobIn's string fields by the Job's field number (but args and
// kwargs, JSON text).
var jobInStrings = [jobInFields]func(in *jobIn) *string{
	4:  func(in *jobIn) *string { return &in.Script },
	5:  func(in *jobIn) *string { return &in.ScriptType },
	28: func(in *jobIn) *string { return &in.FunctionName },
	44: func(in *jobIn) *string { return &in.ConcurrencyKey },
	60: func(in *jobIn) *string { return &in.ConcurrencyPolicy },
}

// jobInVarints are jobIn's uint32 fields by the Job's field number.
var jobInVarints = [jobInFields]func(in *jobIn) *uint32{
	1:  func(in *jobIn) *uint32 { return &in.ID },
	2:  func(in *jobIn) *uint32 { return &in.CallerID },
	3:  func(in *jobIn) *uint32 { return &in.ContextID },
	6:  func(in *jobIn) *uint32 { return &in.Timeout },
	7:  func(in *jobIn) *uint32 { return &in.Retries },
	15: func(in *jobIn) *uint32 { return &in.RunnerID },
	43: func(in *jobIn) *uint32 { return &in.Priority },
	45: func(in *jobIn) *uint32 { return &in.ConcurrencyLimit },
}
