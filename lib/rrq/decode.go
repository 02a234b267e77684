package rrq

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// The payloads of request and response frames are decoded here without encoding/json's
// reflection when they are plain: keys spelt exactly as the protocol spells them,
// values of the expected JSON types. Anything else (another key, a key or string with
// escapes, a value of another type, a number that is not a plain integer where one is
// wanted) makes the fast decoder give up, and encoding/json decodes the payload
// instead: the result, and the error, are always what encoding/json gives. The fuzz
// test FuzzFastDecode checks that. encoding/json's reflection and its second scan of
// the payload were a fifth of an executor's CPU per no-op call.
//
// The fast decoder also checks the JSON as it goes, as validJSON does (FuzzFastDecode
// checks that too: what it takes, json.Valid takes): a frame's payload that it takes
// is checked and decoded in one pass (compactEnvelope), where a check of the whole
// payload and then its decode were two — the check was a fifth of an executor's CPU
// per no-op call.

// jsonScan walks JSON, checking it as it goes. Every method reports false, rather than
// failing, on bytes it does not expect or JSON that is not valid.
type jsonScan struct {
	b []byte
	i int
	// depth is the objects and arrays open at i (encoding/json's nesting limit,
	// maxNesting, counts them).
	depth int
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

// skipString moves past the string that starts at s.i, checking it (validator.str).
func (s *jsonScan) skipString() bool {
	v := validator{b: s.b, i: s.i}
	if !v.str() {
		return false
	}
	s.i = v.i
	return true
}

// next moves past what follows a member of an object or array (validator.next): more
// when a comma (another member follows), ok when that or its closing byte.
func (s *jsonScan) next(closing byte) (more, ok bool) {
	v := validator{b: s.b, i: s.i}
	more, ok = v.next(closing)
	s.i = v.i
	return more, ok
}

// end reports whether nothing but white space follows s.i: the payload was one value.
func (s *jsonScan) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// value returns the raw bytes of the value that starts at s.i (after white space),
// checked (validator.value).
func (s *jsonScan) value() ([]byte, bool) {
	s.ws()
	start := s.i
	v := validator{b: s.b, i: s.i}
	if !v.value(s.depth) {
		return nil, false
	}
	s.i = v.i
	return s.b[start:s.i], true
}

// null moves past a null at s.i (after white space) and reports whether there was one.
func (s *jsonScan) null() bool {
	s.ws()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// object walks the object at s.i (after white space) in one pass: for each member it
// calls member with the key's bytes between its quotes (a switch on string(key) makes
// no string) and the scanner at the member's value, which member reads (a nested
// object is decoded where it stands, not skipped first and walked again). It reports
// false when there is no valid object, a key has an escape or member refuses.
func (s *jsonScan) object(member func(key []byte) bool) bool {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' || s.depth >= maxNesting {
		return false
	}
	s.i++
	s.depth++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return true
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		start := s.i
		if !s.skipString() {
			return false
		}
		key, ok := unquoted(s.b[start:s.i])
		if !ok {
			return false
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		if !member(key) {
			return false
		}
		more, ok := s.next('}')
		if !ok {
			return false
		}
		if !more {
			s.depth--
			return true
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

// setString decodes the JSON string at s.i (null leaves *p alone, as encoding/json
// does).
func (t *texts) setString(s *jsonScan, p *string) bool {
	v, ok := s.value()
	if !ok {
		return false
	}
	if isNull(v) {
		return true
	}
	str, ok := t.plain(v)
	if ok {
		*p = str
	}
	return ok
}

func setInt(s *jsonScan, p *int) bool {
	v, ok := s.value()
	if !ok {
		return false
	}
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

func setTime(s *jsonScan, p *time.Time) bool {
	v, ok := s.value()
	return ok && p.UnmarshalJSON(v) == nil
}

// fastRequest decodes a request payload as encoding/json would, or reports false (the
// payload is then not plain, or not valid JSON).
func fastRequest(payload []byte) (ExecutionRequest, bool) {
	var r ExecutionRequest
	t := &texts{b: payload}
	s := &jsonScan{b: payload}
	ok := s.object(func(k []byte) bool {
		switch string(k) {
		case "protocol_version":
			return t.setString(s, &r.ProtocolVersion)
		case "request_id":
			return t.setString(s, &r.RequestID)
		case "job_id":
			return t.setString(s, &r.JobID)
		case "function_name":
			return t.setString(s, &r.FunctionName)
		case "args":
			return setArgs(s, &r.Args)
		case "kwargs":
			return setMap(t, s, &r.Kwargs, rawValue)
		case "context":
			if s.null() {
				return true
			}
			return fastContext(t, s, &r.Context)
		}
		return false
	})
	return r, ok && s.end()
}

func fastContext(t *texts, s *jsonScan, c *ExecutionContext) bool {
	return s.object(func(k []byte) bool {
		switch string(k) {
		case "job_id":
			return t.setString(s, &c.JobID)
		case "attempt":
			return setInt(s, &c.Attempt)
		case "enqueue_time":
			return setTime(s, &c.EnqueueTime)
		case "queue_name":
			return t.setString(s, &c.QueueName)
		case "deadline":
			if s.null() {
				c.Deadline = nil
				return true
			}
			if c.Deadline == nil {
				c.Deadline = new(time.Time)
			}
			return setTime(s, c.Deadline)
		case "trace_context":
			return setMap(t, s, &c.TraceContext, t.plain)
		case "worker_id":
			return t.setString(s, &c.WorkerID)
		}
		return false
	})
}

// setArgs decodes the JSON array at s.i into raw values; [] gives an empty slice, null
// nil.
func setArgs(s *jsonScan, p *[]json.RawMessage) bool {
	if s.null() {
		*p = nil
		return true
	}
	if s.i >= len(s.b) || s.b[s.i] != '[' || s.depth >= maxNesting {
		return false
	}
	s.i++
	if s.ws(); s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		*p = []json.RawMessage{} // empty, not nil: no allocation
		return true
	}
	s.depth++
	out := make([]json.RawMessage, 0, 4)
	for {
		e, ok := s.value()
		if !ok {
			return false
		}
		out = append(out, json.RawMessage(e))
		more, ok := s.next(']')
		if !ok {
			return false
		}
		if !more {
			s.depth--
			*p = out
			return true
		}
	}
}

// setMap decodes the JSON object at s.i into the map at p (into the map already there,
// as encoding/json does; null gives nil), each value by elem.
func setMap[V any](t *texts, s *jsonScan, p *map[string]V, elem func([]byte) (V, bool)) bool {
	if s.null() {
		*p = nil
		return true
	}
	if *p == nil {
		*p = map[string]V{}
	}
	m := *p
	return s.object(func(k []byte) bool {
		e, ok := s.value()
		if !ok {
			return false
		}
		x, ok := elem(e)
		if ok {
			m[t.of(k)] = x
		}
		return ok
	})
}

func rawValue(e []byte) (json.RawMessage, bool) { return json.RawMessage(e), true }

// fastOutcome decodes a response payload as encoding/json would, or reports false (the
// payload is then not plain, or not valid JSON).
func fastOutcome(payload []byte) (ExecutionOutcome, bool) {
	var o ExecutionOutcome
	t := &texts{b: payload}
	s := &jsonScan{b: payload}
	ok := s.object(func(k []byte) bool {
		switch string(k) {
		case "job_id":
			return t.setString(s, &o.JobID)
		case "request_id":
			return t.setString(s, &o.RequestID)
		case "status":
			return t.setString(s, (*string)(&o.Status))
		case "result":
			v, ok := s.value()
			o.Result = json.RawMessage(v)
			return ok
		case "error":
			if s.null() {
				o.Error = nil
				return true
			}
			if o.Error == nil {
				o.Error = &ExecutionError{}
			}
			return fastError(t, s, o.Error)
		case "retry_after_seconds":
			if s.null() {
				o.RetryAfterSeconds = nil
				return true
			}
			v, ok := s.value()
			if !ok {
				return false
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
	return o, ok && s.end()
}

func fastError(t *texts, s *jsonScan, e *ExecutionError) bool {
	return s.object(func(k []byte) bool {
		switch string(k) {
		case "message":
			return t.setString(s, &e.Message)
		case "type":
			return t.setString(s, &e.Type)
		case "code":
			return t.setString(s, &e.Code)
		case "details":
			v, ok := s.value()
			e.Details = json.RawMessage(v)
			return ok
		}
		return false
	})
}
