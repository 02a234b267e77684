package config

import (
	"reflect"
	"testing"
)

// Entries trims each entry and leaves the empty ones out.
func TestEntries(t *testing.T) {
	for _, tc := range []struct {
		in, sep string
		want    []string
	}{
		{"a=1; ;b=2 ", ";", []string{"a=1", "b=2"}},
		{"", "|", nil},
		{" x ", ",", []string{"x"}},
		{"p|q|", "|", []string{"p", "q"}},
	} {
		if got := Entries(tc.in, tc.sep); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Entries(%q, %q) = %q, want %q", tc.in, tc.sep, got, tc.want)
		}
	}
}
