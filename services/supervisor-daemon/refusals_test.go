package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// The metric's labels do not tell an unknown actor, an actor without a key and a bad
// signature apart (nor a revoked secret from a wrong one); the other reasons keep
// their names.
func TestMetricReasonHidesWhoExists(t *testing.T) {
	for _, r := range []string{reasonUnknownActor, reasonNoKey, reasonBadSignature, reasonDevUnknown} {
		if got := metricReason(r); got != "not_verified" {
			t.Errorf("%s is counted as %q, want not_verified", r, got)
		}
	}
	if metricReason(reasonRevoked) != metricReason(reasonBadSecret) {
		t.Error("a revoked secret and a wrong one are counted apart")
	}
	for _, r := range []string{reasonMissing, reasonMalformed, reasonStale, reasonReplayed, reasonSessionNoTLS, reasonSessionNoEKM} {
		if got := metricReason(r); got != r {
			t.Errorf("%s is counted as %q", r, got)
		}
	}
}

// logLines decodes the JSON lines of buf.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	buf.Reset()
	return out
}

// A flood of refusals from one address (over many connections) is one line with its
// reason, then one line with the count of the others by reason; another address
// still gets its own line; past the bound of sources, new ones are counted together.
func TestRefusalLogIsThrottledPerSource(t *testing.T) {
	var buf bytes.Buffer
	l := newRefusalLog(zerolog.New(&buf), time.Hour, 3) // the test ends the interval itself
	noFields := func(ev *zerolog.Event) *zerolog.Event { return ev }
	reasons := []string{reasonUnknownActor, reasonBadSignature, reasonNoKey}
	for i := 0; i < 1000; i++ {
		l.refusal(fmt.Sprintf("10.0.0.1:%d", 40000+i), reasons[i%3], noFields)
	}
	l.refusal("10.0.0.2:5000", reasonStale, noFields)
	lines := logLines(t, &buf)
	if len(lines) != 2 || lines[0]["reason"] != reasonUnknownActor || lines[1]["reason"] != reasonStale {
		t.Fatalf("1001 refusals from two addresses logged %d lines: %v", len(lines), lines)
	}
	l.refusal("10.0.0.3:1", reasonMalformed, noFields)
	l.refusal("10.0.0.4:1", reasonMalformed, noFields) // past the bound: "other"
	l.refusal("10.0.0.5:1", reasonMissing, noFields)   // counted with it
	if n := len(logLines(t, &buf)); n != 2 {
		t.Fatalf("three new sources past the bound: %d lines, want 2 (10.0.0.3, and other)", n)
	}

	l.flush()
	summaries := map[string]map[string]any{}
	for _, m := range logLines(t, &buf) {
		summaries[m["source"].(string)] = m
	}
	one := summaries["10.0.0.1"]
	if len(summaries) != 2 || one == nil || one["refused"] != float64(999) || summaries["other"] == nil || summaries["other"]["refused"] != float64(1) {
		t.Fatalf("summaries: %v", summaries)
	}
	byReason := one["reasons"].(map[string]any)
	if byReason[reasonUnknownActor] != float64(333) || byReason[reasonBadSignature] != float64(333) || byReason[reasonNoKey] != float64(333) {
		t.Fatalf("10.0.0.1's reasons: %v", byReason)
	}
	// A new interval: the address's next refusal is a line of its own again.
	l.refusal("10.0.0.1:1", reasonBadSignature, noFields)
	if lines := logLines(t, &buf); len(lines) != 1 || lines[0]["reason"] != reasonBadSignature {
		t.Fatalf("after the interval: %v", lines)
	}
}
