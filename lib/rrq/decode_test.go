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
var decodeSeeds = []string{
	`{"protocol_version":"1","request_id":"r1","job_id":"1:2:3","function_name":"noop","args":[],"kwargs":{},"context":{"job_id":"1:2:3","attempt":1,"enqueue_time":"2026-11-28T10:00:00.123456Z","queue_name":"queue:exec:go","trace_context":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},"worker_id":"runner-1"}}`,
	`{"protocol_version": "1", "request_id": "r2", "job_id": "j", "function_name": "echo", "args": [1, "two", {"three": [3]}, null, true], "kwargs": {"a": null, "b": {"c": "}"}}, "context": {"job_id": "j", "attempt": 2, "enqueue_time": "2026-01-01T00:00:00Z", "queue_name": "q", "deadline": "2026-01-01T00:01:00+02:00"}}`,
	`{"request_id":"r3","protocol_version":"1","job_id":"j","function_name":"f","args":null,"kwargs":null,"context":null}`,
	`{"request_id":"r\u0034","job_id":"j","function_name":"f"}`,
	`{"Request_ID":"r5","job_id":"j","function_name":"f"}`,
	`{"request_id":"r6","job_id":"j","function_name":"f","context":{"attempt":1.5}}`,
	`{"request_id":"r7","job_id":"j","function_name":"f","context":{"attempt":"1"}}`,
	`{"request_id":"r8","job_id":"j","job_id":"k","context":{"trace_context":{"a":"1"},"trace_context":{"b":"2"},"deadline":null}}`,
	`{"request_id":"r9","args":{"a":1},"kwargs":[1]}`,
	`{"request_id":"é","function_name":"ünï","kwargs":{"k\"ey":1}}`,
	`{"job_id":"1:2:3","request_id":"r1","status":"success","result":null,"error":null,"retry_after_seconds":null}`,
	`{"job_id": "j", "request_id": "r", "status": "retry", "result": {"x": [1, 2]}, "error": {"message": "later", "type": "retry", "details": {"n": 1}}, "retry_after_seconds": 2.5}`,
	`{"request_id":"r","status":"error","error":{"message":"a"},"error":{"code":"c"}}`,
	`{"request_id":"r","status":"error","error":"boom"}`,
	`{"request_id":"r","status":"retry","retry_after_seconds":"2"}`,
	`{"request_id":"r","status":"retry","retry_after_seconds":1e400}`,
	`{"request_id":"r","status":"success","result":"a\nb","extra":1}`,
	`{}`,
}

// FuzzFastDecode: whatever valid payload the fast decoders accept, they decode as
// encoding/json does, and encoding/json accepts it too.
func FuzzFastDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) || !json.Valid(b) {
			return
		}
		if got, ok := fastRequest(b); ok {
			var want ExecutionRequest
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("fast request decode accepted %s, encoding/json refuses it: %v", b, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("request %s:\nfast          %#v\nencoding/json %#v", b, got, want)
			}
		}
		if got, ok := fastOutcome(b); ok {
			var want ExecutionOutcome
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("fast outcome decode accepted %s, encoding/json refuses it: %v", b, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("outcome %s:\nfast          %#v\nencoding/json %#v", b, got, want)
			}
		}
	})
}

// The protocol's usual payloads take the fast way; the others fall back and still
// decode as encoding/json decodes them (or fail as it fails).
func TestFastDecodeTakesPlainPayloads(t *testing.T) {
	fast := map[int]bool{0: true, 1: true, 2: true, 7: true, 10: true, 11: true, 12: true, 17: true}
	for i, s := range decodeSeeds {
		_, rok := fastRequest([]byte(s))
		_, ook := fastOutcome([]byte(s))
		if (rok || ook) != fast[i] {
			t.Errorf("seed %d %s: fast decode %v, want %v", i, s, rok || ook, fast[i])
		}
		env, err := DecodeEnvelope([]byte(`{"type":"request","payload":` + s + `}`))
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		var want ExecutionRequest
		wantErr := json.Unmarshal([]byte(s), &want)
		got, err := env.Request()
		if (err == nil) != (wantErr == nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("seed %d: Request() = %#v, %v; encoding/json: %#v, %v", i, got, err, want, wantErr)
		}
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
	env, err := DecodeEnvelope([]byte(`{"type":"request","payload":` + decodeSeeds[0] + `}`))
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
