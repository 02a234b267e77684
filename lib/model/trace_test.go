package model

import "testing"

func TestParseTraceparent(t *testing.T) {
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp, err := ParseTraceparent(good)
	if err != nil || tp.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || tp.ParentID != "00f067aa0ba902b7" || tp.Flags != "01" || tp.String() != good {
		t.Fatalf("ParseTraceparent(%q) = %+v, %v", good, tp, err)
	}
	for _, bad := range []string{
		"",
		"garbage",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       // version
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",       // uppercase
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",       // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",       // zero parent id
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",        // short trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",        // short parent id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",        // short flags
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",       // flags not hex
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", // extra part
	} {
		if _, err := ParseTraceparent(bad); err == nil {
			t.Errorf("ParseTraceparent(%q) accepted", bad)
		}
	}
}
