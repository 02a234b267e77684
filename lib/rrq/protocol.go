// Package rrq implements the orchestrator side of the RRQ Executor Protocol v1: the
// wire types, the length-delimited JSON framing, a Client for one executor endpoint
// and a Pool that runs and supervises executor processes.
//
// The protocol: the orchestrator starts an executor process with RRQ_EXECUTOR_SOCKET
// (a Unix socket path) or RRQ_EXECUTOR_TCP_SOCKET (a localhost host:port); the
// executor binds it and accepts connections. Each connection carries frames of a
// 4-byte big-endian length followed by that many bytes of UTF-8 JSON, each frame an
// envelope {"type": "request"|"response"|"cancel", "payload": {...}}. Executors
// answer the requests of one connection sequentially, exactly one response per
// request, correlated by request_id. docs/executors.md describes it in full.
//
// The sub-package executor is the Go SDK for writing executors.
package rrq

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ProtocolVersion is the only protocol version this package speaks.
const ProtocolVersion = "1"

// Environment variables through which the orchestrator tells an executor where to listen.
const (
	EnvSocket    = "RRQ_EXECUTOR_SOCKET"     // a Unix socket path
	EnvTCPSocket = "RRQ_EXECUTOR_TCP_SOCKET" // a localhost host:port
)

// MessageType is an envelope's "type".
type MessageType string

// The three envelope types of protocol v1.
const (
	TypeRequest  MessageType = "request"  // payload: ExecutionRequest (orchestrator → executor)
	TypeResponse MessageType = "response" // payload: ExecutionOutcome (executor → orchestrator)
	TypeCancel   MessageType = "cancel"   // payload: CancelRequest (orchestrator → executor)
)

// Valid reports whether t is one of the protocol's envelope types.
func (t MessageType) Valid() bool {
	return t == TypeRequest || t == TypeResponse || t == TypeCancel
}

// Status is an ExecutionOutcome's "status".
type Status string

// The outcome statuses of protocol v1.
const (
	StatusSuccess Status = "success" // completed; result holds the result
	StatusRetry   Status = "retry"   // the executor asks for a retry (retry_after_seconds optional)
	StatusTimeout Status = "timeout" // the executor timed itself out
	StatusError   Status = "error"   // failed; error describes it
)

// Valid reports whether s is one of the protocol's statuses.
func (s Status) Valid() bool {
	return s == StatusSuccess || s == StatusRetry || s == StatusTimeout || s == StatusError
}

// Reserved and conventional error types.
const (
	// ErrorTypeHandlerNotFound is reserved by the protocol: the executor has no handler
	// for function_name. Fatal: the orchestrator moves the job to the DLQ.
	ErrorTypeHandlerNotFound = "handler_not_found"
	// ErrorTypeCancelled is what executors report for a job cancelled by a cancel frame.
	ErrorTypeCancelled = "cancelled"
)

// Envelope is one frame: {"type": ..., "payload": {...}}.
type Envelope struct {
	Type    MessageType     `json:"type"`
	Payload json.RawMessage `json:"payload"`
	// trusted: Payload came from this package's encoder (valid, compact JSON), so
	// EncodeFrame need not check it again.
	trusted bool
	// valid: DecodeEnvelope found Payload valid UTF-8 JSON, so Request and Outcome may
	// decode it the fast way (decode.go).
	valid bool
	// req, out: the payload as the fast decoder decoded it while DecodeEnvelope
	// checked it (a request's, a response's), for Request and Outcome.
	req *ExecutionRequest
	out *ExecutionOutcome
}

// ExecutionContext is an ExecutionRequest's "context".
type ExecutionContext struct {
	JobID        string            `json:"job_id"`
	Attempt      int               `json:"attempt"` // 1-based
	EnqueueTime  time.Time         `json:"enqueue_time"`
	QueueName    string            `json:"queue_name"`
	Deadline     *time.Time        `json:"deadline,omitempty"`
	TraceContext map[string]string `json:"trace_context,omitempty"`
	WorkerID     string            `json:"worker_id,omitempty"`
}

// MarshalJSON writes the timestamps as RFC 3339 in UTC.
func (c ExecutionContext) MarshalJSON() ([]byte, error) {
	type plain ExecutionContext
	p := plain(c)
	p.EnqueueTime = p.EnqueueTime.UTC()
	if p.Deadline != nil {
		d := p.Deadline.UTC()
		p.Deadline = &d
	}
	return json.Marshal(p)
}

