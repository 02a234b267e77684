package model

import (
	"fmt"
	"strings"
)

// TraceparentHeader is the W3C Trace Context header (and gRPC metadata key) that a
// producer hands its trace in with.
const TraceparentHeader = "traceparent"

// Traceparent is a parsed W3C traceparent: version 00, a trace id of 32 lowercase
// hex digits, a parent (span) id of 16, and 2 hex digits of flags.
type Traceparent struct {
	TraceID, ParentID, Flags string
}

// String writes the traceparent.
func (t Traceparent) String() string { return "00-" + t.TraceID + "-" + t.ParentID + "-" + t.Flags }

// ParseTraceparent validates a traceparent strictly (W3C Trace Context, version 00):
// "00-<32 hex>-<16 hex>-<2 hex>", lowercase, neither id all zeros.
func ParseTraceparent(s string) (Traceparent, error) {
	parts := strings.Split(s, "-")
	if len(parts) != 4 {
		return Traceparent{}, fmt.Errorf("%q is not version-traceid-parentid-flags", s)
	}
	if parts[0] != "00" {
		return Traceparent{}, fmt.Errorf("version %q: only 00 is accepted", parts[0])
	}
	t := Traceparent{TraceID: parts[1], ParentID: parts[2], Flags: parts[3]}
	for _, f := range []struct {
		name, v string
		n       int
	}{{"trace id", t.TraceID, 32}, {"parent id", t.ParentID, 16}, {"flags", t.Flags, 2}} {
		if len(f.v) != f.n || !lowerHex(f.v) {
			return Traceparent{}, fmt.Errorf("%s %q: want %d lowercase hex digits", f.name, f.v, f.n)
		}
		if f.name != "flags" && strings.Trim(f.v, "0") == "" {
			return Traceparent{}, fmt.Errorf("%s is all zeros", f.name)
		}
	}
	return t, nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
