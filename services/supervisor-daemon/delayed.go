package main

import (
	"fmt"
	"time"
)

// maxDelay bounds how far ahead run_at or delay may put a job or a flow (a year).
const maxDelay = 366 * 24 * time.Hour

// delayParams are the fields that delay a job.submit item or a flow.start: run_at, an
// RFC 3339 time, or delay, a duration ("90s", "1h30m"); at most one. A run_at in the
// past runs at once.
type delayParams struct {
	RunAt string `json:"run_at,omitempty"`
	Delay string `json:"delay,omitempty"`
}

// when returns the time the call delays to (zero: none, or a time already past).
// where prefixes the fields' names in errors ("jobs[]" in a batch).
func (d delayParams) when(where string, now time.Time) (time.Time, error) {
	var t time.Time
	switch {
	case d.RunAt != "" && d.Delay != "":
		return t, invalidParams(where+"run_at", "%srun_at and %sdelay are both given; give one", where, where)
	case d.RunAt != "":
		v, err := time.Parse(time.RFC3339Nano, d.RunAt)
		if err != nil {
			return t, invalidParams(where+"run_at", "%srun_at %q is not an RFC 3339 time (2026-12-06T10:00:00Z)", where, d.RunAt)
		}
		t = v
	case d.Delay != "":
		v, err := time.ParseDuration(d.Delay)
		if err != nil || v < 0 {
			return t, invalidParams(where+"delay", "%sdelay %q is not a duration of 0 or more (90s, 5m, 1h30m)", where, d.Delay)
		}
		t = now.Add(v)
	default:
		return t, nil
	}
	if t.Sub(now) > maxDelay {
		return time.Time{}, invalidParams(where+"run_at", "%s%s is %s ahead; at most %s", where, d.field(), t.Sub(now).Round(time.Second), maxDelay)
	}
	if !t.After(now) {
		return time.Time{}, nil
	}
	return t, nil
}

func (d delayParams) field() string {
	if d.RunAt != "" {
		return fmt.Sprintf("run_at %s", d.RunAt)
	}
	return fmt.Sprintf("delay %s", d.Delay)
}