// ExecutionRequest is the payload of a "request" frame.
type ExecutionRequest struct {
	ProtocolVersion string                     `json:"protocol_version"`
	RequestID       string                     `json:"request_id"`
	JobID           string                     `json:"job_id"`
	FunctionName    string                     `json:"function_name"`
	Args            []json.RawMessage          `json:"args"`
	Kwargs          map[string]json.RawMessage `json:"kwargs"`
	Context         ExecutionContext           `json:"context"`
}

// MarshalJSON writes nil Args and Kwargs as [] and {} (the protocol wants an array and
// an object, never null).
func (r ExecutionRequest) MarshalJSON() ([]byte, error) {
	// Written by hand (encode.go): encoding/json's reflection and its re-scan of every
	// argument were a tenth of a runner's CPU at a few thousand requests a second.
	return appendRequest(make([]byte, 0, 512), &r)
}

// NewRequest builds a request with a fresh request_id, protocol version "1", attempt 1,
// the enqueue time set to now and the given arguments encoded as JSON. It panics only if
// an argument cannot be encoded as JSON.
func NewRequest(jobID, functionName string, args []any, kwargs map[string]any) ExecutionRequest {
	r := ExecutionRequest{
		ProtocolVersion: ProtocolVersion,
		RequestID:       NewUUID(),
		JobID:           jobID,
		FunctionName:    functionName,
		Args:            make([]json.RawMessage, 0, len(args)),
		Kwargs:          make(map[string]json.RawMessage, len(kwargs)),
		Context:         ExecutionContext{JobID: jobID, Attempt: 1, EnqueueTime: time.Now().UTC()},
	}
	for _, a := range args {
		r.Args = append(r.Args, mustJSON(a))
	}
	for k, v := range kwargs {
		r.Kwargs[k] = mustJSON(v)
	}
	return r
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("rrq: argument cannot be encoded as JSON: %v", err))
	}
	return b
}

