package rrq

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
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

// FuzzFastDecode: whatever payload the fast decoders accept is valid JSON (they check
// it as they decode: nothing checks it before them), and they decode it as
// encoding/json does. Payloads are valid UTF-8, as DecodeEnvelope checks first.
func FuzzFastDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s.payload))
	}
	for _, s := range invalidPlainPayloads {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) {
			return
		}
		sameAsEncodingJSON(t, "request", b, fastRequest)
		sameAsEncodingJSON(t, "outcome", b, fastOutcome)
	})
}

// invalidPlainPayloads are payloads that would be plain (the fast decoders' keys and
// types) but are not valid JSON: a scan that trusted its input took some of them.
var invalidPlainPayloads = []string{
	`{"request_id":"r" "job_id":"j"}`,
	`{"request_id":"r",}`,
	`{,"request_id":"r"}`,
	`{"request_id":"r"}}`,
	`{"request_id":"r"} x`,
	`{"request_id":"r","args":[1,,2]}`,
	`{"request_id":"r","args":[,1]}`,
	`{"request_id":"r","args":[1 2]}`,
	`{"request_id":"r","args":[1,]}`,
	`{"request_id":"r","kwargs":{"a":01}}`,
	`{"request_id":"r","kwargs":{"a":tru}}`,
	`{"request_id":"r","kwargs":{"a":nul}}`,
	`{"request_id":"r","kwargs":{"a":[}}`,
	`{"request_id":"r","kwargs":{"a":{"b" 1}}}`,
	"{\"request_id\":\"a\tb\"}",
	`{"request_id":"r","context":{"attempt":+1}}`,
	`{"request_id":"r","context":{"attempt":1,}}`,
	`{"request_id":"r","context":{"trace_context":{"a":"b",}}}`,
	`{"request_id":"r","context":{"deadline":null x}}`,
	`{"request_id":"r","status":"success","result":1.}`,
	`{"request_id":"r","status":"success","result":-}`,
	`{"request_id":"r","status":"success","result":"\x"}`,
	`{"request_id":"r","status":"retry","retry_after_seconds":0x10}`,
	`{"request_id":"r","status":"retry","retry_after_seconds":2.5.1}`,
	`{"request_id":"r","status":"error","error":{"message":"m",}}`,
	`{"request_id":"r","status":"error","error":{"details":[1}}`,
	`{"request_id":"r","status":"success","result":null,}`,
}

// The fast decoders refuse JSON that is not valid (the frame's payload is checked by
// them alone), and a frame with such a payload is refused as invalid JSON.
func TestFastDecodeRefusesInvalidJSON(t *testing.T) {
	for _, p := range invalidPlainPayloads {
		if json.Valid([]byte(p)) {
			t.Fatalf("%s: valid JSON, not a case of this test", p)
		}
		if _, ok := fastRequest([]byte(p)); ok {
			t.Errorf("fast request decode took %s", p)
		}
		if _, ok := fastOutcome([]byte(p)); ok {
			t.Errorf("fast outcome decode took %s", p)
		}
		for _, typ := range []MessageType{TypeRequest, TypeResponse} {
			if _, err := DecodeEnvelope([]byte(`{"type":"` + string(typ) + `","payload":` + p + `}`)); !errors.Is(err, ErrInvalidJSON) {
				t.Errorf("%s frame with payload %s: %v, want ErrInvalidJSON", typ, p, err)
			}
		}
	}
	// Nesting as deep as encoding/json allows, and deeper.
	for _, depth := range []int{maxNesting - 1, maxNesting} {
		p := `{"request_id":"r","kwargs":{"a":` + strings.Repeat("[", depth-2) + strings.Repeat("]", depth-2) + `}}`
		_, ok := fastRequest([]byte(p))
		if want := json.Valid([]byte(p)); ok != want {
			t.Errorf("nesting %d: fast %v, json.Valid %v", depth, ok, want)
		}
	}
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

// BenchmarkDecodeRequest: a request as the runner writes it, read by an executor: its
// envelope's check and its decode (DecodeEnvelope, then Request).
func BenchmarkDecodeRequest(b *testing.B) {
	frame := []byte(`{"type":"request","payload":` + decodeSeeds[0].payload + `}`)
	b.ReportAllocs()
	for b.Loop() {
		env, err := DecodeEnvelope(frame)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := env.Request(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeOutcome: a no-op's outcome read by the runner (DecodeEnvelope, then
// Outcome).
func BenchmarkDecodeOutcome(b *testing.B) {
	frame := []byte(`{"type":"response","payload":{"job_id":"1:2:3","request_id":"4a1c8a52-5d5e-4c1e-9b1a-0c2b9d0e8f11","status":"success","result":null,"error":null,"retry_after_seconds":null}}`)
	b.ReportAllocs()
	for b.Loop() {
		env, err := DecodeEnvelope(frame)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := env.Outcome(); err != nil {
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
	// A response's envelope is read with its payload decoded (the decode checks it):
	// its copy and the outcome kept for Outcome, which then takes none. An envelope of
	// another type takes none (its type is one of the constants; its payload is checked).
	frame := []byte(`{"type":"response","payload":` + string(outcome) + `}`)
	var env Envelope
	if n := testing.AllocsPerRun(100, func() {
		var ok bool
		if env, ok = compactEnvelope(frame); !ok || env.Type != TypeResponse || env.out == nil {
			t.Fatalf("compactEnvelope: %+v %v", env, ok)
		}
	}); n > 2 {
		t.Errorf("compactEnvelope of a response: %v allocations, want at most 2", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if o, err := env.Outcome(); err != nil || o.Status != StatusSuccess {
			t.Fatalf("outcome: %+v %v", o, err)
		}
	}); n != 0 {
		t.Errorf("Outcome of a decoded envelope: %v allocations, want none", n)
	}
	cancel := []byte(`{"type":"cancel","payload":{"job_id":"1:2:3","request_id":"r","hard_kill":false}}`)
	if n := testing.AllocsPerRun(100, func() {
		if env, ok := compactEnvelope(cancel); !ok || env.Type != TypeCancel {
			t.Fatalf("compactEnvelope: %+v %v", env, ok)
		}
	}); n != 0 {
		t.Errorf("compactEnvelope of a cancel: %v allocations, want none", n)
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
