package myceliumemu_test

import (
	"fmt"
	"strconv"
	"strings"
)

// A reader for the subset of YAML that testdata/api.yaml is written in, so
// the conformance test needs only the standard library: block mappings and
// sequences (indentation by spaces), double- and single-quoted and plain
// scalars, literal block scalars (| and |-), one-line flow sequences
// ([a, "b"]), full-line comments. Plain scalars become bool (true/false), nil
// (null, ~), int64 (decimal integers) or string. Anything outside the subset
// (anchors, tags, flow mappings, multi-line plain scalars, …) is an error, so
// a changed spec fails loudly instead of being misread.

type yline struct {
	num    int // 1-based line number
	indent int
	text   string // without indentation and trailing spaces
}

type yparser struct {
	raw   []string
	lines []yline
	pos   int
}

func parseYAML(src string) (any, error) {
	p := &yparser{raw: strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")}
	for i, l := range p.raw {
		if strings.Contains(l, "\t") && strings.TrimLeft(l, " ") != strings.TrimLeft(l, " \t") {
			return nil, fmt.Errorf("line %d: tab indentation", i+1)
		}
		t := strings.TrimRight(l, " ")
		s := strings.TrimLeft(t, " ")
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		p.lines = append(p.lines, yline{num: i + 1, indent: len(t) - len(s), text: s})
	}
	if len(p.lines) == 0 {
		return nil, nil
	}
	v, err := p.node(p.lines[0].indent)
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.lines) {
		return nil, fmt.Errorf("line %d: unexpected content", p.lines[p.pos].num)
	}
	return v, nil
}

func isSeqItem(s string) bool { return s == "-" || strings.HasPrefix(s, "- ") }

func (p *yparser) node(indent int) (any, error) {
	if isSeqItem(p.lines[p.pos].text) {
		return p.seq(indent)
	}
	return p.mapping(indent)
}

func (p *yparser) seq(indent int) (any, error) {
	var out []any
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent != indent || !isSeqItem(l.text) {
			if l.indent > indent {
				return nil, fmt.Errorf("line %d: bad indentation", l.num)
			}
			break
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		if rest == "" {
			p.pos++
			if p.pos >= len(p.lines) || p.lines[p.pos].indent <= indent {
				out = append(out, nil)
				continue
			}
			v, err := p.node(p.lines[p.pos].indent)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		if _, _, isMap, err := splitKey(rest); err != nil {
			return nil, fmt.Errorf("line %d: %v", l.num, err)
		} else if isMap || isSeqItem(rest) {
			// "- key: value": the item is a block node starting at the
			// content's column.
			col := indent + (len(l.text) - len(rest))
			p.lines[p.pos] = yline{num: l.num, indent: col, text: rest}
			v, err := p.node(col)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		v, err := scalar(rest)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", l.num, err)
		}
		out = append(out, v)
		p.pos++
		if p.pos < len(p.lines) && p.lines[p.pos].indent > indent && !isSeqItem(p.lines[p.pos].text) {
			return nil, fmt.Errorf("line %d: multi-line plain scalars are not supported", p.lines[p.pos].num)
		}
	}
	return out, nil
}

func (p *yparser) mapping(indent int) (any, error) {
	out := map[string]any{}
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent < indent {
			break
		}
		if l.indent > indent {
			return nil, fmt.Errorf("line %d: bad indentation", l.num)
		}
		if isSeqItem(l.text) {
			break
		}
		key, rest, isMap, err := splitKey(l.text)
		if err != nil || !isMap {
			return nil, fmt.Errorf("line %d: want key: value (%v)", l.num, err)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("line %d: duplicate key %q", l.num, key)
		}
		p.pos++
		switch {
		case rest == "":
			if p.pos < len(p.lines) && (p.lines[p.pos].indent > indent ||
				p.lines[p.pos].indent == indent && isSeqItem(p.lines[p.pos].text)) {
				v, err := p.node(p.lines[p.pos].indent)
				if err != nil {
					return nil, err
				}
				out[key] = v
			} else {
				out[key] = nil
			}
		case rest == "|" || rest == "|-":
			out[key] = p.block(l, indent, rest)
		default:
			v, err := scalar(rest)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", l.num, err)
			}
			out[key] = v
			if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
				return nil, fmt.Errorf("line %d: multi-line plain scalars are not supported", p.lines[p.pos].num)
			}
		}
	}
	return out, nil
}

