package model

import (
	"reflect"
	"sync"
)

// fromHash is FromHash of a job without reflection for its scalar fields (every claim
// and every read of a job decodes one): the same decoding, field by field, as the
// reflective one (TestJobFromHashMatchesReflection checks each field with valid,
// tolerated and bad values). A field added to Job is added here too (that test fails
// until it is). On a bad value it reports the first bad field in the struct's order,
// as the reflective decoding does.
func (j *Job) fromHash(key string, h map[string]string) error {
	var bad *DecodeError
	badAt := -1
	for name, s := range h {
		if err := j.decodeField(name, s); err != nil {
			if at := jobFieldOrder()[name]; bad == nil || at < badAt {
				bad, badAt = &DecodeError{Key: key, Field: name, Value: s, Err: err}, at
			}
		}
	}
	if bad != nil {
		return bad
	}
	j.deriveTimes()
	return nil
}

// jobFieldOrder is each job hash field's place in the struct (its errors' order).
var jobFieldOrder = sync.OnceValue(func() map[string]int {
	order := map[string]int{}
	for i, f := range fieldsOf(reflect.TypeOf(Job{})) {
		order[f.name] = i
	}
	return order
})

// decodeField decodes one hash field into the job; an unknown field is ignored.
func (j *Job) decodeField(name, s string) error {
	var err error
	u32 := func(p *uint32) {
		var n uint64
		if n, err = parseUint(s, 32); err == nil {
			*p = uint32(n)
		}
	}
	i64 := func(p *int64) {
		var n int64
		if n, err = parseInt(s, 64); err == nil {
			*p = n
		}
	}
	flag := func(p *bool) {
		var b bool
		if b, err = parseBool(s); err == nil {
			*p = b
		}
	}
	// JSON fields keep the reflective decoding (decodeJSON: its fast paths for "{}",
	// "[]" and raw JSON included).
	js := func(p any) { err = decodeJSON(s, reflect.ValueOf(p).Elem()) }
	switch name {
	case "id":
		u32(&j.ID)
	case "caller_id":
		u32(&j.CallerID)
	case "context_id":
		u32(&j.ContextID)
	case "script":
		j.Script = s
	case "script_type":
		j.ScriptType = ScriptType(normalizeEnum(s))
	case "timeout":
		u32(&j.Timeout)
	case "retries":
		var n uint64
		if n, err = parseUint(s, 8); err == nil {
			j.Retries = uint8(n)
		}
	case "env_vars":
		js(&j.EnvVars)
	case "result":
		js(&j.Result)
	case "prerequisites":
		js(&j.Prerequisites)
	case "dependends":
		js(&j.Dependends)
	case "created_at":
		i64(&j.CreatedAt)
	case "updated_at":
		i64(&j.UpdatedAt)
	case "status":
		j.Status = JobStatus(normalizeEnum(s))
	case "function_name":
		j.FunctionName = s
	case "args":
		js(&j.Args)
	case "kwargs":
		js(&j.Kwargs)
	case "result_json":
		js(&j.ResultJSON)
	case "runner_id":
		u32(&j.RunnerID)
	case "flow_id":
		u32(&j.FlowID)
	case "error":
		j.Error = s
	case "exit_code":
		var n int64
		if n, err = parseInt(s, strconvIntSize); err == nil {
			j.ExitCode = int(n)
		}
	case "attempt":
		u32(&j.Attempt)
	case "worker":
		j.Worker = s
	case "fatal":
		flag(&j.Fatal)
	case "trace_id":
		j.TraceID = s
	case "traceparent":
		j.Traceparent = s
	case "retry_after_ms":
		i64(&j.RetryAfterMs)
	case "dlq_at_ms":
		i64(&j.DLQAtMs)
	case "limits":
		js(&j.Limits)
	case "origin":
		js(&j.Origin)
	case "dep_results":
		js(&j.DepResults)
	case "stop_requested":
		flag(&j.StopAsked)
	case "started_at":
		i64(&j.StartedAt)
	case "finished_at":
		i64(&j.FinishedAt)
	case "created_at_ms":
		i64(&j.CreatedAtMs)
	case "ready_at_ms":
		i64(&j.ReadyAtMs)
	case "dispatched_at_ms":
		i64(&j.DispatchedMs)
	case "started_at_ms":
		i64(&j.StartedAtMs)
	case "finished_at_ms":
		i64(&j.FinishedAtMs)
	case "started_at_us":
		i64(&j.StartedAtUs)
	case "finished_at_us":
		i64(&j.FinishedAtUs)
	}
	return err
}

// strconvIntSize is the size of int in bits (Job.ExitCode's).
const strconvIntSize = 32 << (^uint(0) >> 63)
