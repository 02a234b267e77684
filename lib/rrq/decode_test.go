package rrq

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

// decodeSeeds are payloads of both kinds: as this package writes them, as other
// executors write them (white space, nulls, other key orders) and ones the fast
// decoder must leave to encoding/json (escapes, other spellings, wrong types).
var decodeSeeds = []struct {
	payload string
	fast    bool // the fast decoder of its kind (request or response) takes it
}{
	{`{"protocol_version":"1","request_id":"r1","job_id":"1:2:3","function_name":"noop","args":[],"kwargs":{},"context":{"job_id":"1:2:3","attempt":1,"enqueue_time":"2026-11-28T10:00:00.123456Z","queue_name":"queue:exec:go","trace_context":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},"worker_id":"runner-1"}}`, true},
	{`{"protocol_version": "1", "request_id": "r2", "job_id": "j", "function_name": "echo", "args": [1, "two", {"three": [3]}, null, true], "kwargs": {"a": null, "b": {"c": "}"}}, "context": {"job_id": "j", "attempt": 2, "enqueue_time": "2026-01-01T00:00:00Z", "queue_name": "q", "deadline": "2026-01-01T00:01:00+02:00"}}`, true},
	{`{"request_id":"r3","protocol_version":"1","job_id":"j","function_name":"f","args":null,"kwargs":null,"context":null}`, true},
	{`{"request_id":"r\u0034","job_id":"j","function_name":"f"}`, false},
	{`{"Request_ID":"r5","job_id":"j","function_name":"f"}`, false},
	{`{"request_id":"r6","job_id":"j","function_name":"f","context":{"attempt":1.5}}`, false},
	{`{"request_id":"r7","job_id":"j","function_name":"f","context":{"attempt":"1"}}`, false},
	{`{"request_id":"r8","job_id":"j","job_id":"k","context":{"trace_context":{"a":"1"},"trace_context":{"b":"2"},"deadline":null}}`, true},
	{`{"request_id":"r9","args":{"a":1},"kwargs":[1]}`, false},
	{`{"request_id":"é","function_name":"ünï","kwargs":{"k\"ey":1}}`, false},
	{`{"job_id":"1:2:3","request_id":"r1","status":"success","result":null,"error":null,"retry_after_seconds":null}`, true},
	{`{"job_id": "j", "request_id": "r", "status": "retry", "result": {"x": [1, 2]}, "error": {"message": "later", "type": "retry", "details": {"n": 1}}, "retry_after_seconds": 2.5}`, true},
	{`{"request_id":"r","status":"error","error":{"message":"a"},"error":{"code":"c"}}`, true},
	{`{"request_id":"r","status":"error","error":"boom"}`, false},
	{`{"request_id":"r","status":"retry","retry_after_seconds":"2"}`, false},
	{`{"request_id":"r","status":"retry","retry_after_seconds":1e400}`, false},
	{`{"request_id":"r","status":"success","result":"a\nb","extra":1}`, false},
	{`{}`, true},
}

// FuzzFastDecode: whatever valid payload the fast decoders accept, they decode as
// encoding/json does, and encoding/json accepts it too.
func FuzzFastDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s.payload))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) || !json.Valid(b) {
			return
		}
		sameAsEncodingJSON(t, "request", b, fastRequest)
		sameAsEncodingJSON(t, "outcome", b, fastOutcome)
	})
}

// sameAsEncodingJSON fails t when fast accepts b and encoding/json refuses it or
// decodes it otherwise.
func sameAsEncodingJSON[T any](t *testing.T, what string, b []byte, fast func([]byte) (T, bool)) {
	t.Helper()
	got, ok := fast(b)
	if !ok {
		return
	}
	var want T
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("fast %s decode accepted %s, encoding/json refuses it: %v", what, b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s %s:\nfast          %#v\nencoding/json %#v", what, b, got, want)
	}
}

// decodesAsEncodingJSON fails t unless payload in an envelope of type typ decodes
// (decode) as encoding/json decodes it, or fails as it fails.
func decodesAsEncodingJSON[T any](t *testing.T, typ MessageType, payload string, decode func(Envelope) (T, error)) {
	t.Helper()
	env, err := DecodeEnvelope([]byte(`{"type":"` + string(typ) + `","payload":` + payload + `}`))
	if err != nil {
		t.Fatalf("%s: %v", payload, err)
	}
	var want T
	wantErr := json.Unmarshal([]byte(payload), &want)
	got, err := decode(env)
	if (err == nil) != (wantErr == nil) || (err == nil && !reflect.DeepEqual(got, want)) {
		t.Errorf("%s %s: decoded %#v, %v; encoding/json: %#v, %v", typ, payload, got, err, want, wantErr)
	}
}

