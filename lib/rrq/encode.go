package rrq

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// The request encoder: the runner encodes one request per handler call, and
// encoding/json's reflection over the request, its re-scan of every json.RawMessage
// argument and its sorting of the kwargs map were a tenth of a runner's CPU. This
// writes the same bytes as json.Marshal of the plain structs (tested), by hand.

// appendRequest appends r as JSON: nil Args and Kwargs as [] and {}, the timestamps
// in UTC, every argument checked to be JSON (an error names the first that is not).
func appendRequest(b []byte, r *ExecutionRequest) ([]byte, error) {
	b = append(b, `{"protocol_version":`...)
	b = appendString(b, r.ProtocolVersion)
	b = append(b, `,"request_id":`...)
	b = appendString(b, r.RequestID)
	b = append(b, `,"job_id":`...)
	b = appendString(b, r.JobID)
	b = append(b, `,"function_name":`...)
	b = appendString(b, r.FunctionName)
	b = append(b, `,"args":[`...)
	for i, a := range r.Args {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendRaw(b, a); err != nil {
			return nil, fmt.Errorf("json: args[%d]: %w", i, err)
		}
	}
	b = append(b, `],"kwargs":`...)
	b, err := appendObject(b, r.Kwargs, appendRaw)
	if err != nil {
		return nil, fmt.Errorf("json: kwargs%w", err)
	}
	b = append(b, `,"context":`...)
	if b, err = appendContext(b, &r.Context); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

func appendContext(b []byte, c *ExecutionContext) ([]byte, error) {
	b = append(b, `{"job_id":`...)
	b = appendString(b, c.JobID)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(c.Attempt), 10)
	b = append(b, `,"enqueue_time":`...)
	b, err := appendTime(b, c.EnqueueTime)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"queue_name":`...)
	b = appendString(b, c.QueueName)
	if c.Deadline != nil {
		b = append(b, `,"deadline":`...)
		if b, err = appendTime(b, *c.Deadline); err != nil {
			return nil, err
		}
	}
	if len(c.TraceContext) > 0 {
		b = append(b, `,"trace_context":`...)
		b, _ = appendObject(b, c.TraceContext, func(b []byte, v string) ([]byte, error) { return appendString(b, v), nil })
	}
	if c.WorkerID != "" {
		b = append(b, `,"worker_id":`...)
		b = appendString(b, c.WorkerID)
	}
	return append(b, '}'), nil
}

// appendObject appends m as a JSON object as json.Marshal writes a map: its keys
// sorted, each value written by value (an error names its key: `["k"]: …`).
func appendObject[V any](b []byte, m map[string]V, value func([]byte, V) ([]byte, error)) ([]byte, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		var err error
		if b, err = value(b, m[k]); err != nil {
			return nil, fmt.Errorf("[%q]: %w", k, err)
		}
	}
	return append(b, '}'), nil
}

// appendTime appends t in UTC as time.Time's MarshalJSON writes it (RFC 3339 with
// nanoseconds, years 0–9999 only).
func appendTime(b []byte, t time.Time) ([]byte, error) {
	t = t.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("json: time %v: year outside of range [0,9999]", t)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// appendRaw appends a JSON value as json.Marshal writes a json.RawMessage: null when
// empty, else checked, and compacted with <, >, &, U+2028 and U+2029 escaped.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return append(b, "null"...), nil
	}
	if !compactJSON(raw) {
		out, err := json.Marshal(raw) // compacts and escapes, as for any RawMessage
		if err != nil {
			return nil, err
		}
		return append(b, out...), nil
	}
	if !validJSON(raw) {
		return nil, fmt.Errorf("invalid JSON value %.40q", raw)
	}
	return append(b, raw...), nil
}

// compactJSON reports whether raw has nothing json.Compact or json.Marshal would
// change: no whitespace outside strings, and no "<", ">", "&", U+2028 or U+2029
// (json.Marshal escapes those).
func compactJSON(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xA8 || raw[i+2] == 0xA9):
			return false
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json writes it: with
// HTML escaping of <, > and &, U+2028 and U+2029 escaped, and each byte of invalid
// UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendOutcome appends o as json.Marshal writes the plain struct (tested): executors
// answer every call with one, and encoding/json's reflection was a tenth of the Go
// executor's CPU per no-op call.
func appendOutcome(b []byte, o *ExecutionOutcome) ([]byte, error) {
	b = append(b, `{"job_id":`...)
	b = appendString(b, o.JobID)
	b = append(b, `,"request_id":`...)
	b = appendString(b, o.RequestID)
	b = append(b, `,"status":`...)
	b = appendString(b, string(o.Status))
	b = append(b, `,"result":`...)
	b, err := appendRaw(b, o.Result)
	if err != nil {
		return nil, fmt.Errorf("json: result: %w", err)
	}
	b = append(b, `,"error":`...)
	if e := o.Error; e == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"message":`...)
		b = appendString(b, e.Message)
		if e.Type != "" {
			b = append(b, `,"type":`...)
			b = appendString(b, e.Type)
		}
		if e.Code != "" {
			b = append(b, `,"code":`...)
			b = appendString(b, e.Code)
		}
		if len(e.Details) > 0 {
			b = append(b, `,"details":`...)
			if b, err = appendRaw(b, e.Details); err != nil {
				return nil, fmt.Errorf("json: error.details: %w", err)
			}
		}
		b = append(b, '}')
	}
	b = append(b, `,"retry_after_seconds":`...)
	if o.RetryAfterSeconds == nil {
		b = append(b, "null"...)
	} else if b, err = appendFloat(b, *o.RetryAfterSeconds); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendFloat appends f as encoding/json writes a float64 (NaN and infinities are
// refused, as there).
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, 64))
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 as e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}
