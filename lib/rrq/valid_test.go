package rrq

import (
	"encoding/json"
	"strings"
	"testing"
)

var validSeeds = []string{
	``, ` `, `null`, `true`, `false`, `nul`, `truex`, `0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-`, `1e`, `-1.5e-3`,
	`""`, `"a\"b"`, `"\u00e9"`, `"\u00g9"`, `"\x"`, "\"\x01\"", `"\/"`, `"abc`, `[]`, `[1,]`, `[,1]`, `[1 2]`, ` [ 1 , "a" , {} ] `,
	`{}`, `{"a":1}`, `{"a" 1}`, `{"a":}`, `{a:1}`, `{"a":1,}`, `{"a":1 "b":2}`, `{"a":[{"b":null}]}`, `{} {}`, `1 2`, "\t{\n}\r",
	`{"type":"request","payload":{"protocol_version":"1","args":[],"kwargs":{}}}`, "\"é\xff\"",
}

// FuzzValidJSON: validJSON says what json.Valid says, for any bytes.
func FuzzValidJSON(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	for _, s := range decodeSeeds {
		f.Add([]byte(s.payload))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", b, got, want)
		}
	})
}

func TestValidJSONSeedsAndNesting(t *testing.T) {
	for _, s := range validSeeds {
		if got, want := validJSON([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("validJSON(%q) = %v, json.Valid %v", s, got, want)
		}
	}
	for _, n := range []int{maxNesting, maxNesting + 1} {
		for _, open := range []string{"[", `{"a":`} {
			close := "]"
			if open != "[" {
				close = "}"
			}
			s := []byte(strings.Repeat(open, n) + "1" + strings.Repeat(close, n))
			if got, want := validJSON(s), json.Valid(s); got != want {
				t.Errorf("%d levels of %s: validJSON %v, json.Valid %v", n, open, got, want)
			}
		}
	}
}

// BenchmarkValidJSON: a request's payload as the runner writes it, checked.
func BenchmarkValidJSON(b *testing.B) {
	p := []byte(decodeSeeds[0].payload)
	b.Run("validJSON", func(b *testing.B) {
		for b.Loop() {
			if !validJSON(p) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		for b.Loop() {
			if !json.Valid(p) {
				b.Fatal("invalid")
			}
		}
	})
}
