// Package luagen reads the declared interface in the header of a Lua script (its
// KEYS, its ARGV with names and types, its reply and the library files it needs) and
// writes the code on both sides of it: a typed Go call per script (a struct of its
// keys and arguments, the KEYS and ARGV it builds, a decoder of its reply) and the
// Lua prologue that unpacks ARGV into named locals and record tables. The format is
// described in CONTRIBUTING.md ("Lua scripts: the declared interface").
package luagen

import (
	"fmt"
	"regexp"
	"strings"
)

// Script is the declared interface of one script.
type Script struct {
	File  string   // the file's name, e.g. "claim.lua"
	Name  string   // the file's name without .lua
	Libs  []string // library files it needs (lib_*.lua), in load order
	Keys  []Key
	Args  []Field // ARGV in order
	Reply Type
}

// Key is one of a script's KEYS.
type Key struct {
	Name     string
	Optional bool // trailing keys that may be left out ("name?")
	Rest     bool // a list that takes the remaining KEYS ("...name")
}

// Field is a named, typed argument, record field or reply field.
type Field struct {
	Name string
	Type Type
	Rest bool // a reply record's last field that takes the remaining items ("...name")
}

// Kind is the kind of a type.
type Kind int

// The kinds of type.
const (
	String Kind = iota // Go string; Lua the string
	Int                // Go int64; Lua the decimal string as sent (no conversion)
	Num                // Go int64; Lua a number (tonumber)
	Float              // Go float64; Lua a number (tonumber)
	Bool               // Go bool, sent "1"/"0"; Lua a boolean
	JSON               // Go json.RawMessage; Lua the JSON text
	Raw                // Go any: a reply as go-redis gives it; an argument go-redis formats (Lua a string)
	None               // reply only: nothing read
	List               // a count, then its items (Elem); Lua a table
	Record             // a record of Fields; Lua a table with named fields
)

// Type is a declared type.
type Type struct {
	Kind   Kind
	Elem   *Type   // List: the items' type
	View   bool    // List (view[]<type>, an argument): read in place in ARGV, not copied
	Flat   bool    // List (flat[]<record>, a reply's own type): the records' fields in one list, no table a record
	Name   string  // Record: its name (Go type <script><Name>)
	Fields []Field // Record: its fields
}

var scalars = map[string]Kind{"string": String, "int": Int, "num": Num, "float": Float, "bool": Bool, "json": JSON, "raw": Raw, "none": None}

var identRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// parseType reads a type: a scalar, "[]" then a type, "view[]" then a scalar that Lua
// gets as sent (string, int, json, raw), or a record's name (a lower-case identifier
// not a scalar), whose fields follow.
func parseType(s string) (Type, error) {
	if v, ok := strings.CutPrefix(s, "view[]"); ok {
		e, err := parseType(v)
		if err != nil {
			return Type{}, err
		}
		switch e.Kind {
		case String, Int, JSON, Raw:
			return Type{Kind: List, Elem: &e, View: true}, nil
		}
		return Type{}, fmt.Errorf("view[]%s: a view's items are read as sent (string, int, json or raw)", v)
	}
	if v, ok := strings.CutPrefix(s, "flat[]"); ok {
		e, err := parseType(v)
		if err != nil {
			return Type{}, err
		}
		if e.Kind != Record {
			return Type{}, fmt.Errorf("flat[]%s: a flat list's items are records (their fields laid out one after another)", v)
		}
		return Type{Kind: List, Elem: &e, Flat: true}, nil
	}
	if strings.HasPrefix(s, "[]") {
		e, err := parseType(s[2:])
		if err != nil {
			return Type{}, err
		}
		return Type{Kind: List, Elem: &e}, nil
	}
	if k, ok := scalars[s]; ok {
		return Type{Kind: k}, nil
	}
	if identRE.MatchString(s) {
		return Type{Kind: Record, Name: s}, nil
	}
	return Type{}, fmt.Errorf("unknown type %q (string, int, num, float, bool, json, raw, none, []<type>, flat[]<record> or a record's name)", s)
}

// line is one header line: its indentation after "--" and its text.
type line struct {
	no     int
	indent int
	text   string
}

