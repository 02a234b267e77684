package luaconv

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Each decoder takes the values go-redis gives for a script's reply (nil, int64,
// string, []any) and refuses any other with an error naming what it got.
func TestDecoders(t *testing.T) {
	cases := []struct {
		name string
		fn   func(any) (any, error)
		in   any
		want any
		err  string
	}{
		{"string", wrap(String), "a", "a", ""},
		{"string of nil", wrap(String), nil, "", ""},
		{"string of a number", wrap(String), int64(1), "", "int64 1, want a string"},
		{"int", wrap(Int), int64(-3), int64(-3), ""},
		{"int of its decimal string", wrap(Int), "42", int64(42), ""},
		{"int of nil", wrap(Int), nil, int64(0), ""},
		{"int of a word", wrap(Int), "x", int64(0), `"x", want an integer`},
		{"int of a list", wrap(Int), []any{}, int64(0), "want an integer"},
		{"float of a string", wrap(Float), "1.5", 1.5, ""},
		{"float of an integer", wrap(Float), int64(2), 2.0, ""},
		{"float of nil", wrap(Float), nil, 0.0, ""},
		{"float of a word", wrap(Float), "x", 0.0, `"x", want a number`},
		{"float of a list", wrap(Float), []any{}, 0.0, "want a number"},
		{"true", wrap(BoolReply), int64(1), true, ""},
		{"false (nil)", wrap(BoolReply), nil, false, ""},
		{"bool of a string", wrap(BoolReply), "1", false, "want a boolean"},
		{"json", wrap(JSON), `{"a":1}`, json.RawMessage(`{"a":1}`), ""},
		{"json of nil", wrap(JSON), nil, json.RawMessage(nil), ""},
		{"json of an empty string", wrap(JSON), "", json.RawMessage(nil), ""},
		{"json of a number", wrap(JSON), int64(1), json.RawMessage(nil), "want a string"},
		{"list", wrap(List), []any{"a", int64(1)}, []any{"a", int64(1)}, ""},
		{"list of nil", wrap(List), nil, []any(nil), ""},
		{"list of a string", wrap(List), "a", []any(nil), "want a list"},
	}
	for _, c := range cases {
		got, err := c.fn(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %#v, %v; want %#v", c.name, got, err, c.want)
		}
	}
	if Bool(true) != "1" || Bool(false) != "0" {
		t.Errorf("Bool: %q %q, want \"1\" \"0\"", Bool(true), Bool(false))
	}
}

func wrap[T any](f func(any) (T, error)) func(any) (any, error) {
	return func(v any) (any, error) { return f(v) }
}
