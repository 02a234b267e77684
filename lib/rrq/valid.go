package rrq

// validJSON reports whether b is one valid JSON value (white space around it allowed),
// exactly as encoding/json's Valid does (FuzzValidJSON checks it), nesting limit
// included; it does not look at UTF-8 (neither does Valid). Every frame read is checked
// (compactEnvelope), and json.Valid's state machine, a function call per byte, was a
// tenth of a no-op call's CPU, both sides counted: this walks the bytes in tight loops.
func validJSON(b []byte) bool {
	v := validator{b: b}
	v.ws()
	if !v.value(0) {
		return false
	}
	v.ws()
	return v.i == len(v.b)
}

// maxNesting is encoding/json's limit on nested arrays and objects.
const maxNesting = 10000

type validator struct {
	b []byte
	i int
}

func (v *validator) ws() {
	b, i := v.b, v.i
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	v.i = i
}

func (v *validator) value(depth int) bool {
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; {
	case c == '{':
		return v.object(depth + 1)
	case c == '[':
		return v.array(depth + 1)
	case c == '"':
		return v.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return v.number()
	case c == 't':
		return v.word("true")
	case c == 'f':
		return v.word("false")
	case c == 'n':
		return v.word("null")
	}
	return false
}

func (v *validator) word(w string) bool {
	if len(v.b)-v.i < len(w) || string(v.b[v.i:v.i+len(w)]) != w {
		return false
	}
	v.i += len(w)
	return true
}

func (v *validator) object(depth int) bool {
	if depth > maxNesting {
		return false
	}
	v.i++ // {
	v.ws()
	if v.i < len(v.b) && v.b[v.i] == '}' {
		v.i++
		return true
	}
	for {
		if v.i >= len(v.b) || v.b[v.i] != '"' || !v.str() {
			return false
		}
		v.ws()
		if v.i >= len(v.b) || v.b[v.i] != ':' {
			return false
		}
		v.i++
		v.ws()
		if !v.value(depth) {
			return false
		}
		if more, ok := v.next('}'); !more {
			return ok
		}
	}
}

func (v *validator) array(depth int) bool {
	if depth > maxNesting {
		return false
	}
	v.i++ // [
	v.ws()
	if v.i < len(v.b) && v.b[v.i] == ']' {
		v.i++
		return true
	}
	for {
		if !v.value(depth) {
			return false
		}
		if more, ok := v.next(']'); !more {
			return ok
		}
	}
}

// str checks the string that starts at v.i: no control character, escapes as JSON
// spells them.
func (v *validator) str() bool {
	b, i := v.b, v.i+1 // past the "
	for i < len(b) {
		c := b[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		switch {
		case c == '"':
			v.i = i + 1
			return true
		case c < 0x20:
			return false
		}
		// a backslash
		if i+1 >= len(b) {
			return false
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if len(b)-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
				return false
			}
			i += 6
		default:
			return false
		}
	}
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at v.i.
func (v *validator) number() bool {
	if v.b[v.i] == '-' {
		v.i++
	}
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; {
	case c == '0':
		v.i++
	case c >= '1' && c <= '9':
		v.digits()
	default:
		return false
	}
	if v.i < len(v.b) && v.b[v.i] == '.' {
		v.i++
		if !v.digits() {
			return false
		}
	}
	if v.i < len(v.b) && (v.b[v.i] == 'e' || v.b[v.i] == 'E') {
		v.i++
		if v.i < len(v.b) && (v.b[v.i] == '+' || v.b[v.i] == '-') {
			v.i++
		}
		if !v.digits() {
			return false
		}
	}
	return true
}

// digits moves past [0-9]* and reports whether there was one.
func (v *validator) digits() bool {
	b, i := v.b, v.i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	start := v.i
	v.i = i
	return i > start
}

// next reads what follows a member of an object or an array: a comma (more: another
// member follows) or its closing byte (done, ok), anything else a syntax error.
func (v *validator) next(closing byte) (more, ok bool) {
	v.ws()
	if v.i >= len(v.b) {
		return false, false
	}
	switch v.b[v.i] {
	case ',':
		v.i++
		v.ws()
		return true, true
	case closing:
		v.i++
		return false, true
	}
	return false, false
}
