package rrq

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// referenceRequest is what ExecutionRequest.MarshalJSON wrote through encoding/json
// before it was written by hand: the hand-written encoder must write the same bytes.
func referenceRequest(r ExecutionRequest) ([]byte, error) {
	type plainContext ExecutionContext
	type plainRequest ExecutionRequest
	p := struct {
		plainRequest
		Context plainContext `json:"context"`
	}{plainRequest(r), plainContext(r.Context)}
	if p.Args == nil {
		p.Args = []json.RawMessage{}
	}
	if p.Kwargs == nil {
		p.Kwargs = map[string]json.RawMessage{}
	}
	p.Context.EnqueueTime = p.Context.EnqueueTime.UTC()
	if p.Context.Deadline != nil {
		d := p.Context.Deadline.UTC()
		p.Context.Deadline = &d
	}
	return json.Marshal(p)
}

// The strings an encoder gets wrong: quotes, backslashes, control bytes, HTML
// characters, U+2028/U+2029, multi-byte runes and invalid UTF-8.
var awkward = []string{
	"", "plain", `a"b\c`, "tab\tnew\nline\rcr\bbs\fff", "\x00\x01\x1f\x7f", "<script>&amp;</script>",
	"line\u2028sep\u2029para", "héllo wörld ✓ 🎉", "bad\xffutf8\xc3", "\xe2\x80", "\\u2028 as text",
}

func checkSameAsReference(t *testing.T, r ExecutionRequest) {
	t.Helper()
	want, werr := referenceRequest(r)
	got, gerr := r.MarshalJSON()
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("errors differ: hand %v, encoding/json %v (request %+v)", gerr, werr, r)
	}
	if werr == nil && !bytes.Equal(got, want) {
		t.Fatalf("bytes differ:\n hand          %s\n encoding/json %s", got, want)
	}
}

func TestRequestEncodingMatchesEncodingJSON(t *testing.T) {
	deadline := time.Date(2026, 11, 28, 1, 2, 3, 456789000, time.FixedZone("x", 3600))
	base := ExecutionRequest{ProtocolVersion: "1", RequestID: NewUUID(), JobID: "1:2:3", FunctionName: "noop",
		Context: ExecutionContext{JobID: "1:2:3", Attempt: 2, EnqueueTime: time.Unix(1795825405, 123).In(time.FixedZone("y", -7200)), QueueName: "queue:exec:go"}}
	checkSameAsReference(t, base) // nil args and kwargs: [] and {}
	full := base
	full.Args = []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`"two"`), nil, json.RawMessage(` { "a" : [1, 2] } `), json.RawMessage(`"<&>\u2028"`)}
	full.Kwargs = map[string]json.RawMessage{"z": json.RawMessage(`null`), "a": json.RawMessage(`{"k":"v"}`), "hero_deps": json.RawMessage("{\"1\":{\"X\":\"21\"}}"), "sep\u2028": json.RawMessage(`"x
y"`)}
	full.Context.Deadline = &deadline
	full.Context.TraceContext = map[string]string{"traceparent": "00-0123-4567-01", "b": "<x>"}
	full.Context.WorkerID = "runner-1"
	checkSameAsReference(t, full)
	for _, s := range awkward {
		r := full
		r.FunctionName, r.RequestID, r.Context.QueueName, r.Context.WorkerID = s, s, s, s
		r.Kwargs = map[string]json.RawMessage{s: json.RawMessage(`1`)}
		r.Context.TraceContext = map[string]string{s: s}
		checkSameAsReference(t, r)
	}
	// Not JSON: both refuse.
	bad := base
	bad.Args = []json.RawMessage{json.RawMessage(`{"a":`)}
	checkSameAsReference(t, bad)
	bad = base
	bad.Kwargs = map[string]json.RawMessage{"k": json.RawMessage(`nope`)}
	checkSameAsReference(t, bad)
	// A year that RFC 3339 cannot write: both refuse.
	far := base
	far.Context.EnqueueTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	checkSameAsReference(t, far)
}