// block reads a literal block scalar following line l from the raw
// lines (blank lines inside it count).
func (p *yparser) block(l yline, indent int, style string) string {
	var body []string
	end := l.num // raw index of the line after l
	bi := -1
	for end < len(p.raw) {
		r := strings.TrimRight(p.raw[end], " ")
		s := strings.TrimLeft(r, " ")
		if s == "" {
			body = append(body, "")
			end++
			continue
		}
		in := len(r) - len(s)
		if in <= indent {
			break
		}
		if bi < 0 {
			bi = in
		}
		if in < bi {
			break
		}
		body = append(body, r[bi:])
		end++
	}
	for len(body) > 0 && body[len(body)-1] == "" { // trailing blank lines are not content
		body = body[:len(body)-1]
	}
	for p.pos < len(p.lines) && p.lines[p.pos].num <= end {
		p.pos++
	}
	s := strings.Join(body, "\n")
	if style == "|" && len(body) > 0 {
		s += "\n"
	}
	return s
}

// splitKey splits "key: value" (key plain or quoted). isMap is false when s is
// not a mapping entry.
func splitKey(s string) (key, rest string, isMap bool, err error) {
	if s[0] == '"' || s[0] == '\'' {
		k, n, err := quoted(s)
		if err != nil {
			return "", "", false, err
		}
		after := s[n:]
		if after == ":" || strings.HasPrefix(after, ": ") {
			return k, strings.TrimSpace(after[1:]), true, nil
		}
		return "", "", false, nil
	}
	if s[0] == '[' || s[0] == '{' {
		return "", "", false, nil
	}
	if i := strings.Index(s, ": "); i >= 0 {
		return s[:i], strings.TrimSpace(s[i+2:]), true, nil
	}
	if strings.HasSuffix(s, ":") {
		return s[:len(s)-1], "", true, nil
	}
	return "", "", false, nil
}

// quoted reads a quoted scalar at the start of s, returning it and the bytes
// consumed.
func quoted(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case q == '\'' && c == '\'':
			if i+1 < len(s) && s[i+1] == '\'' {
				b.WriteByte('\'')
				i++
				continue
			}
			return b.String(), i + 1, nil
		case q == '"' && c == '"':
			return b.String(), i + 1, nil
		case q == '"' && c == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case '"', '\\', '/':
				b.WriteByte(s[i])
			default:
				return "", 0, fmt.Errorf("unsupported escape \\%c", s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("unterminated quoted scalar")
}

func scalar(s string) (any, error) {
	switch s[0] {
	case '"', '\'':
		v, n, err := quoted(s)
		if err != nil {
			return nil, err
		}
		if n != len(s) {
			return nil, fmt.Errorf("text after quoted scalar: %q", s[n:])
		}
		return v, nil
	case '[':
		if !strings.HasSuffix(s, "]") {
			return nil, fmt.Errorf("multi-line flow sequences are not supported")
		}
		inner := strings.TrimSpace(s[1 : len(s)-1])
		out := []any{}
		for inner != "" {
			var item string
			if inner[0] == '"' || inner[0] == '\'' {
				v, n, err := quoted(inner)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
				inner = strings.TrimSpace(inner[n:])
			} else {
				i := strings.IndexByte(inner, ',')
				if i < 0 {
					i = len(inner)
				}
				item, inner = strings.TrimSpace(inner[:i]), inner[i:]
				v, err := scalar(item)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			inner = strings.TrimSpace(strings.TrimPrefix(inner, ","))
		}
		return out, nil
	case '{', '&', '*', '!', '%', '@', '`', '>', '|':
		return nil, fmt.Errorf("unsupported YAML construct %q", s)
	}
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	case "null", "~":
		return nil, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	return s, nil
}
