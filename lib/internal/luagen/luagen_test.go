package luagen

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// finishHeader declares what finish_jobs-like scripts need: fixed keys and optional
// ones, scalars of each type, a list, records with a list inside, a record reply
// with a rest field.
const finishHeader = `-- ends: records the ends of runs.
--
-- KEYS:
--   proc     the processing list
--   leases   coord:leases
--   dag?     coord:dag:<flow>, with complete
-- ARGV:
--   now_ms   int     now (ms)
--   logmax   num     the log cap
--            (a continuation line of prose)
--   ratio    float   a number
--   grouped  bool    one message for all
--   meta     json    a JSON text
--   fields   []string  field/value pairs
--   runs     []run   the runs
--     job_key  string  the job's key
--     status   string  its status
--     fatal    bool    no retry
--     chunk    []string  log chunks
-- Reply: ends what happened
--   applied  int     runs applied
--   status   string  the flow's status
--   ...ids   []int   the jobs made ready
-- Libs: lib_busy lib_state
-- Derives: nothing.

return 1
`

func TestParseDeclaredHeader(t *testing.T) {
	sc, err := Parse("ends.lua", finishHeader)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []Key{{Name: "proc"}, {Name: "leases"}, {Name: "dag", Optional: true}}
	if !reflect.DeepEqual(sc.Keys, wantKeys) {
		t.Errorf("keys %+v, want %+v", sc.Keys, wantKeys)
	}
	var names []string
	for _, a := range sc.Args {
		names = append(names, a.Name+":"+kindName(a.Type))
	}
	if got := strings.Join(names, " "); got != "now_ms:int logmax:num ratio:float grouped:bool meta:json fields:[]string runs:[]run" {
		t.Errorf("args %s", got)
	}
	run := sc.Args[6].Type.Elem
	if len(run.Fields) != 4 || run.Fields[3].Name != "chunk" || run.Fields[3].Type.Kind != List {
		t.Errorf("record run: %+v", run.Fields)
	}
	if sc.Reply.Kind != Record || len(sc.Reply.Fields) != 3 || !sc.Reply.Fields[2].Rest {
		t.Errorf("reply %+v", sc.Reply)
	}
	if !reflect.DeepEqual(sc.Libs, []string{"lib_busy.lua", "lib_state.lua"}) {
		t.Errorf("libs %v", sc.Libs)
	}
}

func kindName(t Type) string {
	switch t.Kind {
	case List:
		return "[]" + kindName(*t.Elem)
	case Record:
		return t.Name
	}
	for n, k := range scalars {
		if k == t.Kind {
			return n
		}
	}
	return "?"
}

