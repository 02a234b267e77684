package rrq

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// The payloads of request and response frames are decoded here without encoding/json's
// reflection when their JSON is known to be valid (DecodeEnvelope checked it) and
// plain: keys spelt exactly as the protocol spells them, values of the expected JSON
// types. Anything else (another key, a key or string with escapes, a value of another
// type, a number that is not a plain integer where one is wanted) makes the fast
// decoder give up, and encoding/json decodes the payload instead: the result, and the
// error, are always what encoding/json gives. The fuzz test FuzzFastDecode checks
// that. encoding/json's reflection and its second scan of the payload were a fifth of
// an executor's CPU per no-op call.

// jsonScan walks JSON that is known to be valid. Every method reports false, rather
// than failing, on bytes it does not expect.
type jsonScan struct {
	b []byte
	i int
}

func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// skipString moves past the string that starts at s.i.
func (s *jsonScan) skipString() bool {
	s.i++
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
		case '"':
			s.i++
			return true
		default:
			s.i++
		}
	}
	return false
}

// value returns the raw bytes of the value that starts at s.i (after white space).
func (s *jsonScan) value() ([]byte, bool) {
	s.ws()
	if s.i >= len(s.b) {
		return nil, false
	}
	start := s.i
	switch s.b[s.i] {
	case '"':
		if !s.skipString() {
			return nil, false
		}
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return nil, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				return s.b[start:s.i], true
			}
		}
		return nil, false
	default: // a number, true, false or null
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.b[start:s.i], s.i > start
			}
			s.i++
		}
	}
	return s.b[start:s.i], s.i > start
}

// object calls member for each member of the object raw (valid JSON), in order, with
// the key's bytes between its quotes (a switch on string(key) makes no string); it
// reports false when raw is not an object, a key has an escape or member refuses.
func object(raw []byte, member func(key, v []byte) bool) bool {
	s := jsonScan{b: raw}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return false
	}
	s.i++
	for {
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		if s.b[s.i] == '}' {
			return true
		}
		if s.b[s.i] == ',' {
			s.i++
			s.ws()
		}
		k, ok := s.value()
		if !ok {
			return false
		}
		key, ok := unquoted(k)
		if !ok {
			return false
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		v, ok := s.value()
		if !ok || !member(key, v) {
			return false
		}
	}
}

// unquoted returns the bytes between the quotes of the JSON string raw when it has no
// escape.
func unquoted(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') >= 0 {
		return nil, false
	}
	return in, true
}

// texts makes the strings of one payload: substrings of a single copy of it, made at
// the first string asked for — one allocation per payload, not one per key and value
// (they were a third of the allocations of a no-op call, both sides counted).
type texts struct {
	b []byte
	s string
}

// of returns v, a part of t.b (b[i:j], as the scanner slices it), as a string.
func (t *texts) of(v []byte) string {
	i := cap(t.b) - cap(v)
	if i < 0 || i+len(v) > len(t.b) || len(v) == 0 {
		return string(v) // not a part of b (never so here): a copy of its own
	}
	if t.s == "" {
		t.s = string(t.b)
	}
	return t.s[i : i+len(v)]
}

// plain returns the string raw holds when it has no escape.
func (t *texts) plain(raw []byte) (string, bool) {
	in, ok := unquoted(raw)
	if !ok {
		return "", false
	}
	return t.of(in), true
}

func isNull(v []byte) bool { return string(v) == "null" }

// setString decodes a JSON string (null leaves *p alone, as encoding/json does).
func (t *texts) setString(v []byte, p *string) bool {
	if isNull(v) {
		return true
	}
	s, ok := t.plain(v)
	if ok {
		*p = s
	}
	return ok
}

func setInt(v []byte, p *int) bool {
	if isNull(v) {
		return true
	}
	n, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
	if err != nil {
		return false
	}
	*p = int(n)
	return true
}

func setTime(v []byte, p *time.Time) bool {
	return p.UnmarshalJSON(v) == nil
}

