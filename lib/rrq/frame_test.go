package rrq

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func rawFrame(payload string) []byte {
	b := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(payload)))
	copy(b[4:], payload)
	return b
}

func header(n uint32) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	return b[:]
}

func TestFrameRoundTrip(t *testing.T) {
	dl := time.Date(2025, 1, 1, 13, 5, 0, 0, time.FixedZone("CET", 3600))
	req := ExecutionRequest{
		ProtocolVersion: "1", RequestID: "r1", JobID: "j1", FunctionName: "my_handler",
		Args:   []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`"two"`)},
		Kwargs: map[string]json.RawMessage{"flag": json.RawMessage(`true`)},
		Context: ExecutionContext{JobID: "j1", Attempt: 1, EnqueueTime: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC),
			QueueName: "default", Deadline: &dl, TraceContext: map[string]string{"traceparent": "x"}, WorkerID: "w"},
	}
	var buf bytes.Buffer
	if err := WriteMessage(&buf, &req); err != nil {
		t.Fatal(err)
	}
	// The wire form has exactly the protocol's field names and UTC timestamps.
	var wire map[string]any
	if err := json.Unmarshal(buf.Bytes()[4:], &wire); err != nil {
		t.Fatal(err)
	}
	p := wire["payload"].(map[string]any)
	ctx := p["context"].(map[string]any)
	if wire["type"] != "request" || ctx["deadline"] != "2025-01-01T12:05:00Z" || ctx["enqueue_time"] != "2025-01-01T12:00:00Z" {
		t.Fatalf("wire form: %s", buf.Bytes()[4:])
	}
	for _, k := range []string{"protocol_version", "request_id", "job_id", "function_name", "args", "kwargs", "context"} {
		if _, ok := p[k]; !ok {
			t.Errorf("payload lacks %q", k)
		}
	}
	env, err := ReadFrame(&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.Request()
	if err != nil {
		t.Fatal(err)
	}
	if got.RequestID != "r1" || string(got.Args[1]) != `"two"` || !got.Context.Deadline.Equal(dl) || got.Context.TraceContext["traceparent"] != "x" {
		t.Fatalf("round trip: %+v", got)
	}

	// Nil args/kwargs go out as [] and {}; an outcome's absent error goes out as null.
	b, _ := json.Marshal(ExecutionRequest{ProtocolVersion: "1"})
	if !strings.Contains(string(b), `"args":[]`) || !strings.Contains(string(b), `"kwargs":{}`) {
		t.Errorf("empty request: %s", b)
	}
	b, _ = json.Marshal(ExecutionOutcome{JobID: "j", RequestID: "r", Status: StatusSuccess, Result: json.RawMessage(`{"ok":true}`)})
	if string(b) != `{"job_id":"j","request_id":"r","status":"success","result":{"ok":true},"error":null,"retry_after_seconds":null}` {
		t.Errorf("outcome: %s", b)
	}
	b, _ = json.Marshal(CancelRequest{ProtocolVersion: "1", JobID: "j"})
	if string(b) != `{"protocol_version":"1","job_id":"j","hard_kill":false}` {
		t.Errorf("cancel: %s", b)
	}
}

func TestReadFrameErrors(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty stream", nil, io.EOF},
		{"zero length", header(0), ErrZeroLengthFrame},
		{"over limit", append(header(1025), make([]byte, 1025)...), ErrFrameTooLarge},
		{"invalid utf8", rawFrame("{\"type\":\"request\",\"payload\":{\"a\":\"\xff\xfe\"}}"), ErrInvalidUTF8},
		{"invalid json", rawFrame(`{"type":"request",`), ErrInvalidJSON},
		{"not an object", rawFrame(`[1,2]`), ErrInvalidEnvelope},
		{"no type", rawFrame(`{"payload":{}}`), ErrInvalidEnvelope},
		{"numeric type", rawFrame(`{"type":1,"payload":{}}`), ErrInvalidEnvelope},
		{"unknown type", rawFrame(`{"type":"bogus","payload":{}}`), ErrUnknownType},
		{"payload not object", rawFrame(`{"type":"cancel","payload":[]}`), ErrInvalidEnvelope},
		{"payload null", rawFrame(`{"type":"cancel","payload":null}`), ErrInvalidEnvelope},
		{"truncated header", []byte{0, 0}, ErrTruncatedFrame},
		{"truncated body", append(header(100), []byte(`{"type"`)...), ErrTruncatedFrame},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tc.in), 1024)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.want != io.EOF && !IsFrameError(err) {
				t.Fatalf("IsFrameError(%v) = false", err)
			}
		})
	}
	// Exactly at the limit is fine.
	payload := `{"type":"cancel","payload":{"job_id":"` + strings.Repeat("x", 1024-41) + `"}}`
	if len(payload) != 1024 {
		t.Fatalf("test payload is %d bytes", len(payload))
	}
	if _, err := ReadFrame(bytes.NewReader(rawFrame(payload)), 1024); err != nil {
		t.Fatalf("frame at the limit: %v", err)
	}
}

