package protoconv

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hero-coordinator/hero/lib/model"
)

// AppendJob appends the wire encoding of JobToPB(j) to b, written field by field from
// j without the message in between (a submission stream's answers: one a job). A job
// with env vars, a result, an origin, its dependencies' results or limits is encoded
// through its message (proto's MarshalAppend, whose error it returns). Its strings
// are not checked for UTF-8 as proto's encoding checks them (a decoder refuses them;
// the stored job's came through a decoder). TestAppendJobAsProto checks the two
// encode the same message.
func AppendJob(b []byte, j *model.Job) ([]byte, error) {
	if len(j.EnvVars) > 0 || len(j.Result) > 0 || j.Origin != nil || j.DepResults != nil || j.Limits != nil {
		return proto.MarshalOptions{}.MarshalAppend(b, JobToPB(j))
	}
	b = appendUint(b, 1, uint64(j.ID))
	b = appendUint(b, 2, uint64(j.CallerID))
	b = appendUint(b, 3, uint64(j.ContextID))
	b = appendString(b, 4, j.Script)
	b = appendString(b, 5, string(j.ScriptType))
	b = appendUint(b, 6, uint64(j.Timeout))
	b = appendUint(b, 7, uint64(j.Retries))
	for _, p := range j.Prerequisites {
		b = protowire.AppendTag(b, 10, protowire.BytesType)
		b = protowire.AppendString(b, p)
	}
	if len(j.Dependends) > 0 { // packed, as proto writes a proto3 repeated scalar
		n := 0
		for _, d := range j.Dependends {
			n += protowire.SizeVarint(uint64(d))
		}
		b = protowire.AppendTag(b, 11, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		for _, d := range j.Dependends {
			b = protowire.AppendVarint(b, uint64(d))
		}
	}
	b = appendUint(b, 12, uint64(j.CreatedAt))
	b = appendUint(b, 13, uint64(j.UpdatedAt))
	b = appendString(b, 14, string(j.Status))
	b = appendUint(b, 15, uint64(j.RunnerID))
	b = appendUint(b, 16, uint64(j.FlowID))
	b = appendString(b, 17, j.Error)
	b = appendUint(b, 18, uint64(int64(int32(j.ExitCode)))) // int32: sign-extended
	b = appendUint(b, 19, uint64(j.Attempt))
	b = appendString(b, 20, j.Worker)
	b = appendUint(b, 21, uint64(j.StartedAt))
	b = appendUint(b, 22, uint64(j.FinishedAt))
	b = appendUint(b, 23, uint64(j.CreatedAtMs))
	b = appendUint(b, 24, uint64(j.ReadyAtMs))
	b = appendUint(b, 25, uint64(j.DispatchedMs))
	b = appendUint(b, 26, uint64(j.StartedAtMs))
	b = appendUint(b, 27, uint64(j.FinishedAtMs))
	b = appendString(b, 28, j.FunctionName)
	b = appendString(b, 29, string(j.Args))
	b = appendString(b, 30, string(j.Kwargs))
	b = appendString(b, 31, j.TraceID)
	b = appendUint(b, 32, uint64(j.DLQAtMs))
	b = appendString(b, 36, string(j.ResultJSON))
	b = appendString(b, 37, j.Traceparent)
	b = appendBool(b, 38, j.Fatal)
	b = appendBool(b, 39, j.StopAsked)
	b = appendUint(b, 40, uint64(j.RetryAfterMs))
	b = appendUint(b, 41, uint64(j.StartedAtUs))
	b = appendUint(b, 42, uint64(j.FinishedAtUs))
	b = appendUint(b, 43, uint64(j.Priority))
	b = appendString(b, 44, j.ConcurrencyKey)
	b = appendUint(b, 45, uint64(j.ConcurrencyLimit))
	b = appendString(b, 46, j.Held)
	b = appendUint(b, 47, uint64(j.RunAtMs))
	b = appendString(b, 60, j.ConcurrencyPolicy)
	b = appendString(b, 61, j.DebounceKey)
	b = appendString(b, 70, j.ScheduleID)
	b = appendUint(b, 71, uint64(j.ScheduleTickMs))
	return b, nil
}

// appendUint appends a varint field unless it is zero (proto3 leaves zeros out).
func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendUint(b, num, 1)
}

func appendString(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}
