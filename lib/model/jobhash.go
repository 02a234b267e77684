package model

import (
	"encoding/json"
	"strconv"
)

// hashFields is HashFields of a job without reflection (every submission encodes
// one): the same fields in the same order, encoded the same way, as
// TestJobHashFieldsMatchReflection checks field by field. A field added to Job is
// added here too (that test fails until it is).
func (j *Job) hashFields() []any {
	out := make([]any, 0, 2*24)
	u := func(v uint64) any {
		if v == 0 {
			return boxedZero
		}
		return strconv.FormatUint(v, 10)
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	// (an empty map or list encodes as a nil one, without encoding/json: a created
	// job's four are empty, not nil (defaultLists), and each was a json.Marshal)
	js := func(v any, n int, empty any) any {
		if n == 0 {
			return empty
		}
		return jsonOr(v, false, "")
	}
	out = append(out, "id", u(uint64(j.ID)), "caller_id", u(uint64(j.CallerID)), "context_id", u(uint64(j.ContextID)),
		"script", j.Script, "script_type", string(j.ScriptType), "timeout", u(uint64(j.Timeout)), "retries", u(uint64(j.Retries)),
		"env_vars", js(j.EnvVars, len(j.EnvVars), boxedEmptyObject), "result", js(j.Result, len(j.Result), boxedEmptyObject),
		"prerequisites", js(j.Prerequisites, len(j.Prerequisites), boxedEmptyList), "dependends", js(j.Dependends, len(j.Dependends), boxedEmptyList),
		"created_at", i(j.CreatedAt), "updated_at", i(j.UpdatedAt), "status", string(j.Status))
	str := func(name, v string) {
		if v != "" {
			out = append(out, name, v)
		}
	}
	raw := func(name string, v json.RawMessage) {
		if v != nil {
			out = append(out, name, jsonOr(v, false, ""))
		}
	}
	num := func(name string, v int64) {
		if v != 0 {
			out = append(out, name, i(v))
		}
	}
	flag := func(name string, v bool) {
		if v {
			out = append(out, name, "true")
		}
	}
	str("function_name", j.FunctionName)
	raw("args", j.Args)
	raw("kwargs", j.Kwargs)
	raw("result_json", j.ResultJSON)
	num("runner_id", int64(j.RunnerID))
	num("priority", int64(j.Priority))
	str("concurrency_key", j.ConcurrencyKey)
	num("concurrency_limit", int64(j.ConcurrencyLimit))
	str("concurrency_policy", j.ConcurrencyPolicy)
	str("held", j.Held)
	str("debounce_key", j.DebounceKey)
	flag("limited", j.Limited)
	flag("awaited", j.Awaited)
	num("flow_id", int64(j.FlowID))
	str("error", j.Error)
	num("exit_code", int64(j.ExitCode))
	num("attempt", int64(j.Attempt))
	str("worker", j.Worker)
	flag("fatal", j.Fatal)
	str("trace_id", j.TraceID)
	str("traceparent", j.Traceparent)
	num("retry_after_ms", j.RetryAfterMs)
	num("dlq_at_ms", j.DLQAtMs)
	if j.Limits != nil {
		out = append(out, "limits", jsonOr(j.Limits, false, ""))
	}
	if j.Origin != nil {
		out = append(out, "origin", jsonOr(j.Origin, false, ""))
	}
	if j.DepResults != nil {
		out = append(out, "dep_results", jsonOr(j.DepResults, false, ""))
	}
	flag("stop_requested", j.StopAsked)
	num("started_at", j.StartedAt)
	num("finished_at", j.FinishedAt)
	num("created_at_ms", j.CreatedAtMs)
	num("ready_at_ms", j.ReadyAtMs)
	num("dispatched_at_ms", j.DispatchedMs)
	num("started_at_ms", j.StartedAtMs)
	num("finished_at_ms", j.FinishedAtMs)
	num("run_at_ms", j.RunAtMs)
	str("schedule_id", j.ScheduleID)
	num("schedule_tick_ms", j.ScheduleTickMs)
	num("started_at_us", j.StartedAtUs)
	num("finished_at_us", j.FinishedAtUs)
	return out
}

// deriveTimes gives a job read from its hash its last run's start and end in seconds
// and milliseconds from their microseconds, the only ones a run stores
// (docs/data-model.md: each field a run adds to the hash costs Redis a scan of it);
// when there are none, the times stored (an older version's, a remote node's result)
// stay as read.
func (j *Job) deriveTimes() {
	if j.CreatedAt == 0 && j.CreatedAtMs != 0 {
		j.CreatedAt = j.CreatedAtMs / 1_000 // a job created without created_at (lib/store CreateJobs)
	}
	if us := j.StartedAtUs; us != 0 {
		j.StartedAt, j.StartedAtMs = us/1_000_000, us/1_000
	}
	if us := j.FinishedAtUs; us != 0 {
		j.FinishedAt, j.FinishedAtMs = us/1_000_000, us/1_000
	}
}

// defaultLists gives a job read from its hash the empty maps and lists of the seed's
// fields its hash leaves out (a job created holding their defaults stores none of
// them: lib/store's jobDefaults), as their stored "{}" and "[]" decode: a job reads,
// and shows in the API (`{}`, `[]`, never null), the same with or without them.
func (j *Job) defaultLists() {
	if j.EnvVars == nil {
		j.EnvVars = map[string]string{}
	}
	if j.Result == nil {
		j.Result = map[string]string{}
	}
	if j.Prerequisites == nil {
		j.Prerequisites = []string{}
	}
	if j.Dependends == nil {
		j.Dependends = []uint32{}
	}
}

// boxedZero, boxedEmptyObject and boxedEmptyList are common values of a job's hash
// fields already in an interface: a string put in one costs an allocation each time.
var boxedZero, boxedEmptyObject, boxedEmptyList any = "0", "{}", "[]"

// jsonOr is v as JSON, or empty when isNil (the encoding of a nil list or map); ""
// when v does not marshal (as encodeValue).
func jsonOr(v any, isNil bool, empty string) string {
	if isNil {
		return empty
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}