// Each bad header is refused with an error that says what is wrong.
func TestParseRefusesBadHeaders(t *testing.T) {
	ok := "-- x: does x.\n--\n-- KEYS:\n--   a  the key\n-- ARGV:\n--   n  int  a number\n-- Reply: int the result\n"
	cases := []struct{ name, src, want string }{
		{"no keys", strings.Replace(ok, "-- KEYS:\n--   a  the key\n", "", 1), "declares no KEYS"},
		{"no argv", strings.Replace(ok, "-- ARGV:\n--   n  int  a number\n", "", 1), "declares no ARGV"},
		{"no reply", strings.Replace(ok, "-- Reply: int the result\n", "", 1), "declares no Reply"},
		{"positional keys", strings.Replace(ok, "-- KEYS:\n--   a  the key", "-- KEYS: [1] the key", 1), "one key a line"},
		{"positional argv", strings.Replace(ok, "-- ARGV:\n--   n  int  a number", "-- ARGV: [1] a number", 1), "one item a line"},
		{"bad type", strings.Replace(ok, "n  int", "n  Integer", 1), `unknown type "Integer"`},
		{"no type", strings.Replace(ok, "n  int  a number", "n", 1), `"n" has no type`},
		{"repeated", strings.Replace(ok, "--   n  int  a number\n", "--   n  int  a number\n--   n  int  again\n", 1), `repeated name "n"`},
		{"record without fields", strings.Replace(ok, "n  int", "n  []run", 1), "record run declares no fields"},
		{"rest in argv", strings.Replace(ok, "n  int", "...n  []int", 1), "only a reply record's last field"},
		{"key after optional", strings.Replace(ok, "--   a  the key\n", "--   a?  the key\n--   b  another\n", 1), "follows an optional key"},
		{"bad lib", ok + "-- Libs: busy\n", `"busy" is not a library file's name`},
		{"reply without type", strings.Replace(ok, "-- Reply: int the result", "-- Reply:", 1), "declare the reply's type first"},
		{"view of numbers", strings.Replace(ok, "n  int", "n  view[]num", 1), "a view's items are read as sent"},
		{"view of records", strings.Replace(ok, "n  int", "n  view[]run", 1), "a view's items are read as sent"},
		{"list of views", strings.Replace(ok, "n  int", "n  []view[]string", 1), "not a list's items"},
		{"view in a reply", strings.Replace(ok, "-- Reply: int the result", "-- Reply: view[]string the result", 1), "not a reply"},
		{"flat of scalars", strings.Replace(ok, "-- Reply: int the result", "-- Reply: flat[]int the result", 1), "a flat list's items are records"},
		{"flat with a list field", strings.Replace(ok, "-- Reply: int the result", "-- Reply: flat[]got the result\n--   key  string  a key\n--   ids  []int  its ids", 1), "holds one item a field"},
		{"flat in argv", strings.Replace(ok, "n  int  a number", "n  flat[]run  runs\n--     key  string  a key", 1), "a reply's own type"},
		{"view's names taken", strings.Replace(ok, "--   n  int  a number\n", "--   n  view[]raw  items\n--   n_at  int  taken\n", 1), "n_at is declared too"},
	}
	for _, c := range cases {
		_, err := Parse("x.lua", c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	if _, err := Parse("x.lua", ok); err != nil {
		t.Errorf("the good header: %v", err)
	}
	if sc, err := Parse("lib_x.lua", "-- lib_x: a library.\n"); sc != nil || err != nil {
		t.Errorf("a library file: %v, %v; want none", sc, err)
	}
}

// WithPrologue puts the prologue after the header and, run again, replaces it in
// place (so the file is stable).
func TestWithPrologueReplacesInPlace(t *testing.T) {
	sc, err := Parse("ends.lua", finishHeader)
	if err != nil {
		t.Fatal(err)
	}
	once := WithPrologue(finishHeader, Prologue(sc))
	if !strings.Contains(once, "-- Derives: nothing.\n\n"+PrologueBegin) || !strings.HasSuffix(once, PrologueEnd+"\n\nreturn 1\n") {
		t.Fatalf("prologue not after the header:\n%s", once)
	}
	if twice := WithPrologue(once, Prologue(sc)); twice != once {
		t.Fatalf("regenerating changed the file:\n%s", twice)
	}
}

// The prologue, run by a real Redis on ARGV as the Go side encodes it (counts before
// lists), unpacks every declared argument under its name.
func TestPrologueUnpacksWhatGoSends(t *testing.T) {
	sc, err := Parse("ends.lua", finishHeader)
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := Prologue(sc) + `return cjson.encode({now_ms = now_ms, logmax = logmax + 1, ratio = ratio * 2, grouped = grouped,
  meta = meta, fields = fields, runs = runs})`
	// the encoding of the generated call(): scalars, then each list's count and items
	args := []any{"1700", "5", "1.25", "1", `{"a":1}`, 2, "f", "v", 2,
		"job:1", "finished", "0", 1, "hello",
		"job:2", "error", "1", 0}
	out, err := rdb.Eval(ctx, script, []string{"p", "l"}, args...).Text()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"now_ms": "1700", "logmax": 6.0, "ratio": 2.5, "grouped": true, "meta": `{"a":1}`,
		"fields": []any{"f", "v"},
		"runs": []any{
			map[string]any{"job_key": "job:1", "status": "finished", "fatal": false, "chunk": []any{"hello"}},
			map[string]any{"job_key": "job:2", "status": "error", "fatal": true, "chunk": map[string]any{}},
		}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("unpacked %v\nwant     %v", got, want)
	}
}

// viewHeader declares views (view[]) in each place the prologue reads one: a record
// argument's first list (its position still fixed), a top-level argument past a
// list, a record field right after the record's scalars, and one after a list.
const viewHeader = `-- put: writes items.
--
-- KEYS:
--   h  the hash
-- ARGV:
--   conf   conf  a record argument
--     a     int          a scalar
--     head  view[]string  a view at a fixed position
--     b     string       after it
--   tags   []string  a list
--   mid    view[]raw  a view past a list
--   objs   []obj  the objects
--     id      int        its id
--     fields  view[]raw  its field/value items
--     more    []string   a list after it
--     tail    view[]int  a view after a list
--   last   string  the last argument
-- Reply: raw what was read
`

// A view's items stay in ARGV: the prologue gives its count (<name>_n) and offset
// (<name>_at), and the script reads views[<name>_at + k] and unpacks them in place,
// wherever the view is declared; the arguments after a view are read right.
func TestPrologueViewsReadInPlace(t *testing.T) {
	sc, err := Parse("put.lua", viewHeader)
	if err != nil {
		t.Fatal(err)
	}
	pro := Prologue(sc)
	if strings.Contains(pro, "{unpack") && strings.Contains(pro, "fields = {") {
		t.Fatalf("a view copied into a table:\n%s", pro)
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := pro + `
local function items(at, n) local out = {} for k = 1, n do out[k] = views[at + k] end return out end
local o = {conf = {a = conf.a, b = conf.b, head = items(conf.head_at, conf.head_n)}, tags = tags, last = last,
  mid = {unpack(views, mid_at + 1, mid_at + mid_n)}, objs = {}}
for k, e in ipairs(objs) do
  o.objs[k] = {id = e.id, fields = items(e.fields_at, e.fields_n), more = e.more, tail = items(e.tail_at, e.tail_n),
    pairs = e.fields_n / 2}
end
redis.call('HSET', KEYS[1], unpack(views, objs[1].fields_at + 1, objs[1].fields_at + objs[1].fields_n))
return cjson.encode(o)`
	// the encoding of the generated call(): scalars, then each list's count and items
	args := []any{"7", 2, "h1", "h2", "b!", 1, "t", 3, "m1", "m2", "m3", 2,
		"11", 4, "f", "v", "g", "w", 1, "x", 2, "5", "6",
		"12", 0, 0, 1, "9",
		"end"}
	out, err := rdb.Eval(ctx, script, []string{"h"}, args...).Text()
	if err != nil {
		t.Fatalf("%v\n%s", err, pro)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"conf": map[string]any{"a": "7", "b": "b!", "head": []any{"h1", "h2"}},
		"tags": []any{"t"}, "mid": []any{"m1", "m2", "m3"}, "last": "end",
		"objs": []any{
			map[string]any{"id": "11", "fields": []any{"f", "v", "g", "w"}, "more": []any{"x"}, "tail": []any{"5", "6"}, "pairs": 2.0},
			map[string]any{"id": "12", "fields": map[string]any{}, "more": map[string]any{}, "tail": []any{"9"}, "pairs": 0.0},
		}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read %v\nwant %v\nprologue:\n%s", got, want, pro)
	}
	if h := rdb.HGetAll(ctx, "h").Val(); !reflect.DeepEqual(h, map[string]string{"f": "v", "g": "w"}) {
		t.Fatalf("HSET of a view's items unpacked in place: %v", h)
	}
}

// stub is the package around the generated code of the test module: its Call, its
// script maker and its runner.
const stub = `package m

import "context"

type Script struct{ name string; libs []string }

type Call struct {
	Script *Script
	Keys   []string
	Args   []any
}

func luaScript(name string, libs ...string) *Script { return &Script{name, libs} }

type luaRunner interface {
	runLua(ctx context.Context, c Call) (any, error)
}
`

// A changed declaration changes both sides, through the command make lua-gen runs:
// -check (make lint) finds the prologue and lua_gen.go stale; regenerated, the Lua
// prologue names the new arguments, the Go call written against the old declaration
// no longer compiles, and one written against the new one does. The module "m"
// holds the generated code, a stub of its package and a copy of package luaconv (the
// conversions every generated file shares).
func TestChangedDeclarationBreaksTheOldCall(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	goCmd := func(wd string, args ...string) (string, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir = wd
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	luagen := filepath.Join(t.TempDir(), "luagen")
	if out, err := exec.Command("go", "build", "-o", luagen, "./cmd/luagen").CombinedOutput(); err != nil {
		t.Fatalf("build the luagen command: %v\n%s", err, out)
	}
	// gen runs the command as make lua-gen does (with -check: as make lint does).
	gen := func(extra ...string) (string, error) {
		cmd := exec.Command(luagen, append([]string{"-dir", "lua", "-out", "lua_gen.go", "-package", "m", "-conv", "m/luaconv"}, extra...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	write("go.mod", "module m\n\ngo 1.22\n")
	write("stub.go", stub)
	conv, err := filepath.Glob("luaconv/*.go")
	if err != nil || len(conv) == 0 {
		t.Fatalf("package luaconv's files: %v %v", conv, err)
	}
	for _, f := range conv {
		if !strings.HasSuffix(f, "_test.go") {
			write(filepath.Join("luaconv", filepath.Base(f)), mustRead(t, f))
		}
	}
	body := "\nreturn redis.call('LMOVE', KEYS[1], 'x', 'RIGHT', 'LEFT')\n"
	write("lua/claim.lua", "-- claim: takes an item.\n--\n-- KEYS:\n--   queue  the queue\n-- ARGV:\n--   consumer   string  who\n--   expiry_ms  int     until when\n-- Reply: string the item\n"+body)
	// the caller, written against the first declaration
	write("caller.go", `package m

import "context"

func claim(ctx context.Context, r luaRunner) (string, error) {
	return (&claimArgs{QueueKey: "q", Consumer: "c", ExpiryMs: 5}).run(ctx, r)
}
`)
	if out, err := gen(); err != nil {
		t.Fatalf("luagen: %v\n%s", err, out)
	}
	before := read("lua/claim.lua")
	if out, err := goCmd(dir, "build", "./..."); err != nil {
		t.Fatalf("the first declaration's call does not build: %v\n%s", err, out)
	}
	if out, err := gen("-check"); err != nil {
		t.Fatalf("luagen -check right after luagen: %v\n%s", err, out)
	}

	// expiry_ms becomes lease_ms, and a new argument: the header alone is edited
	write("lua/claim.lua", strings.Replace(before, "--   consumer   string  who\n--   expiry_ms  int     until when\n",
		"--   consumer  string  who\n--   lease_ms  num     for how long\n--   claim     string  the claim\n", 1))
	out, err := gen("-check")
	if err == nil || !strings.Contains(out, "lua/claim.lua") || !strings.Contains(out, "lua_gen.go") {
		t.Fatalf("luagen -check after the header changed: %v, want both sides named stale:\n%s", err, out)
	}
	if out, err := gen(); err != nil {
		t.Fatalf("luagen: %v\n%s", err, out)
	}
	after := read("lua/claim.lua")
	if !strings.Contains(before, "local expiry_ms = ARGV[2]") || !strings.Contains(after, "local lease_ms = tonumber(ARGV[2])") ||
		!strings.Contains(after, "local claim = ARGV[3]") || strings.Contains(after, "expiry_ms") {
		t.Fatalf("the Lua prologue did not follow the declaration:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if !strings.Contains(read("lua_gen.go"), "LeaseMs") {
		t.Fatalf("lua_gen.go did not follow the declaration:\n%s", read("lua_gen.go"))
	}
	out, err = goCmd(dir, "build", "./...")
	if err == nil {
		t.Fatal("the call of the old declaration still builds")
	}
	if !strings.Contains(out, "unknown field ExpiryMs") {
		t.Fatalf("the build failed, but not on the old field:\n%s", out)
	}
	// the caller brought to the new declaration builds
	write("caller.go", strings.Replace(read("caller.go"), "ExpiryMs: 5", `LeaseMs: 5, Claim: "k"`, 1))
	if out, err := goCmd(dir, "build", "./..."); err != nil {
		t.Fatalf("the call of the new declaration does not build: %v\n%s", err, out)
	}
}

func mustRead(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A reply of two lists at one level (a list of records, each with a list of its own,
// then a rest list) decodes into both: the decoder declares each list's variable once
// in a scope and assigns it the second time (it declared it twice: a build error).
func TestReplyOfTwoListsDecodes(t *testing.T) {
	const header = `-- put: stores items.
--
-- KEYS:
--   set  the set
-- ARGV:
--   items  []string  the items
-- Reply: outcome what happened
--   status   string  ok
--   found    []found  the items found
--     index    int       its index
--     tags     []string  its tags
--     ...hash  []string  its hash
--   ...members []string  every item's member
-- Derives: nothing.

return 1
`
	decoderPasses(t, "put.lua", header, `package m

import (
	"fmt"
	"testing"
)

func TestDecode(t *testing.T) {
	out, err := decodePutReply([]any{"ok", []any{[]any{int64(2), []any{"t1", "t2"}, "f", "v"}, []any{int64(3), []any{}}}, "a", "b", "c"})
	if got, want := fmt.Sprintf("%+v %v", out, err), "{Status:ok Found:[{Index:2 Tags:[t1 t2] Hash:[f v]} {Index:3 Tags:[] Hash:[]}] Members:[a b c]} <nil>"; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
`)
}

// A flat reply (flat[]<record>: the records' fields one after another, no table a
// record) decodes into its records, each field by its type; a reply whose length is
// not a multiple of the record's fields, or an item of the wrong type, is an error
// naming it.
func TestFlatReplyDecodes(t *testing.T) {
	const header = `-- take: takes items.
--
-- KEYS:
--   set  the set
-- ARGV:
--   items  []string  the items
-- Reply: flat[]taken per item taken, three items
--   key    string  its key
--   code   int     what happened
--   extra  raw     a hash or nothing
-- Derives: nothing.

return 1
`
	decoderPasses(t, "take.lua", header, `package m

import (
	"fmt"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	out, err := decodeTakeReply([]any{"a", int64(0), nil, "b", int64(2), []any{"f", "v"}})
	if got, want := fmt.Sprintf("%+v %v", out, err), "[{Key:a Code:0 Extra:<nil>} {Key:b Code:2 Extra:[f v]}] <nil>"; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if out, err := decodeTakeReply([]any{}); err != nil || len(out) != 0 {
		t.Fatalf("an empty reply: %v %v", out, err)
	}
	for _, c := range []struct {
		reply []any
		want  string
	}{
		{[]any{"a", int64(0)}, "lua/take.lua: reply: 2 items, not 3 a record"},
		{[]any{"a", "zero", nil}, "lua/take.lua: reply[].code:"},
		{[]any{"a", int64(0), nil, int64(7), int64(1), nil}, "lua/take.lua: reply[].key:"},
	} {
		if _, err := decodeTakeReply(c.reply); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("reply %v: error %v, want one saying %q", c.reply, err, c.want)
		}
	}
}
`)
}

// decoderPasses generates the Go code of the script declared by header in a module of
// its own, with package luaconv, and runs decodeTest there.
func decoderPasses(t *testing.T, file, header, decodeTest string) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	sc, err := Parse(file, header)
	if err != nil {
		t.Fatal(err)
	}
	code, err := Go(GoOptions{Package: "m", Call: "Call", ScriptType: "*Script", NewScript: "luaScript", Runner: "luaRunner", Conv: "m/luaconv"}, []*Script{sc})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module m\n\ngo 1.22\n")
	write("stub.go", stub)
	write("lua_gen.go", string(code))
	conv, err := filepath.Glob("luaconv/*.go")
	if err != nil || len(conv) == 0 {
		t.Fatalf("package luaconv's files: %v %v", conv, err)
	}
	for _, f := range conv {
		if !strings.HasSuffix(f, "_test.go") {
			write(filepath.Join("luaconv", filepath.Base(f)), mustRead(t, f))
		}
	}
	write("decode_test.go", decodeTest)
	cmd := exec.Command("go", "test", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the generated decoder: %v\n%s\n%s", err, out, code)
	}
}

// With a table of counts (PrologueCounts), a record's view count is looked up there,
// and read with tonumber when the table lacks it: the same items either way.
func TestPrologueCountsLookedUp(t *testing.T) {
	sc, err := Parse("put.lua", viewHeader)
	if err != nil {
		t.Fatal(err)
	}
	pro := PrologueCounts(sc, "C")
	if !strings.Contains(pro, "fields_n = C[ARGV[") || !strings.Contains(pro, "tail_n = C[ARGV[argi]] or tonumber(ARGV[argi])") {
		t.Fatalf("no lookup of the records' view counts:\n%s", pro)
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// (4 and 0 in the table, 2 and 1 not)
	script := "local C = {['0'] = 0, ['4'] = 4}\n" + pro + `
local o = {}
for k, e in ipairs(objs) do o[k] = {fields = {unpack(views, e.fields_at + 1, e.fields_at + e.fields_n)}, tail = {unpack(views, e.tail_at + 1, e.tail_at + e.tail_n)}} end
o[#o + 1] = last
return cjson.encode(o)`
	args := []any{"7", 2, "h1", "h2", "b!", 1, "t", 3, "m1", "m2", "m3", 2,
		"11", 4, "f", "v", "g", "w", 1, "x", 2, "5", "6",
		"12", 0, 0, 1, "9",
		"end"}
	out, err := rdb.Eval(ctx, script, []string{"h"}, args...).Text()
	if err != nil {
		t.Fatalf("%v\n%s", err, pro)
	}
	var got, want any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`[{"fields":["f","v","g","w"],"tail":["5","6"]},{"fields":{},"tail":["9"]},"end"]`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read %s\nwant %v\nprologue:\n%s", out, want, pro)
	}
}
