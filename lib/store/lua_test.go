package store

import (
	"strings"
	"testing"
)

// Every file under lua/ is a script the store runs, or a library one of them includes.
func TestEveryLuaFileIsUsed(t *testing.T) {
	names := map[string]bool{}
	for _, sc := range scripts {
		if sc.err != nil {
			t.Fatal(sc.err)
		}
		names[sc.name] = true
	}
	entries, err := luaFiles.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "lib_") {
			if !names[name] {
				t.Errorf("lua/%s is no script of the store's", name)
			}
			continue
		}
		src, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			t.Fatal(err)
		}
		included := false
		for _, sc := range scripts {
			included = included || strings.Contains(sc.src, string(src))
		}
		// A library of the prelude's (lib_events.lua): its code lines are the prelude's.
		code := 0
		inPrelude := true
		for _, l := range strings.SplitAfter(string(src), "\n") {
			if strings.HasPrefix(l, "local ") {
				code++
				inPrelude = inPrelude && strings.Contains(luaPrelude, l)
			}
		}
		included = included || (code > 0 && inPrelude)
		if !included {
			t.Errorf("library lua/%s is included by no script", name)
		}
	}
}

// The scripts write an entry of many events with the type the readers expand
// (storedMany, spelled in lib_state's ev_flush) and its records of two events of a
// submitted job with theirs (storedCreatedDispatched, lib_state's ev_later), and no
// script writes the entries of two events that an earlier version's submission did
// (an entry of type storedCreatedDispatched, still read).
func TestScriptsSpellTheManyType(t *testing.T) {
	src, err := luaFiles.ReadFile("lua/lib_state.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"local EV_MANY = '" + storedMany + "'\n", "more[nmore] = '" + storedCreatedDispatched + " ' .. flow"} {
		if !strings.Contains(string(src), want) {
			t.Fatalf("lua/lib_state.lua does not hold %s", want)
		}
	}
	ents, err := luaFiles.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		src, err := luaFiles.ReadFile("lua/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		// (the type as a constant's value or an entry's type; lib_claim's table of hex
		// pairs holds the same two letters)
		c := "'" + storedCreatedDispatched + "'"
		if strings.Contains(string(src), "= "+c) || strings.Contains(string(src), "'type', "+c) {
			t.Errorf("lua/%s writes entries of type %q", e.Name(), storedCreatedDispatched)
		}
	}
}

// claim_message reads the fields of RoutingJobFields (spelled in the script).
func TestClaimMessageReadsTheRoutingFields(t *testing.T) {
	src, err := luaFiles.ReadFile("lua/claim_message.lua")
	if err != nil {
		t.Fatal(err)
	}
	want := "local JOB_FIELDS = {'" + strings.Join(RoutingJobFields, "', '") + "'}"
	if !strings.Contains(string(src), want) {
		t.Fatalf("lua/claim_message.lua does not hold %s", want)
	}
}

// The prelude defines each name once, and leaves most of Lua's 200 locals of a chunk to
// the libraries and the script.
func TestPreludeNames(t *testing.T) {
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(luaPrelude), "\n") {
		if strings.HasPrefix(line, "--") {
			continue
		}
		name, _, ok := strings.Cut(strings.TrimPrefix(line, "local "), " = ")
		if !ok || !strings.HasPrefix(line, "local ") {
			t.Fatalf("prelude line %q is no local definition", line)
		}
		if seen[name] {
			t.Fatalf("prelude defines %s twice", name)
		}
		seen[name] = true
	}
	// (a script takes only the names it uses, preludeFor: the bound is the worst case
	// of a script using them all)
	if len(seen) > 130 {
		t.Fatalf("the prelude defines %d locals; a Lua chunk has 200", len(seen))
	}
	for _, want := range []string{"JOB_WAITING_FOR_PREREQUISITES", "FLOW_FINISHED", "NODE_CANCELLED", "MSG_ACKNOWLEDGED", "EV_JOB_DEAD_LETTERED", "K_JOB", "EVENTS_CAP"} {
		if !seen[want] {
			t.Errorf("the prelude has no %s", want)
		}
	}
}

// A name only a comment mentions is not a use: a library's comment naming a prelude
// constant would add a local to every script that takes the library (the largest are
// at Lua's limit of 200). A "--" inside a string, short or long, starts no comment.
func TestPreludeForLeavesCommentsOut(t *testing.T) {
	code := "-- JOB_STARTED is said here\n" +
		"--[[ JOB_FINISHED\n K_JOB ]] local a = '--' .. FLOW_FINISHED\n" +
		"--[==[ NODE_CANCELLED ]] ]==] local b = \"it's -- \\\" \" .. K_JOB_INDEX -- EVENTS_CAP\n" +
		"local c = [[ -- ]] .. MSG_ACKNOWLEDGED\n"
	got := preludeFor(code)
	for _, want := range []string{"FLOW_FINISHED", "K_JOB_INDEX", "MSG_ACKNOWLEDGED"} {
		if !strings.Contains(got, "local "+want+" = ") {
			t.Errorf("prelude lacks %s, which the code uses:\n%s", want, got)
		}
	}
	for _, not := range []string{"JOB_STARTED", "JOB_FINISHED", "K_JOB", "NODE_CANCELLED", "EVENTS_CAP"} {
		if strings.Contains(got, "local "+not+" = ") {
			t.Errorf("prelude holds %s, which only a comment names:\n%s", not, got)
		}
	}
}

// A script gets the prelude's definitions it uses, and only those.
func TestPreludeForTakesWhatTheCodeUses(t *testing.T) {
	got := preludeFor("if st == JOB_STARTED then redis.call('DEL', K_JOB_INDEX) end")
	for _, want := range []string{"local JOB_STARTED = 'started'\n", "local K_JOB_INDEX = 'coord:idx:jobs'\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("prelude for the code lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"local K_JOB = ", "local JOB_FINISHED = ", "local EVENTS_CAP = "} {
		if strings.Contains(got, not) {
			t.Errorf("prelude for the code holds %q, which it does not use:\n%s", not, got)
		}
	}
}

// A library makes the table of small counts (countTable) only when its script looks
// counts up in it: every other library loaded would hold 256 entries for nothing.
func TestCountTableOnlyWhereUsed(t *testing.T) {
	with, without := 0, 0
	for _, sc := range scripts {
		uses := strings.Contains(sc.src, countTable+"[")
		makes := strings.Contains(sc.lib, "local "+countTable+" = {")
		if uses != makes {
			t.Errorf("%s: looks counts up %v, makes the table %v", sc.name, uses, makes)
		}
		if uses {
			with++
		} else {
			without++
		}
	}
	if with == 0 || without == 0 {
		t.Fatalf("%d scripts look counts up, %d do not: want some of each", with, without)
	}
}