// Random strings of awkward bytes, as names and values, and random JSON arguments.
func TestRequestEncodingMatchesEncodingJSONRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "0", " ", `"`, `\`, "/", "<", ">", "&", "\n", "\x00", "\x1f", "é", "✓", "🎉", "\u2028", "\xff", "\xc3", "\xe2\x80"}
	str := func() string {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 2000 {
		r := ExecutionRequest{ProtocolVersion: "1", RequestID: str(), JobID: str(), FunctionName: str(),
			Context: ExecutionContext{JobID: str(), Attempt: rng.IntN(1000), EnqueueTime: time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)), QueueName: str(), WorkerID: str()}}
		for range rng.IntN(3) {
			v, _ := json.Marshal(map[string]any{str(): []any{str(), rng.IntN(10), nil}})
			r.Args = append(r.Args, v)
		}
		if rng.IntN(2) == 0 {
			r.Kwargs = map[string]json.RawMessage{}
			for range rng.IntN(4) {
				v, _ := json.MarshalIndent(str(), "", " ")
				r.Kwargs[str()] = v
			}
		}
		if rng.IntN(2) == 0 {
			r.Context.TraceContext = map[string]string{str(): str()}
		}
		checkSameAsReference(t, r)
	}
}

// BenchmarkRequestMarshal: a handler call's request as the runner builds it, by hand
// and (reference) through encoding/json.
func BenchmarkRequestMarshal(b *testing.B) {
	r := ExecutionRequest{ProtocolVersion: "1", RequestID: NewUUID(), JobID: "1:1:12345", FunctionName: "noop",
		Args: []json.RawMessage{}, Kwargs: map[string]json.RawMessage{"hero_deps": json.RawMessage(`{}`)},
		Context: ExecutionContext{JobID: "1:1:12345", Attempt: 1, EnqueueTime: time.Now(), QueueName: "queue:exec:go",
			TraceContext: map[string]string{"traceparent": "00-00000000000000000000000000000001-0000000000000001-01"}, WorkerID: "runner"}}
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		for b.Loop() {
			if _, err := referenceRequest(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func checkOutcomeSameAsReference(t *testing.T, o ExecutionOutcome) {
	t.Helper()
	want, werr := json.Marshal(o)
	got, gerr := appendOutcome(nil, &o)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("errors differ: hand %v, encoding/json %v (outcome %+v)", gerr, werr, o)
	}
	if werr == nil && !bytes.Equal(got, want) {
		t.Fatalf("bytes differ:\n hand          %s\n encoding/json %s", got, want)
	}
}

// The outcome encoder writes what json.Marshal writes, refuses what it refuses.
func TestOutcomeEncodingMatchesEncodingJSON(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	checkOutcomeSameAsReference(t, ExecutionOutcome{JobID: "1:2:3", RequestID: NewUUID(), Status: StatusSuccess})
	checkOutcomeSameAsReference(t, ExecutionOutcome{JobID: "j", RequestID: "r", Status: StatusSuccess, Result: json.RawMessage(` {"a": [1, "<&>"]} `)})
	for _, s := range awkward {
		checkOutcomeSameAsReference(t, ExecutionOutcome{JobID: s, RequestID: s, Status: Status(s),
			Error: &ExecutionError{Message: s, Type: s, Code: s, Details: json.RawMessage(`{"k":` + strconv.Quote(s) + `}`)}})
	}
	for _, v := range []float64{0, 1, 2.5, 1e-7, 1.5e-9, 123456789, 1e21, 1e22, -3e-7, 0.000001, math.MaxFloat64, math.SmallestNonzeroFloat64} {
		checkOutcomeSameAsReference(t, ExecutionOutcome{RequestID: "r", Status: StatusRetry, RetryAfterSeconds: f(v), Error: &ExecutionError{Message: "later"}})
	}
	// Refused by both: a result or details that are not JSON, a NaN or an infinite delay.
	checkOutcomeSameAsReference(t, ExecutionOutcome{RequestID: "r", Status: StatusSuccess, Result: json.RawMessage(`{"a":`)})
	checkOutcomeSameAsReference(t, ExecutionOutcome{RequestID: "r", Status: StatusError, Error: &ExecutionError{Message: "m", Details: json.RawMessage(`nope`)}})
	checkOutcomeSameAsReference(t, ExecutionOutcome{RequestID: "r", Status: StatusRetry, RetryAfterSeconds: f(math.NaN())})
	checkOutcomeSameAsReference(t, ExecutionOutcome{RequestID: "r", Status: StatusRetry, RetryAfterSeconds: f(math.Inf(1))})
	// Random delays, as the float formats meet.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		v := math.Float64frombits(rng.Uint64())
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		checkOutcomeSameAsReference(t, ExecutionOutcome{RequestID: "r", Status: StatusRetry, RetryAfterSeconds: f(v)})
	}
}

// BenchmarkOutcomeMarshal: a no-op handler's outcome as an executor writes it, by hand
// and (reference) through encoding/json.
func BenchmarkOutcomeMarshal(b *testing.B) {
	o := ExecutionOutcome{JobID: "1:1:12345", RequestID: NewUUID(), Status: StatusSuccess, Result: json.RawMessage(`null`)}
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if _, err := appendOutcome(make([]byte, 0, 256), &o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(o); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A request's frame, encoded in one go (requestFrame, as Execute sends it), and an
// outcome's appended to a buffer (AppendOutcomeFrame, as the Go executor writes it), are
// the bytes EncodeFrame writes for their envelopes; an outcome that cannot be encoded
// leaves nothing.
func TestFramesInOneGo(t *testing.T) {
	dl := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	r := NewRequest("1:2:3", "noop", []any{1, "x"}, map[string]any{"k": []int{1}})
	r.Context.Deadline, r.Context.TraceContext, r.Context.WorkerID = &dl, map[string]string{"traceparent": "00-x"}, "w"
	want, err := EncodeFrame(mustEnvelope(t, &r))
	if err != nil {
		t.Fatal(err)
	}
	got, err := requestFrame(&r)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("requestFrame:\n%q, %v\nwant %q", got, err, want)
	}
	r.Args = append(r.Args, json.RawMessage(`{bad`))
	if _, err := requestFrame(&r); err == nil || !strings.Contains(err.Error(), "args[2]") {
		t.Fatalf("a request with a bad argument: %v", err)
	}
	o := ExecutionOutcome{JobID: "1:2:3", RequestID: NewUUID(), Status: StatusRetry, RetryAfterSeconds: new(float64), Error: &ExecutionError{Message: "later"}}
	want, err = EncodeFrame(mustEnvelope(t, &o))
	if err != nil {
		t.Fatal(err)
	}
	prefix := []byte("earlier frames")
	got, err = AppendOutcomeFrame(append([]byte(nil), prefix...), &o)
	if err != nil || !bytes.Equal(got, append(prefix, want...)) {
		t.Fatalf("AppendOutcomeFrame:\n%q, %v\nwant %q", got, err, append(prefix, want...))
	}
	o.Result = json.RawMessage(`{nope`)
	if got, err := AppendOutcomeFrame(prefix, &o); err == nil || got != nil {
		t.Fatalf("an outcome with a bad result: %q, %v", got, err)
	}
}