// The protocol's usual payloads take the fast way; the others fall back and still
// decode as encoding/json decodes them (or fail as it fails).
func TestFastDecodeTakesPlainPayloads(t *testing.T) {
	for _, sd := range decodeSeeds {
		_, rok := fastRequest([]byte(sd.payload))
		_, ook := fastOutcome([]byte(sd.payload))
		if (rok || ook) != sd.fast {
			t.Errorf("seed %s: fast decode %v, want %v", sd.payload, rok || ook, sd.fast)
		}
		decodesAsEncodingJSON(t, TypeRequest, sd.payload, Envelope.Request)
		decodesAsEncodingJSON(t, TypeResponse, sd.payload, Envelope.Outcome)
	}
	// A request as the runner writes it comes back whole.
	dl := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	r := NewRequest("1:2:3", "noop", []any{1, "x"}, map[string]any{"k": []int{1}})
	r.Context.Deadline, r.Context.TraceContext, r.Context.WorkerID = &dl, map[string]string{"traceparent": "00-x"}, "w"
	frame, err := EncodeFrame(mustEnvelope(t, &r))
	if err != nil {
		t.Fatal(err)
	}
	env, err := DecodeEnvelope(frame[4:])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fastRequest(env.Payload); !ok {
		t.Fatalf("the runner's own request %s does not take the fast way", env.Payload)
	}
	got, err := env.Request()
	if err != nil || got.RequestID != r.RequestID || got.Context.Deadline == nil || !got.Context.Deadline.Equal(dl) ||
		string(got.Args[1]) != `"x"` || string(got.Kwargs["k"]) != `[1]` || got.Context.TraceContext["traceparent"] != "00-x" || got.Context.Attempt != 1 {
		t.Fatalf("decoded %#v, %v", got, err)
	}
}

func mustEnvelope(t *testing.T, p any) Envelope {
	t.Helper()
	env, err := NewEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// BenchmarkDecodeRequest: a request as the runner writes it, decoded by an executor.
func BenchmarkDecodeRequest(b *testing.B) {
	env, err := DecodeEnvelope([]byte(`{"type":"request","payload":` + decodeSeeds[0].payload + `}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := env.Request(); err != nil {
			b.Fatal(err)
		}
	}
}

// The fast decoders make one string per payload (its keys make none; its values are
// parts of that one copy), so a call's frames cost few allocations on either side: a
// request as the runner writes it takes its copy and its kwargs and trace_context maps
// (4); a no-op's outcome its copy alone. (They took a string per key and per value
// besides: 25 and 9.)
func TestFastDecodeAllocations(t *testing.T) {
	outcome := []byte(`{"job_id":"1:2:3","request_id":"4a1c8a52-5d5e-4c1e-9b1a-0c2b9d0e8f11","status":"success","result":null,"error":null,"retry_after_seconds":null}`)
	for _, c := range []struct {
		what    string
		payload []byte
		decode  func([]byte) bool
		max     float64
	}{
		{"request", []byte(decodeSeeds[0].payload), func(b []byte) bool { _, ok := fastRequest(b); return ok }, 4},
		{"outcome", outcome, func(b []byte) bool { _, ok := fastOutcome(b); return ok }, 1},
	} {
		ok := true
		if n := testing.AllocsPerRun(100, func() { ok = ok && c.decode(c.payload) }); !ok || n > c.max {
			t.Errorf("fast %s decode: %v allocations (ok %v), want at most %v", c.what, n, ok, c.max)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := compactEnvelope(outcome[:0:0]); ok {
			t.Fatal("empty payload taken")
		}
	}); n != 0 {
		t.Errorf("compactEnvelope of nothing: %v allocations", n)
	}
	frame := []byte(`{"type":"response","payload":` + string(outcome) + `}`)
	if n := testing.AllocsPerRun(100, func() {
		if env, ok := compactEnvelope(frame); !ok || env.Type != TypeResponse {
			t.Fatalf("compactEnvelope: %+v %v", env, ok)
		}
	}); n != 0 {
		t.Errorf("compactEnvelope: %v allocations, want none (its type is one of the constants)", n)
	}
}

// Strings decoded from a payload are parts of one copy of it: a change to the
// payload's bytes afterwards (a reused read buffer) does not reach them.
func TestFastDecodeStringsOutliveThePayload(t *testing.T) {
	b := []byte(decodeSeeds[0].payload)
	r, ok := fastRequest(b)
	if !ok {
		t.Fatal("seed 0 not fast")
	}
	for i := range b {
		b[i] = 'x'
	}
	if r.RequestID != "r1" || r.Context.WorkerID != "runner-1" || r.Context.TraceContext["traceparent"] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Fatalf("decoded strings changed with the payload: %#v", r)
	}
}