// DecodeArgs decodes the positional arguments into v (typically a pointer to a slice or
// to a struct-less array of values).
func (r *ExecutionRequest) DecodeArgs(v any) error {
	b, err := json.Marshal(r.argsOrEmpty())
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// DecodeKwargs decodes the keyword arguments (a JSON object) into v, typically a pointer
// to a struct with json tags or to a map.
func (r *ExecutionRequest) DecodeKwargs(v any) error {
	kw := r.Kwargs
	if kw == nil {
		kw = map[string]json.RawMessage{}
	}
	b, err := json.Marshal(kw)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Kwarg decodes one keyword argument into v. It reports false (and leaves v alone) when
// the argument is absent.
func (r *ExecutionRequest) Kwarg(name string, v any) (bool, error) {
	raw, ok := r.Kwargs[name]
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal(raw, v)
}

func (r *ExecutionRequest) argsOrEmpty() []json.RawMessage {
	if r.Args == nil {
		return []json.RawMessage{}
	}
	return r.Args
}

// Validate checks what an executor needs to run the request: the protocol version, the
// ids and the function name.
func (r *ExecutionRequest) Validate() error {
	switch {
	case r.ProtocolVersion != ProtocolVersion:
		return fmt.Errorf("rrq: unsupported protocol_version %q (want %q)", r.ProtocolVersion, ProtocolVersion)
	case r.RequestID == "":
		return errors.New("rrq: request_id is empty")
	case r.JobID == "":
		return errors.New("rrq: job_id is empty")
	case r.FunctionName == "":
		return errors.New("rrq: function_name is empty")
	}
	return nil
}

// ExecutionError is an ExecutionOutcome's structured "error".
type ExecutionError struct {
	Message string          `json:"message"`
	Type    string          `json:"type,omitempty"`
	Code    string          `json:"code,omitempty"`
	Details json.RawMessage `json:"details,omitempty"`
}

// Error makes an ExecutionError usable as a Go error.
func (e *ExecutionError) Error() string {
	if e.Type != "" {
		return e.Type + ": " + e.Message
	}
	return e.Message
}

// ExecutionOutcome is the payload of a "response" frame. Error and RetryAfterSeconds are
// written as null when absent, as in the protocol's example.
type ExecutionOutcome struct {
	JobID             string          `json:"job_id"`
	RequestID         string          `json:"request_id"`
	Status            Status          `json:"status"`
	Result            json.RawMessage `json:"result"`
	Error             *ExecutionError `json:"error"`
	RetryAfterSeconds *float64        `json:"retry_after_seconds"`
}

// DecodeResult decodes the result into v.
func (o *ExecutionOutcome) DecodeResult(v any) error {
	if len(o.Result) == 0 {
		return json.Unmarshal([]byte("null"), v)
	}
	return json.Unmarshal(o.Result, v)
}

// RetryAfter returns retry_after_seconds as a duration (0 when absent).
func (o *ExecutionOutcome) RetryAfter() time.Duration {
	if o.RetryAfterSeconds == nil || *o.RetryAfterSeconds <= 0 {
		return 0
	}
	return time.Duration(*o.RetryAfterSeconds * float64(time.Second))
}

// Validate checks an outcome as received from an executor.
func (o *ExecutionOutcome) Validate() error {
	switch {
	case o.RequestID == "":
		return errors.New("response has no request_id")
	case !o.Status.Valid():
		return fmt.Errorf("response has invalid status %q", o.Status)
	case o.RetryAfterSeconds != nil && *o.RetryAfterSeconds < 0:
		return fmt.Errorf("response has negative retry_after_seconds %v", *o.RetryAfterSeconds)
	}
	return nil
}

// CancelRequest is the payload of a "cancel" frame.
type CancelRequest struct {
	ProtocolVersion string `json:"protocol_version"`
	JobID           string `json:"job_id"`
	RequestID       string `json:"request_id,omitempty"` // optional: cancel only this request
	HardKill        bool   `json:"hard_kill"`
}

// NewEnvelope wraps a payload (ExecutionRequest, ExecutionOutcome or CancelRequest, or
// their pointers) in an envelope of the matching type.
func NewEnvelope(payload any) (Envelope, error) {
	var t MessageType
	switch payload.(type) {
	case ExecutionRequest, *ExecutionRequest:
		t = TypeRequest
	case ExecutionOutcome, *ExecutionOutcome:
		t = TypeResponse
	case CancelRequest, *CancelRequest:
		t = TypeCancel
	default:
		return Envelope{}, fmt.Errorf("rrq: cannot wrap %T in an envelope", payload)
	}
	var b []byte
	var err error
	switch p := payload.(type) {
	case *ExecutionRequest: // its MarshalJSON directly: json.Marshal would re-scan its output
		b, err = p.MarshalJSON()
	case ExecutionRequest:
		b, err = p.MarshalJSON()
	case *ExecutionOutcome:
		b, err = appendOutcome(make([]byte, 0, 256), p)
	case ExecutionOutcome:
		b, err = appendOutcome(make([]byte, 0, 256), &p)
	default:
		b, err = json.Marshal(payload)
	}
	if err != nil {
		return Envelope{}, fmt.Errorf("rrq: encode %s payload: %w", t, err)
	}
	return Envelope{Type: t, Payload: b, trusted: true}, nil
}

// Request decodes the payload of a "request" envelope.
func (e Envelope) Request() (ExecutionRequest, error) {
	if e.req != nil && e.Type == TypeRequest {
		return *e.req, nil
	}
	if e.valid && e.Type == TypeRequest {
		if r, ok := fastRequest(e.Payload); ok {
			return r, nil
		}
	}
	var r ExecutionRequest
	err := e.decode(TypeRequest, &r)
	return r, err
}

// Outcome decodes the payload of a "response" envelope.
func (e Envelope) Outcome() (ExecutionOutcome, error) {
	if e.out != nil && e.Type == TypeResponse {
		return *e.out, nil
	}
	if e.valid && e.Type == TypeResponse {
		if o, ok := fastOutcome(e.Payload); ok {
			return o, nil
		}
	}
	var o ExecutionOutcome
	err := e.decode(TypeResponse, &o)
	return o, err
}

// Cancel decodes the payload of a "cancel" envelope.
func (e Envelope) Cancel() (CancelRequest, error) {
	var c CancelRequest
	err := e.decode(TypeCancel, &c)
	return c, err
}

func (e Envelope) decode(want MessageType, v any) error {
	if e.Type != want {
		return fmt.Errorf("rrq: envelope type is %q, not %q", e.Type, want)
	}
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("rrq: decode %s payload: %w", want, err)
	}
	return nil
}

// NewUUID returns a random (version 4) UUID in its canonical text form.
func NewUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("rrq: crypto/rand failed: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
