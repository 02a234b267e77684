package model

import (
	"reflect"
	"strconv"
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
	if dec := jobDecoders[name]; dec != nil {
		return dec(j, s)
	}
	return nil
}

// jobDecoders decode each job hash field (by name) as the reflective decoding does:
// strings as they are, enums normalized, integers and booleans by the tolerant parsers,
// JSON fields by decodeJSON (its fast paths for "{}", "[]" and raw JSON included).
var jobDecoders = map[string]func(j *Job, s string) error{
	"id":               func(j *Job, s string) error { return setU32(&j.ID, s) },
	"caller_id":        func(j *Job, s string) error { return setU32(&j.CallerID, s) },
	"context_id":       func(j *Job, s string) error { return setU32(&j.ContextID, s) },
	"script":           func(j *Job, s string) error { j.Script = s; return nil },
	"script_type":      func(j *Job, s string) error { j.ScriptType = ScriptType(normalizeEnum(s)); return nil },
	"timeout":          func(j *Job, s string) error { return setU32(&j.Timeout, s) },
	"retries":          func(j *Job, s string) error { return setU8(&j.Retries, s) },
	"env_vars":         func(j *Job, s string) error { return setJSON(&j.EnvVars, s) },
	"result":           func(j *Job, s string) error { return setJSON(&j.Result, s) },
	"prerequisites":    func(j *Job, s string) error { return setJSON(&j.Prerequisites, s) },
	"dependends":       func(j *Job, s string) error { return setJSON(&j.Dependends, s) },
	"created_at":       func(j *Job, s string) error { return setI64(&j.CreatedAt, s) },
	"updated_at":       func(j *Job, s string) error { return setI64(&j.UpdatedAt, s) },
	"status":           func(j *Job, s string) error { j.Status = JobStatus(normalizeEnum(s)); return nil },
	"function_name":    func(j *Job, s string) error { j.FunctionName = s; return nil },
	"args":             func(j *Job, s string) error { return setJSON(&j.Args, s) },
	"kwargs":           func(j *Job, s string) error { return setJSON(&j.Kwargs, s) },
	"result_json":      func(j *Job, s string) error { return setJSON(&j.ResultJSON, s) },
	"runner_id":        func(j *Job, s string) error { return setU32(&j.RunnerID, s) },
	"flow_id":          func(j *Job, s string) error { return setU32(&j.FlowID, s) },
	"error":            func(j *Job, s string) error { j.Error = s; return nil },
	"exit_code":        func(j *Job, s string) error { return setInt(&j.ExitCode, s) },
	"attempt":          func(j *Job, s string) error { return setU32(&j.Attempt, s) },
	"worker":           func(j *Job, s string) error { j.Worker = s; return nil },
	"fatal":            func(j *Job, s string) error { return setBool(&j.Fatal, s) },
	"trace_id":         func(j *Job, s string) error { j.TraceID = s; return nil },
	"traceparent":      func(j *Job, s string) error { j.Traceparent = s; return nil },
	"retry_after_ms":   func(j *Job, s string) error { return setI64(&j.RetryAfterMs, s) },
	"dlq_at_ms":        func(j *Job, s string) error { return setI64(&j.DLQAtMs, s) },
	"limits":           func(j *Job, s string) error { return setJSON(&j.Limits, s) },
	"origin":           func(j *Job, s string) error { return setJSON(&j.Origin, s) },
	"dep_results":      func(j *Job, s string) error { return setJSON(&j.DepResults, s) },
	"stop_requested":   func(j *Job, s string) error { return setBool(&j.StopAsked, s) },
	"started_at":       func(j *Job, s string) error { return setI64(&j.StartedAt, s) },
	"finished_at":      func(j *Job, s string) error { return setI64(&j.FinishedAt, s) },
	"created_at_ms":    func(j *Job, s string) error { return setI64(&j.CreatedAtMs, s) },
	"ready_at_ms":      func(j *Job, s string) error { return setI64(&j.ReadyAtMs, s) },
	"dispatched_at_ms": func(j *Job, s string) error { return setI64(&j.DispatchedMs, s) },
	"started_at_ms":    func(j *Job, s string) error { return setI64(&j.StartedAtMs, s) },
	"finished_at_ms":   func(j *Job, s string) error { return setI64(&j.FinishedAtMs, s) },
	"started_at_us":    func(j *Job, s string) error { return setI64(&j.StartedAtUs, s) },
	"finished_at_us":   func(j *Job, s string) error { return setI64(&j.FinishedAtUs, s) },
}

func setU32(p *uint32, s string) error {
	n, err := parseUint(s, 32)
	if err == nil {
		*p = uint32(n)
	}
	return err
}

func setU8(p *uint8, s string) error {
	n, err := parseUint(s, 8)
	if err == nil {
		*p = uint8(n)
	}
	return err
}

func setI64(p *int64, s string) error {
	n, err := parseInt(s, 64)
	if err == nil {
		*p = n
	}
	return err
}

func setInt(p *int, s string) error {
	n, err := parseInt(s, strconv.IntSize)
	if err == nil {
		*p = int(n)
	}
	return err
}

func setBool(p *bool, s string) error {
	b, err := parseBool(s)
	if err == nil {
		*p = b
	}
	return err
}

// setJSON decodes a JSON field into *p as the reflective decoding does.
func setJSON(p any, s string) error { return decodeJSON(s, reflect.ValueOf(p).Elem()) }