// Parse reads the declared interface from the header of the script file (its
// leading comment lines). It returns nil and no error for a library file (lib_*).
func Parse(file, src string) (*Script, error) {
	name := strings.TrimSuffix(file, ".lua")
	if strings.HasPrefix(name, "lib_") {
		return nil, nil
	}
	sc := &Script{File: file, Name: name}
	lines := headerLines(src)
	seen := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if l.indent != 1 {
			continue
		}
		sec, rest, ok := strings.Cut(l.text, ":")
		if !ok || strings.ContainsAny(sec, " \t") {
			continue
		}
		body, next := block(lines, i+1)
		var err error
		switch sec {
		case "KEYS":
			err = parseKeys(sc, strings.TrimSpace(rest), body)
		case "ARGV":
			sc.Args, err = parseFields(strings.TrimSpace(rest), body, false)
		case "Reply":
			sc.Reply, err = parseReply(strings.TrimSpace(rest), body)
		case "Libs":
			sc.Libs, err = parseLibs(rest)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", file, l.no, sec, err)
		}
		seen[sec] = true
		i = next - 1
	}
	for _, sec := range []string{"KEYS", "ARGV", "Reply"} {
		if !seen[sec] {
			return nil, fmt.Errorf("%s: the header declares no %s", file, sec)
		}
	}
	return sc, nil
}

// headerLines are the script's leading comment lines, up to the first other line.
func headerLines(src string) []line {
	var out []line
	for i, l := range strings.Split(src, "\n") {
		if !strings.HasPrefix(l, "--") {
			break
		}
		t := l[2:]
		ind := len(t) - len(strings.TrimLeft(t, " "))
		out = append(out, line{no: i + 1, indent: ind, text: strings.TrimSpace(t)})
	}
	return out
}

// block returns the lines indented under a section (deeper than 1), up to the next
// line that is not, and the index after them.
func block(lines []line, from int) ([]line, int) {
	i := from
	for i < len(lines) && lines[i].indent > 1 && lines[i].text != "" {
		i++
	}
	return lines[from:i], i
}

func parseKeys(sc *Script, rest string, body []line) error {
	if rest == "none" && len(body) == 0 {
		return nil
	}
	if rest != "" {
		return fmt.Errorf("declare one key a line under \"-- KEYS:\" (\"--   <name> <what it is>\"), or \"-- KEYS: none\"; found %q", rest)
	}
	items, err := items(body)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, it := range items {
		k := Key{Name: it.head[0]}
		if strings.HasPrefix(k.Name, "...") {
			k.Name, k.Rest = k.Name[3:], true
		}
		if strings.HasSuffix(k.Name, "?") {
			k.Name, k.Optional = strings.TrimSuffix(k.Name, "?"), true
		}
		if !identRE.MatchString(k.Name) || names[k.Name] {
			return fmt.Errorf("line %d: bad or repeated key name %q (lower_case)", it.no, k.Name)
		}
		if n := len(sc.Keys); n > 0 && (sc.Keys[n-1].Rest || sc.Keys[n-1].Optional && !k.Optional) {
			return fmt.Errorf("line %d: key %s follows an optional key or the rest (optional keys come last, or one ...rest list, not both)", it.no, k.Name)
		}
		names[k.Name] = true
		sc.Keys = append(sc.Keys, k)
	}
	return nil
}

// item is a declaration line and the lines declared under it (a record's fields).
type item struct {
	no   int
	head []string // its first two words: name and type
	sub  []line
}

// items splits a block into its declarations: lines at the block's first
// indentation; deeper lines belong to the one above (record fields or prose).
func items(body []line) ([]item, error) {
	var out []item
	if len(body) == 0 {
		return nil, nil
	}
	base := body[0].indent
	for _, l := range body {
		if l.indent < base {
			return nil, fmt.Errorf("line %d: indented less than the declarations above it", l.no)
		}
		if l.indent > base {
			out[len(out)-1].sub = append(out[len(out)-1].sub, l)
			continue
		}
		w := strings.Fields(l.text)
		if len(w) > 2 {
			w = w[:2]
		}
		out = append(out, item{no: l.no, head: w})
	}
	return out, nil
}

