package model

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// The hand-written encoding of a job is the reflective one: for a job with no field
// set, every field set, and each field set alone (a field added to Job and not to
// hashFields fails here).
func TestJobHashFieldsMatchReflection(t *testing.T) {
	check := func(name string, j *Job) {
		t.Helper()
		if got, want := j.hashFields(), hashFieldsOf(j); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
	check("no field set", &Job{})
	all := &Job{}
	v := reflect.ValueOf(all).Elem()
	for i := range v.NumField() {
		fill(v.Field(i))
		one := &Job{}
		fill(reflect.ValueOf(one).Elem().Field(i))
		check(v.Type().Field(i).Name+" alone", one)
	}
	check("every field set", all)
	empty := &Job{EnvVars: map[string]string{}, Prerequisites: []string{}, Args: json.RawMessage{}, DepResults: map[string]map[string]string{}}
	check("empty, not nil", empty)
}

// fill sets v to a value other than its zero.
func fill(v reflect.Value) {
	if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
		v.SetBytes([]byte(`{"a": [1, 2]}`))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(9)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem().Field(0))
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}

func BenchmarkJobHashFields(b *testing.B) {
	j := &Job{ID: 1, CallerID: 2, ContextID: 1, FunctionName: "go#noop", Status: JobStatus("dispatched"), CreatedAt: 1, UpdatedAt: 1, CreatedAtMs: 1000, Attempt: 1}
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			_ = j.hashFields()
		}
	})
	b.Run("reflect", func(b *testing.B) {
		for b.Loop() {
			_ = hashFieldsOf(j)
		}
	})
}

// A job read from its hash gets its start and end in s and ms from the µs ones (all a
// run stores); without µs times, the s and ms ones stored (a remote node's result, an
// older version's) are kept.
func TestJobTimesDerivedFromMicroseconds(t *testing.T) {
	var j Job
	if err := FromHash("job:1:1", map[string]string{"started_at_us": "1764412345678901", "finished_at_us": "1764412346000999", "started_at_ms": "5"}, &j); err != nil {
		t.Fatal(err)
	}
	if j.StartedAt != 1764412345 || j.StartedAtMs != 1764412345678 || j.FinishedAt != 1764412346 || j.FinishedAtMs != 1764412346000 {
		t.Errorf("derived: %+v", j)
	}
	var old Job
	if err := FromHash("job:1:2", map[string]string{"started_at": "7", "started_at_ms": "7001", "finished_at_ms": "8002"}, &old); err != nil {
		t.Fatal(err)
	}
	if old.StartedAt != 7 || old.StartedAtMs != 7001 || old.FinishedAtMs != 8002 || old.StartedAtUs != 0 {
		t.Errorf("kept: %+v", old)
	}
}

