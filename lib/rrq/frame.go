package rrq

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"
)

// DefaultMaxFrameSize is the default limit on a frame's payload length (16 MiB).
const DefaultMaxFrameSize = 16 << 20

// Frame decoding errors. ReadFrame wraps exactly one of them (test with errors.Is), except
// for a clean end of stream, which it reports as io.EOF, and for other I/O errors, which
// it returns wrapped as they are.
var (
	ErrZeroLengthFrame = errors.New("rrq: zero-length frame")
	ErrFrameTooLarge   = errors.New("rrq: frame exceeds the size limit")
	ErrInvalidUTF8     = errors.New("rrq: frame payload is not valid UTF-8")
	ErrInvalidJSON     = errors.New("rrq: frame payload is not valid JSON")
	ErrInvalidEnvelope = errors.New("rrq: frame is not a valid envelope")
	ErrUnknownType     = errors.New("rrq: unknown envelope type")
	ErrTruncatedFrame  = errors.New("rrq: connection closed mid-frame")
)

// IsFrameError reports whether err is one of the frame decoding errors, i.e. the peer
// sent bytes that are not a valid frame (as opposed to an I/O error or a clean EOF).
func IsFrameError(err error) bool {
	for _, e := range []error{ErrZeroLengthFrame, ErrFrameTooLarge, ErrInvalidUTF8, ErrInvalidJSON,
		ErrInvalidEnvelope, ErrUnknownType, ErrTruncatedFrame} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// readChunk is how much ReadFrame allocates up front; a larger frame's buffer grows as
// its bytes actually arrive, so a peer that announces a large frame and sends nothing
// costs no memory.
const readChunk = 64 << 10

// ReadFrame reads one frame from r and decodes its envelope. maxLen limits the payload
// length (<= 0 means DefaultMaxFrameSize); a longer frame is rejected after reading only
// its 4-byte header, so the stream is then unusable. A clean end of stream before a
// frame's first byte returns io.EOF.
func ReadFrame(r io.Reader, maxLen int) (Envelope, error) {
	payload, err := ReadFramePayload(r, maxLen)
	if err != nil {
		return Envelope{}, err
	}
	return DecodeEnvelope(payload)
}

// ReadFramePayload reads one frame from r and returns its raw payload without decoding
// it. Errors are those of ReadFrame that concern framing: io.EOF, ErrTruncatedFrame,
// ErrZeroLengthFrame, ErrFrameTooLarge, or an I/O error.
func ReadFramePayload(r io.Reader, maxLen int) ([]byte, error) {
	if maxLen <= 0 {
		maxLen = DefaultMaxFrameSize
	}
	var hdr [4]byte
	if n, err := io.ReadFull(r, hdr[:]); err != nil {
		switch {
		case errors.Is(err, io.EOF) && n == 0:
			return nil, io.EOF
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("%w: got %d of 4 header bytes", ErrTruncatedFrame, n)
		default:
			return nil, fmt.Errorf("rrq: read frame header: %w", err)
		}
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size == 0 {
		return nil, ErrZeroLengthFrame
	}
	if uint64(size) > uint64(maxLen) {
		return nil, fmt.Errorf("%w: %d bytes announced, limit %d", ErrFrameTooLarge, size, maxLen)
	}
	n := int(size)
	buf := make([]byte, 0, min(n, readChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), min(2*cap(buf), n))
			copy(nb, buf)
			buf = nb
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil {
			if len(buf) == n {
				break
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%w: got %d of %d payload bytes", ErrTruncatedFrame, len(buf), n)
			}
			return nil, fmt.Errorf("rrq: read frame payload (%d of %d bytes): %w", len(buf), n, err)
		}
	}
	return buf, nil
}

// DecodeEnvelope validates a frame payload and decodes its envelope: the payload must be
// UTF-8, JSON, an object with a known "type" and an object "payload".
func DecodeEnvelope(payload []byte) (Envelope, error) {
	if !utf8.Valid(payload) {
		return Envelope{}, ErrInvalidUTF8
	}
	if env, ok := compactEnvelope(payload); ok {
		return env, nil
	}
	return decodeEnvelope(payload)
}

// decodeEnvelope is DecodeEnvelope's general way, for any layout of a valid UTF-8
// payload.
func decodeEnvelope(payload []byte) (Envelope, error) {
	var raw struct {
		Type    *string         `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(payload, &raw); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return Envelope{}, fmt.Errorf("%w: %v", ErrInvalidEnvelope, err)
		}
		return Envelope{}, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	if raw.Type == nil {
		return Envelope{}, fmt.Errorf("%w: no \"type\"", ErrInvalidEnvelope)
	}
	t := MessageType(*raw.Type)
	if !t.Valid() {
		return Envelope{}, fmt.Errorf("%w: %q", ErrUnknownType, truncate(*raw.Type, 64))
	}
	if p := bytes.TrimLeft(raw.Payload, " \t\r\n"); len(p) == 0 || p[0] != '{' {
		return Envelope{}, fmt.Errorf("%w: \"payload\" of a %s frame is not an object", ErrInvalidEnvelope, t)
	}
	return Envelope{Type: t, Payload: raw.Payload, valid: true}, nil
}

// compactEnvelope reads an envelope written as this package's encoder writes it,
// {"type":"<type>","payload":{…}}, without decoding the envelope: a request's or a
// response's payload is decoded (and so checked) at once, kept for Request or Outcome;
// any other payload gets one validity scan (it is decoded by its reader). ok=false: decode it the general way (whitespace, other key order, an
// error to report).
func compactEnvelope(b []byte) (Envelope, bool) {
	const head, mid = `{"type":"`, `","payload":`
	if !bytes.HasPrefix(b, []byte(head)) || len(b) == 0 || b[len(b)-1] != '}' {
		return Envelope{}, false
	}
	rest := b[len(head):]
	q := bytes.IndexByte(rest, '"')
	if q < 0 {
		return Envelope{}, false
	}
	var t MessageType // one of the constants: no string made
	switch string(rest[:q]) {
	case string(TypeRequest):
		t = TypeRequest
	case string(TypeResponse):
		t = TypeResponse
	case string(TypeCancel):
		t = TypeCancel
	default:
		return Envelope{}, false
	}
	rest = rest[q:]
	if !bytes.HasPrefix(rest[1:], []byte(mid[1:])) {
		return Envelope{}, false
	}
	p := rest[len(mid) : len(rest)-1]
	if len(p) == 0 || p[0] != '{' || p[len(p)-1] != '}' {
		return Envelope{}, false
	}
	env := Envelope{Type: t, Payload: p, valid: true}
	// A request's or a response's payload is checked as it is decoded (decode.go): one
	// pass over it, not a check and then a decode; one the fast decoder leaves (not
	// plain, or not valid) is checked on its own.
	switch t {
	case TypeRequest:
		if r, ok := fastRequest(p); ok {
			env.req = &r
			return env, true
		}
	case TypeResponse:
		if o, ok := fastOutcome(p); ok {
			env.out = &o
			return env, true
		}
	}
	if !validJSON(p) {
		return Envelope{}, false
	}
	return env, true
}

// EncodeFrame returns env as one frame: the 4-byte big-endian length and the JSON.
func EncodeFrame(env Envelope) ([]byte, error) {
	if !env.Type.Valid() {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, env.Type)
	}
	if len(env.Payload) == 0 {
		return nil, fmt.Errorf("%w: empty payload", ErrInvalidEnvelope)
	}
	if !env.trusted && !validJSON(env.Payload) {
		return nil, fmt.Errorf("%w: payload is not valid JSON", ErrInvalidEnvelope)
	}
	// {"type":"<type>","payload":<payload>}: the type is one of three plain words.
	const head, mid = `{"type":"`, `","payload":`
	n := len(head) + len(env.Type) + len(mid) + len(env.Payload) + 1
	if uint64(n) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	out := make([]byte, 4, 4+n)
	binary.BigEndian.PutUint32(out, uint32(n))
	out = append(out, head...)
	out = append(out, env.Type...)
	out = append(out, mid...)
	out = append(out, env.Payload...)
	return append(out, '}'), nil
}

// requestFrame encodes a request straight into its frame (EncodeFrame of NewEnvelope's
// envelope, without the copy between them).
func requestFrame(r *ExecutionRequest) ([]byte, error) {
	return appendFrame(make([]byte, 0, 640), TypeRequest, func(b []byte) ([]byte, error) { return appendRequest(b, r) })
}

// AppendOutcomeFrame appends o as one frame (what WriteMessage writes for it) to b: an
// executor appends its answers to its write buffer, without a buffer of their own.
func AppendOutcomeFrame(b []byte, o *ExecutionOutcome) ([]byte, error) {
	return appendFrame(b, TypeResponse, func(b []byte) ([]byte, error) { return appendOutcome(b, o) })
}

// appendFrame appends a frame of type t whose payload payload appends.
func appendFrame(b []byte, t MessageType, payload func([]byte) ([]byte, error)) ([]byte, error) {
	const head, mid = `{"type":"`, `","payload":`
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = append(b, head...)
	b = append(b, t...)
	b = append(b, mid...)
	b, err := payload(b)
	if err != nil {
		return nil, fmt.Errorf("rrq: encode %s payload: %w", t, err)
	}
	b = append(b, '}')
	n := len(b) - start - 4
	if uint64(n) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// WriteFrame writes env to w as one frame, in a single Write call.
func WriteFrame(w io.Writer, env Envelope) error {
	frame, err := EncodeFrame(env)
	if err != nil {
		return err
	}
	_, err = w.Write(frame)
	return err
}

// WriteMessage wraps payload in an envelope (see NewEnvelope) and writes it as one frame.
func WriteMessage(w io.Writer, payload any) error {
	env, err := NewEnvelope(payload)
	if err != nil {
		return err
	}
	return WriteFrame(w, env)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