// fastRequest decodes a request payload (valid JSON) as encoding/json would, or
// reports false.
func fastRequest(payload []byte) (ExecutionRequest, bool) {
	var r ExecutionRequest
	t := &texts{b: payload}
	ok := object(payload, func(k, v []byte) bool {
		switch string(k) {
		case "protocol_version":
			return t.setString(v, &r.ProtocolVersion)
		case "request_id":
			return t.setString(v, &r.RequestID)
		case "job_id":
			return t.setString(v, &r.JobID)
		case "function_name":
			return t.setString(v, &r.FunctionName)
		case "args":
			return setArgs(v, &r.Args)
		case "kwargs":
			return setMap(t, v, &r.Kwargs, rawValue)
		case "context":
			if isNull(v) {
				return true
			}
			return fastContext(t, v, &r.Context)
		}
		return false
	})
	return r, ok
}

func fastContext(t *texts, raw []byte, c *ExecutionContext) bool {
	return object(raw, func(k, v []byte) bool {
		switch string(k) {
		case "job_id":
			return t.setString(v, &c.JobID)
		case "attempt":
			return setInt(v, &c.Attempt)
		case "enqueue_time":
			return setTime(v, &c.EnqueueTime)
		case "queue_name":
			return t.setString(v, &c.QueueName)
		case "deadline":
			if isNull(v) {
				c.Deadline = nil
				return true
			}
			if c.Deadline == nil {
				c.Deadline = new(time.Time)
			}
			return setTime(v, c.Deadline)
		case "trace_context":
			return setMap(t, v, &c.TraceContext, t.plain)
		case "worker_id":
			return t.setString(v, &c.WorkerID)
		}
		return false
	})
}

// setArgs decodes a JSON array into raw values; [] gives an empty slice, null nil.
func setArgs(v []byte, p *[]json.RawMessage) bool {
	if isNull(v) {
		*p = nil
		return true
	}
	if len(v) == 0 || v[0] != '[' {
		return false
	}
	s := jsonScan{b: v, i: 1}
	if s.ws(); s.i < len(s.b) && s.b[s.i] == ']' {
		*p = []json.RawMessage{} // empty, not nil: no allocation
		return true
	}
	out := make([]json.RawMessage, 0, 4)
	for {
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ']':
			*p = out
			return true
		case ',':
			s.i++
		}
		e, ok := s.value()
		if !ok {
			return false
		}
		out = append(out, json.RawMessage(e))
	}
}

// setMap decodes a JSON object into the map at p (into the map already there, as
// encoding/json does; null gives nil), each value by elem.
func setMap[V any](t *texts, v []byte, p *map[string]V, elem func([]byte) (V, bool)) bool {
	if isNull(v) {
		*p = nil
		return true
	}
	if *p == nil {
		*p = map[string]V{}
	}
	m := *p
	return object(v, func(k, e []byte) bool {
		x, ok := elem(e)
		if ok {
			m[t.of(k)] = x
		}
		return ok
	})
}

func rawValue(e []byte) (json.RawMessage, bool) { return json.RawMessage(e), true }

// fastOutcome decodes a response payload (valid JSON) as encoding/json would, or
// reports false.
func fastOutcome(payload []byte) (ExecutionOutcome, bool) {
	var o ExecutionOutcome
	t := &texts{b: payload}
	ok := object(payload, func(k, v []byte) bool {
		switch string(k) {
		case "job_id":
			return t.setString(v, &o.JobID)
		case "request_id":
			return t.setString(v, &o.RequestID)
		case "status":
			return t.setString(v, (*string)(&o.Status))
		case "result":
			o.Result = json.RawMessage(v)
			return true
		case "error":
			if isNull(v) {
				o.Error = nil
				return true
			}
			if o.Error == nil {
				o.Error = &ExecutionError{}
			}
			return fastError(t, v, o.Error)
		case "retry_after_seconds":
			if isNull(v) {
				o.RetryAfterSeconds = nil
				return true
			}
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
				return false
			}
			o.RetryAfterSeconds = &f
			return true
		}
		return false
	})
	return o, ok
}

func fastError(t *texts, raw []byte, e *ExecutionError) bool {
	return object(raw, func(k, v []byte) bool {
		switch string(k) {
		case "message":
			return t.setString(v, &e.Message)
		case "type":
			return t.setString(v, &e.Type)
		case "code":
			return t.setString(v, &e.Code)
		case "details":
			e.Details = json.RawMessage(v)
			return true
		}
		return false
	})
}