// FromFields decodes an HMGET's answer as FromHash decodes the same fields: values
// given, fields absent (nil) left alone, names the type lacks ignored, a bad value
// an error naming its field.
func TestFromFieldsAsFromHash(t *testing.T) {
	names := []string{"script_type", "dependends", "flow_id", "runner_id", "attempt", "error", "stop_requested", "fatal", "no_such_field", "started_at_us"}
	vals := []any{"Sh", "[3,4]", "7", nil, "2", "boom", "1", nil, "x", "1764412345678901"}
	h := map[string]string{}
	for i, n := range names {
		if s, ok := vals[i].(string); ok {
			h[n] = s
		}
	}
	var got, want Job
	if err := FromFields("job:1:1", names, vals, &got); err != nil {
		t.Fatal(err)
	}
	if err := FromHash("job:1:1", h, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || got.FlowID != 7 || len(got.Dependends) != 2 || got.StartedAtMs != 1764412345678 {
		t.Errorf("FromFields %+v\nFromHash   %+v", got, want)
	}
	err := FromFields("job:1:2", []string{"attempt"}, []any{"many"}, &Job{})
	var de *DecodeError
	if !errors.As(err, &de) || de.Field != "attempt" || de.Key != "job:1:2" {
		t.Errorf("a bad value: %v", err)
	}
}

// BenchmarkJobFromHash: a started handler job's hash, as a runner reads it after its claim.
func BenchmarkJobFromHash(b *testing.B) {
	j := &Job{ID: 1, CallerID: 2, ContextID: 1, FunctionName: "go#noop", ScriptType: "go", Status: JobStatus("started"), CreatedAt: 1, UpdatedAt: 1,
		CreatedAtMs: 1000, Attempt: 1, FlowID: 3, Worker: "runner-vm-1", TraceID: "0123456789abcdef0123456789abcdef", StartedAtUs: 1_000_000, DispatchedMs: 1000, ReadyAtMs: 1000}
	h := HashMap(j)
	h["claim"] = "abcdef"
	for b.Loop() {
		var out Job
		if err := FromHash("job:2:1", h, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// Enum values are read in any of the spellings other writers use; a value already in
// its stored spelling comes back as it is.
func TestNormalizeEnum(t *testing.T) {
	for in, want := range map[string]string{
		"started": "started", "waiting_for_prerequisites": "waiting_for_prerequisites", "v2": "v2", "": "",
		"WaitingForPrerequisites": "waiting_for_prerequisites", " Dispatched ": "dispatched", "SH": "sh",
		"Started": "started", "a b": "a b", "waitingFor_X": "waiting_for_x",
	} {
		if got := normalizeEnum(in); got != want {
			t.Errorf("normalizeEnum(%q) = %q, want %q", in, got, want)
		}
	}
}

// FromHashPairs decodes a hash's field/value items as FromHash decodes the hash: every
// field of a full job, names the type lacks ignored, the trace id of the claim when the
// hash stores none, a bad value an error naming its field.
func TestFromHashPairsAsFromHash(t *testing.T) {
	j := &Job{ID: 1, CallerID: 2, ContextID: 1, FunctionName: "go#noop", ScriptType: "go", Status: JobStatus("started"), CreatedAt: 1, UpdatedAt: 1,
		CreatedAtMs: 1000, Attempt: 3, FlowID: 3, Worker: "runner-vm-1", StartedAtUs: 1_000_000, DispatchedMs: 1000, ReadyAtMs: 1000,
		Dependends: []uint32{4, 5}, EnvVars: map[string]string{"A": "1"}, Args: []byte(`[1,2]`), Timeout: 30, Error: "boom"}
	h := HashMap(j)
	h["claim"] = "abcdef01"
	h["no_such_field"] = "x"
	var pairs []string
	for f, v := range h {
		pairs = append(pairs, f, v)
	}
	var got, want Job
	if err := FromHashPairs("job:2:1", pairs, &got); err != nil {
		t.Fatal(err)
	}
	if err := FromHash("job:2:1", h, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || got.TraceID != TraceOfClaim("abcdef01") || got.Attempt != 3 || len(got.Dependends) != 2 || got.EnvVars["A"] != "1" {
		t.Errorf("FromHashPairs %+v\nFromHash      %+v", got, want)
	}
	err := FromHashPairs("job:1:2", []string{"flow_id", "1", "attempt", "many"}, &Job{})
	var de *DecodeError
	if !errors.As(err, &de) || de.Field != "attempt" || de.Key != "job:1:2" {
		t.Errorf("a bad value: %v", err)
	}
}

// BenchmarkJobFromHashPairs: BenchmarkJobFromHash's hash as field/value items, as a
// runner reads a started job (a DUMP's items) after its claim.
func BenchmarkJobFromHashPairs(b *testing.B) {
	j := &Job{ID: 1, CallerID: 2, ContextID: 1, FunctionName: "go#noop", ScriptType: "go", Status: JobStatus("started"), CreatedAt: 1, UpdatedAt: 1,
		CreatedAtMs: 1000, Attempt: 1, FlowID: 3, Worker: "runner-vm-1", TraceID: "0123456789abcdef0123456789abcdef", StartedAtUs: 1_000_000, DispatchedMs: 1000, ReadyAtMs: 1000}
	h := HashMap(j)
	h["claim"] = "abcdef"
	var pairs []string
	for f, v := range h {
		pairs = append(pairs, f, v)
	}
	b.ReportAllocs()
	for b.Loop() {
		var out Job
		if err := FromHashPairs("job:2:1", pairs, &out); err != nil {
			b.Fatal(err)
		}
	}
}
