package luagen

import (
	"fmt"
	"strings"
)

// The prologue's markers in a script file: the generator writes the prologue between
// them, right after the header (and nothing else reads ARGV: scripts/lua-check.sh).
const (
	PrologueBegin = "-- luagen: the prologue, generated from the header by make lua-gen (do not edit)"
	PrologueEnd   = "-- luagen: end of the prologue"
)

// ViewsLine names, in the prologue of a script that declares a view[] argument, the
// table its views' items are read from in place: item k (1 … <name>_n) of a view is
// views[<name>_at + k], all of them unpack(views, <name>_at + 1, <name>_at +
// <name>_n). scripts/lua-check.sh lets a script index views only at a view's _at.
const ViewsLine = "local views = ARGV -- the view[] arguments' items, in place: views[<name>_at + k], k = 1 … <name>_n"

// luaGen writes a prologue.
type luaGen struct {
	b       strings.Builder
	dynamic bool   // past a list: positions are counted in argi
	pos     int    // the next ARGV index while not dynamic
	counts  string // PrologueCounts' table ("": none)
}

func (l *luaGen) p(format string, a ...any) { fmt.Fprintf(&l.b, format+"\n", a...) }

// at is the Lua expression of the ARGV index off items after the current one.
func (l *luaGen) at(off int) string {
	if !l.dynamic {
		return fmt.Sprint(l.pos + off)
	}
	if off == 0 {
		return "argi"
	}
	return fmt.Sprintf("argi + %d", off)
}

// Prologue is the Lua code that unpacks a script's ARGV into locals named as
// declared: a scalar as sent (int, string, json), a number (num, float), a boolean
// (bool: "1"), a list as a table, a record as a table of its named fields, a view
// (view[]) as its count and offset, its items left in ARGV.
func Prologue(sc *Script) string { return PrologueCounts(sc, "") }

// PrologueCounts is Prologue for scripts that see a table named counts (when not ""),
// which maps the decimal strings of small counts to their numbers: each record's view
// count (read once per record: per job, per run) is looked up there before a tonumber,
// which is a strtod in Redis's Lua (~1.8k instructions).
func PrologueCounts(sc *Script, counts string) string {
	l := &luaGen{pos: 1, counts: counts}
	l.p("%s", PrologueBegin)
	if hasView(sc.Args) {
		l.p("%s", ViewsLine)
	}
	for _, f := range sc.Args {
		l.arg(f)
	}
	l.p("%s", PrologueEnd)
	return l.b.String()
}

// scalar is the Lua expression of a scalar of type t at index expression idx.
func scalar(t Type, idx string) string {
	switch t.Kind {
	case Num, Float:
		return "tonumber(ARGV[" + idx + "])"
	case Bool:
		return "ARGV[" + idx + "] == '1'"
	}
	return "ARGV[" + idx + "]"
}

// count is the Lua expression of a record's view count at index expression idx.
func (l *luaGen) count(idx string) string {
	if l.counts == "" {
		return "tonumber(ARGV[" + idx + "])"
	}
	return l.counts + "[ARGV[" + idx + "]] or tonumber(ARGV[" + idx + "])"
}

// advance moves past n fixed items.
func (l *luaGen) advance(n int, ind string) {
	if l.dynamic {
		l.p("%sargi = argi + %d", ind, n)
	} else {
		l.pos += n
	}
}

// begin makes positions dynamic (at the first list).
func (l *luaGen) begin() {
	if !l.dynamic {
		l.p("local argi = %d", l.pos)
		l.dynamic = true
	}
}

func (l *luaGen) arg(f Field) {
	switch f.Type.Kind {
	case Record:
		// a record as an argument is its fields in turn
		l.record("local "+f.Name, f.Name, f.Type.Fields, "")
	case List:
		if f.Type.View {
			l.view(f.Name)
			return
		}
		l.begin()
		l.p("local %s", f.Name)
		l.list(f.Name, *f.Type.Elem, "")
	default:
		if l.dynamic {
			l.p("local %s = %s", f.Name, scalar(f.Type, "argi"))
			l.p("argi = argi + 1")
		} else {
			l.p("local %s = %s", f.Name, scalar(f.Type, l.at(0)))
			l.pos++
		}
	}
}

// view reads an argument declared view[]<type>: its count into <name>_n and its
// offset into <name>_at, its items left where they are (views[<name>_at + k], k from
// 1 to <name>_n), not copied into a table.
func (l *luaGen) view(name string) {
	if !l.dynamic {
		l.p("local %s_n = tonumber(ARGV[%d])", name, l.pos)
		l.p("local %s_at = %d", name, l.pos)
		l.p("local argi = %d + %s_n", l.pos+1, name)
		l.dynamic = true
		return
	}
	l.p("local %s_n = tonumber(ARGV[argi])", name)
	l.p("local %s_at = argi", name)
	l.p("argi = argi + 1 + %s_n", name)
}

// hasView: a script declares a view[] argument (or record field).
func hasView(fs []Field) bool {
	for _, f := range fs {
		t := f.Type
		for t.Kind == List && !t.View {
			t = *t.Elem
		}
		if t.View || t.Kind == Record && hasView(t.Fields) {
			return true
		}
	}
	return false
}