// A peer that announces a huge frame and sends little must not make the reader allocate
// the announced size.
func TestReadFrameAllocatesAsBytesArrive(t *testing.T) {
	in := append(header(DefaultMaxFrameSize), []byte(`{"type":"request"`)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(bytes.NewReader(in), 0)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTruncatedFrame) {
		t.Fatalf("err = %v", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Fatalf("allocated %d bytes for a 17-byte truncated frame", d)
	}
	// Above the limit nothing but the header is read.
	r := &countingReader{r: bytes.NewReader(append(header(1<<31), make([]byte, 64)...))}
	if _, err := ReadFrame(r, 0); !errors.Is(err, ErrFrameTooLarge) || r.n != 4 {
		t.Fatalf("err = %v, read %d bytes", err, r.n)
	}
}

// A frame delivered one byte at a time decodes the same.
func TestReadFrameSlowReader(t *testing.T) {
	env, _ := NewEnvelope(&CancelRequest{ProtocolVersion: "1", JobID: strings.Repeat("j", 200_000)})
	frame, _ := EncodeFrame(env)
	got, err := ReadFrame(&oneByteReader{r: bytes.NewReader(frame)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := got.Cancel()
	if err != nil || len(c.JobID) != 200_000 {
		t.Fatalf("cancel: %v, %d", err, len(c.JobID))
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func TestEncodeFrameRejects(t *testing.T) {
	if _, err := EncodeFrame(Envelope{Type: "bogus", Payload: json.RawMessage(`{}`)}); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := EncodeFrame(Envelope{Type: TypeCancel}); !errors.Is(err, ErrInvalidEnvelope) {
		t.Errorf("empty payload: %v", err)
	}
	// A payload built by hand is checked (the package's own encoder's is trusted).
	if _, err := EncodeFrame(Envelope{Type: TypeCancel, Payload: json.RawMessage(`{"job_id": "j1",`)}); !errors.Is(err, ErrInvalidEnvelope) {
		t.Errorf("payload that is not JSON: %v", err)
	}
	frame, err := EncodeFrame(Envelope{Type: TypeCancel, Payload: json.RawMessage("{\n  \"job_id\": \"j1\"\n}")})
	if err != nil {
		t.Fatal(err)
	}
	env, err := DecodeEnvelope(frame[4:])
	if err != nil || env.Type != TypeCancel || binary.BigEndian.Uint32(frame) != uint32(len(frame)-4) {
		t.Fatalf("hand-built payload: %v %+v", err, env)
	}
}

func TestNewUUID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		u := NewUUID()
		if len(u) != 36 || u[14] != '4' || !strings.ContainsRune("89ab", rune(u[19])) || seen[u] {
			t.Fatalf("bad or repeated uuid %q", u)
		}
		seen[u] = true
	}
}

const fuzzLimit = 4096

// sameJSON says whether two JSON texts hold the same value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// The compact reading takes what this package's encoder writes and leaves every other
// layout, and anything it cannot vouch for, to the general decode.
func TestCompactEnvelope(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		typ  MessageType
		body string
	}{
		{`{"type":"request","payload":{"a":1}}`, true, TypeRequest, `{"a":1}`},
		{`{"type":"cancel","payload":{"job_id":"j","hard_kill":true}}`, true, TypeCancel, `{"job_id":"j","hard_kill":true}`},
		{`{"type":"response","payload":{}}`, true, TypeResponse, `{}`},
		{`{ "type":"request","payload":{"a":1}}`, false, "", ""},                 // whitespace
		{`{"payload":{"a":1},"type":"request"}`, false, "", ""},                  // key order
		{`{"type":"request","payload":{"a":1},"x":{}}`, false, "", ""},           // another key
		{`{"type":"request","payload":{"a":1}},"type":"cancel"}`, false, "", ""}, // not one value
		{`{"type":"req\u0075est","payload":{"a":1}}`, false, "", ""},             // escaped type
		{`{"type":"nope","payload":{"a":1}}`, false, "", ""},                     // unknown type
		{`{"type":"request","payload":[1]}`, false, "", ""},                      // not an object
		{`{"type":"request","payload":{"a":}}`, false, "", ""},                   // invalid JSON
	} {
		env, ok := compactEnvelope([]byte(c.in))
		if ok != c.ok || (ok && (env.Type != c.typ || string(env.Payload) != c.body)) {
			t.Errorf("%s: %v %q %s, want %v %q %s", c.in, ok, env.Type, env.Payload, c.ok, c.typ, c.body)
		}
		// Whatever the compact reading declines, DecodeEnvelope still decides.
		if g, err := DecodeEnvelope([]byte(c.in)); ok && (err != nil || g.Type != env.Type) {
			t.Errorf("%s: DecodeEnvelope %v %v", c.in, g, err)
		}
	}
}

func FuzzReadFrame(f *testing.F) {
	add := func(b []byte) { f.Add(b) }
	for _, p := range []any{
		NewRequest("job-1", "echo", []any{1, "two"}, map[string]any{"flag": true}),
		ExecutionOutcome{JobID: "job-1", RequestID: "r", Status: StatusSuccess, Result: json.RawMessage(`{"ok":true}`)},
		CancelRequest{ProtocolVersion: "1", JobID: "job-1", RequestID: "r", HardKill: true},
	} {
		env, err := NewEnvelope(p)
		if err != nil {
			f.Fatal(err)
		}
		frame, err := EncodeFrame(env)
		if err != nil {
			f.Fatal(err)
		}
		add(frame)
		add(frame[:len(frame)/2])        // truncated
		add(append(frame, frame[:3]...)) // a second, truncated header
	}
	add(nil)
	add(header(0))
	add(header(fuzzLimit + 1))
	add(header(0xffffffff))
	add(rawFrame("{\"type\":\"request\",\"payload\":{\"x\":\"\xc3\x28\"}}"))
	add(rawFrame(`{"type":"request"`))
	add(rawFrame(`{"type":"nope","payload":{}}`))
	add(rawFrame(`{"type":"response","payload":{"a":"<&>\u2028\ud800"}}`))
	add(rawFrame(`  {"type":"cancel","payload":  {"job_id":"j"} , "type":"cancel"}  `))
	add(rawFrame(`"just a string"`))

	f.Fuzz(func(t *testing.T, data []byte) {
		r := &countingReader{r: bytes.NewReader(data)}
		env, err := ReadFrame(r, fuzzLimit)
		if len(data) >= 4 && binary.BigEndian.Uint32(data) > fuzzLimit {
			if !errors.Is(err, ErrFrameTooLarge) || r.n != 4 {
				t.Fatalf("oversized frame: err %v after reading %d bytes", err, r.n)
			}
		}
		if r.n > 4+fuzzLimit {
			t.Fatalf("read %d bytes, more than one frame's limit", r.n)
		}
		if err != nil {
			if len(data) == 0 {
				if err != io.EOF {
					t.Fatalf("empty input: %v", err)
				}
				return
			}
			if !IsFrameError(err) {
				t.Fatalf("not a frame error: %v", err)
			}
			return
		}
		if !env.Type.Valid() {
			t.Fatalf("decoded an unknown type %q", env.Type)
		}
		// The compact reading, where it applies, agrees with the general decode.
		if c, ok := compactEnvelope(data[4:]); ok {
			g, err := decodeEnvelope(data[4:])
			if err != nil || g.Type != c.Type || !sameJSON(t, g.Payload, c.Payload) {
				t.Fatalf("compact reading %q %s, general %q %s %v", c.Type, c.Payload, g.Type, g.Payload, err)
			}
		}
		// Round trip: what was decoded encodes and decodes to the same thing.
		frame, err := EncodeFrame(env)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		env2, err := ReadFrame(bytes.NewReader(frame), 0)
		if err != nil {
			t.Fatalf("decode re-encoded frame: %v", err)
		}
		if env2.Type != env.Type {
			t.Fatalf("type %q became %q", env.Type, env2.Type)
		}
		var a, b any
		if err := json.Unmarshal(env.Payload, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(env2.Payload, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("payload changed: %s → %s", env.Payload, env2.Payload)
		}
	})
}