// parseFields reads typed declarations ("<name> <type> <prose>"); a record type's
// fields are the lines right under it, indented two more. reply allows a last
// "...name" field.
func parseFields(rest string, body []line, reply bool) ([]Field, error) {
	if rest == "none" && len(body) == 0 {
		return nil, nil
	}
	if rest != "" {
		return nil, fmt.Errorf("declare one item a line under the section (\"--   <name> <type> <what it is>\"), or \"none\"; found %q", rest)
	}
	its, err := items(body)
	if err != nil {
		return nil, err
	}
	var out []Field
	names := map[string]bool{}
	for k, it := range its {
		if len(it.head) < 2 {
			return nil, fmt.Errorf("line %d: %q has no type (\"<name> <type> <what it is>\")", it.no, it.head[0])
		}
		f := Field{Name: it.head[0]}
		if strings.HasPrefix(f.Name, "...") {
			if !reply || k != len(its)-1 {
				return nil, fmt.Errorf("line %d: ...%s: only a reply record's last field takes the remaining items", it.no, f.Name[3:])
			}
			f.Name, f.Rest = f.Name[3:], true
		}
		if !identRE.MatchString(f.Name) || names[f.Name] {
			return nil, fmt.Errorf("line %d: bad or repeated name %q (lower_case)", it.no, f.Name)
		}
		names[f.Name] = true
		if f.Type, err = typeWithFields(it, reply); err != nil {
			return nil, err
		}
		if f.Rest && f.Type.Kind != List {
			return nil, fmt.Errorf("line %d: ...%s must be a list", it.no, f.Name)
		}
		if err := viewPlace(f.Type, reply); err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", it.no, f.Name, err)
		}
		if hasFlat(f.Type) {
			return nil, fmt.Errorf("line %d: %s: a flat list (flat[]) is a reply's own type, not an argument's or a field's", it.no, f.Name)
		}
		out = append(out, f)
	}
	// a view's names in Lua (<name>_at, <name>_n) are no other item's
	for _, f := range out {
		if f.Type.View {
			for _, n := range []string{f.Name + "_at", f.Name + "_n"} {
				if names[n] {
					return nil, fmt.Errorf("%s: the view %s is read through %s_at and %s_n, and %s is declared too", n, f.Name, f.Name, f.Name, n)
				}
			}
		}
	}
	return out, nil
}

// viewPlace refuses a view where it cannot be read in place: in a reply, or as the
// items of a list (a view is an argument or a record's field).
func viewPlace(t Type, reply bool) error {
	if t.View && reply {
		return fmt.Errorf("a view (view[]) is an argument, not a reply")
	}
	for e := t.Elem; t.Kind == List && e != nil; e = e.Elem {
		if e.View {
			return fmt.Errorf("a view (view[]) is an argument or a record's field, not a list's items")
		}
		if e.Kind != List {
			break
		}
	}
	return nil
}

// typeWithFields reads an item's type and, for a record (or a list of them), its
// fields from the lines under it.
func typeWithFields(it item, reply bool) (Type, error) {
	t, err := parseType(it.head[1])
	if err != nil {
		return Type{}, fmt.Errorf("line %d: %w", it.no, err)
	}
	rec := &t
	for rec.Kind == List {
		rec = rec.Elem
	}
	if rec.Kind != Record {
		return t, nil
	}
	var fields []line
	if len(it.sub) > 0 {
		ind := it.sub[0].indent
		for _, l := range it.sub {
			if l.indent == ind {
				fields = append(fields, l)
			} else if len(fields) > 0 {
				fields = append(fields, l)
			}
		}
	}
	if len(fields) == 0 {
		return Type{}, fmt.Errorf("line %d: record %s declares no fields (indented lines under it)", it.no, rec.Name)
	}
	if rec.Fields, err = parseFields("", fields, reply); err != nil {
		return Type{}, err
	}
	return t, nil
}

func parseReply(rest string, body []line) (Type, error) {
	w := strings.Fields(rest)
	if len(w) == 0 {
		return Type{}, fmt.Errorf("declare the reply's type first: \"-- Reply: <type> <what it is>\"")
	}
	t, err := typeWithFields(item{head: []string{"reply", w[0]}, sub: body}, true)
	if err == nil {
		err = viewPlace(t, true)
	}
	if err == nil && t.Flat {
		err = flatFields(*t.Elem)
	}
	return t, err
}

// hasFlat says whether t is a flat list or holds one (in a list's items or a record's
// fields).
func hasFlat(t Type) bool {
	if t.Flat {
		return true
	}
	if t.Elem != nil && hasFlat(*t.Elem) {
		return true
	}
	for _, f := range t.Fields {
		if hasFlat(f.Type) {
			return true
		}
	}
	return false
}

// flatFields refuses a flat list's record whose fields are not one reply item each:
// a list (its length is not in the flat list) or a record.
func flatFields(rec Type) error {
	for _, f := range rec.Fields {
		if f.Rest || f.Type.Kind == List || f.Type.Kind == Record || f.Type.Kind == None {
			return fmt.Errorf("flat[]%s: field %s: a flat list's record holds one item a field (a scalar or raw), not a list, a record or none", rec.Name, f.Name)
		}
	}
	return nil
}

func parseLibs(rest string) ([]string, error) {
	var out []string
	for _, w := range strings.Fields(rest) {
		if !strings.HasPrefix(w, "lib_") || !identRE.MatchString(w) {
			return nil, fmt.Errorf("%q is not a library file's name (lib_<name>, without .lua)", w)
		}
		out = append(out, w+".lua")
	}
	return out, nil
}