// list reads a list's count and items into a new table it assigns to dst.
func (l *luaGen) list(dst string, elem Type, ind string) {
	n := "n_" + strings.ReplaceAll(dst, ".", "_")
	l.p("%slocal %s = tonumber(ARGV[argi])", ind, n)
	if elem.Kind != Record && elem.Kind != List {
		if scalar(elem, "x") == "ARGV[x]" {
			// copied by unpack (in C) below Lua's C stack limit (8000), else item by item
			l.p("%sif %s <= 7000 then %s = {unpack(ARGV, argi + 1, argi + %s)} else %s = {}; for k = 1, %s do %s[k] = ARGV[argi + k] end end", ind, n, dst, n, dst, n, dst)
		} else {
			l.p("%s%s = {}", ind, dst)
			l.p("%sfor k = 1, %s do %s[k] = %s end", ind, n, dst, scalar(elem, "argi + k"))
		}
		l.p("%sargi = argi + 1 + %s", ind, n)
		return
	}
	l.p("%s%s = {}", ind, dst)
	l.p("%sargi = argi + 1", ind)
	l.p("%sfor k = 1, %s do", ind, n)
	if flat(elem) {
		// one table constructor: its size known at once
		parts := make([]string, len(elem.Fields))
		for i, f := range elem.Fields {
			parts[i] = fmt.Sprintf("%s = %s", f.Name, scalar(f.Type, l.at(i)))
		}
		l.p("%s  %s[k] = {%s}", ind, dst, strings.Join(parts, ", "))
		l.p("%s  argi = argi + %d", ind, len(parts))
		l.p("%send", ind)
		return
	}
	item := "e_" + strings.ReplaceAll(dst, ".", "_")
	if elem.Kind == List {
		l.p("%s  local %s", ind, item)
		l.list(item, *elem.Elem, ind+"  ")
	} else {
		l.record("local "+item, item, elem.Fields, ind+"  ")
	}
	l.p("%s  %s[k] = %s", ind, dst, item)
	l.p("%send", ind)
}

// record reads a record's fields into a new table, made by one constructor that
// names every field (so its size is known at once, not grown field by field): the
// scalars before its first list or record read there, the others false until read
// below it. decl is what the constructor is assigned to ("local e" or dst).
//
// A view (view[]) is two fields, <name>_n and <name>_at: right after those scalars,
// the constructor reads them too.
func (l *luaGen) record(decl, dst string, fs []Field, ind string) {
	lead := 0
	for lead < len(fs) && fs[lead].Type.Kind != List && fs[lead].Type.Kind != Record {
		lead++
	}
	leadView := lead < len(fs) && fs[lead].Type.View
	parts := make([]string, 0, len(fs)+1)
	for i, f := range fs {
		switch {
		case i < lead:
			parts = append(parts, fmt.Sprintf("%s = %s", f.Name, scalar(f.Type, l.at(i))))
		case i == lead && leadView:
			parts = append(parts, fmt.Sprintf("%s_n = %s, %s_at = %s", f.Name, l.count(l.at(i)), f.Name, l.at(i)))
		case f.Type.View:
			parts = append(parts, f.Name+"_n = false, "+f.Name+"_at = false")
		default:
			parts = append(parts, f.Name+" = false")
		}
	}
	l.p("%s%s = {%s}", ind, decl, strings.Join(parts, ", "))
	rest := fs[lead:]
	switch {
	case leadView && l.dynamic:
		l.p("%sargi = %s + %s.%s_n", ind, l.at(lead+1), dst, fs[lead].Name)
		rest = fs[lead+1:]
	case leadView:
		l.p("%slocal argi = %s + %s.%s_n", ind, l.at(lead+1), dst, fs[lead].Name)
		l.dynamic = true
		rest = fs[lead+1:]
	case lead > 0:
		l.advance(lead, ind)
	}
	var run []string
	flush := func() {
		if len(run) > 0 {
			l.p("%s%s", ind, strings.Join(run, "; "))
			l.advance(len(run), ind)
			run = nil
		}
	}
	for _, f := range rest {
		switch f.Type.Kind {
		case List:
			flush()
			l.begin()
			if f.Type.View {
				l.p("%s%s.%s_n = %s; %s.%s_at = argi", ind, dst, f.Name, l.count("argi"), dst, f.Name)
				l.p("%sargi = argi + 1 + %s.%s_n", ind, dst, f.Name)
				continue
			}
			l.list(dst+"."+f.Name, *f.Type.Elem, ind)
		case Record:
			flush()
			l.record(dst+"."+f.Name, dst+"."+f.Name, f.Type.Fields, ind)
		default:
			run = append(run, fmt.Sprintf("%s.%s = %s", dst, f.Name, scalar(f.Type, l.at(len(run)))))
		}
	}
	flush()
}

// WithPrologue returns the script file's text with its prologue (re)written: between
// the markers if it has them, else right after the header.
func WithPrologue(src, prologue string) string {
	if b := strings.Index(src, PrologueBegin); b >= 0 {
		if e := strings.Index(src[b:], PrologueEnd); e >= 0 {
			end := b + e + len(PrologueEnd)
			if end < len(src) && src[end] == '\n' {
				end++
			}
			return src[:b] + prologue + src[end:]
		}
	}
	lines := strings.SplitAfter(src, "\n")
	i := 0
	for i < len(lines) && strings.HasPrefix(lines[i], "--") {
		i++
	}
	head := strings.Join(lines[:i], "")
	rest := strings.TrimLeft(strings.Join(lines[i:], ""), "\n")
	return head + "\n" + prologue + "\n" + rest
}

// flat: a record of scalars only.
func flat(t Type) bool {
	if t.Kind != Record {
		return false
	}
	for _, f := range t.Fields {
		if f.Type.Kind == List || f.Type.Kind == Record {
			return false
		}
	}
	return true
}
