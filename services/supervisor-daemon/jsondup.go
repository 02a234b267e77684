package main

import "encoding/json"

// duplicateKey returns a member name that appears twice in one object of the JSON
// text b, and whether there is one. A signed body must mean one thing to every reader,
// and readers differ on a repeated name (Go's decoder takes the last, others the first
// or refuse it); so a body that repeats one is refused. Names are compared as decoded
// ("a" and "\u0061" are one name). b that is not valid JSON gives no answer: its parse
// says what is wrong.
func duplicateKey(b []byte) (string, bool) {
	// Per open object its names (nil for an open array); expectName: the next string
	// of the innermost object is a member name.
	var open []map[string]struct{}
	expectName := false
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{':
			open = append(open, map[string]struct{}{})
			expectName = true
		case '[':
			open = append(open, nil)
			expectName = false
		case '}', ']':
			if len(open) == 0 {
				return "", false
			}
			open = open[:len(open)-1]
			expectName = false
		case ',':
			expectName = len(open) > 0 && open[len(open)-1] != nil
		case '"':
			end, escaped := stringEnd(b, i)
			if end < 0 {
				return "", false
			}
			if expectName {
				name, ok := memberName(b[i:end+1], escaped)
				if !ok {
					return "", false
				}
				names := open[len(open)-1]
				if _, seen := names[name]; seen {
					return name, true
				}
				names[name] = struct{}{}
				expectName = false
			}
			i = end
		}
	}
	return "", false
}

// stringEnd is the index of the quote that ends the JSON string starting at b[start]
// (-1: none), and whether the string has escapes.
func stringEnd(b []byte, start int) (int, bool) {
	escaped := false
	for j := start + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j, escaped
		}
	}
	return -1, escaped
}

// memberName decodes a quoted member name.
func memberName(quoted []byte, escaped bool) (string, bool) {
	if !escaped {
		return string(quoted[1 : len(quoted)-1]), true
	}
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", false
	}
	return s, true
}
