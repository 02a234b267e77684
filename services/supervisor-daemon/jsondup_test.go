package main

import (
	"strings"
	"testing"
)

// A member name repeated in one object is found at any depth, also when spelled with
// escapes; the same name in different objects, names inside strings and values that
// look like names are not repeats.
func TestDuplicateKey(t *testing.T) {
	for _, tc := range []struct {
		body string
		dup  string // "": none
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"flow.load","params":{"context_id":1,"id":1}}`, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"flow.load","params":{"context_id":1,"id":1},"params":{"context_id":2,"id":1}}`, "params"},
		{`{"params":{"context_id":1,"context_id":2}}`, "context_id"},
		{`{"a":1,"\u0061":2}`, "a"},
		{`[{"id":1},{"id":2}]`, ""},
		{`[{"id":1,"p":{"x":[{"k":1},{"k":2,"k":3}]}}]`, "k"},
		{`{"a":"b","c":"a","d":["a","a"],"e":{"a":{"a":1}}}`, ""},
		{`{"s":"a \"quoted\" \\ \"s\":1","s2":1}`, ""},
		{`{"env":{"PATH":"x","path":"y"}}`, ""}, // names are compared as they are
		{`{}`, ""},
		{`{"a":1,"a"`, "a"}, // what precedes the break counts; the parse refuses the rest
		{`{"a":"unterminated`, ""},
	} {
		got, dup := duplicateKey([]byte(tc.body))
		if dup != (tc.dup != "") || got != tc.dup {
			t.Errorf("%s: got %q %v, want %q", tc.body, got, dup, tc.dup)
		}
	}
}

// A request member that is one of the request's names in other letter cases is
// refused: Go's decoder took "Method" for method, so a body whose method every other
// reader saw as actor.load ran context.delete.
func TestRequestNamesAreCaseSensitive(t *testing.T) {
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"actor.load","Method":"context.delete","params":{"id":1}}`,
		`{"jsonrpc":"2.0","id":1,"METHOD":"context.delete","params":{"id":1}}`,
		`{"jsonrpc":"2.0","Id":1,"method":"actor.load","params":{"id":1}}`,
		`{"jsonrpc":"2.0","id":1,"method":"actor.load","Params":{"id":2}}`,
	} {
		pr := parseRequest([]byte(body))
		if pr.err == nil || pr.err.Error.Code != codeInvalidRequest || !strings.Contains(pr.err.Error.Message, "case-sensitive") {
			t.Errorf("%s: %+v; want an invalid request naming the member", body, pr.err)
		}
	}
	if pr := parseRequest([]byte(`{"jsonrpc":"2.0","id":1,"method":"actor.load","params":{"id":1}}`)); pr.err != nil {
		t.Errorf("a plain request: %+v", pr.err.Error)
	}
}
