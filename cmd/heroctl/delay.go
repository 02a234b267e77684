package main

import (
	"flag"
	"time"
)

// runAtFlag is --run-at: an RFC 3339 time.
type runAtFlag struct{ s *string }

// addDelayFlags adds --run-at and --delay, which delay a job or a flow (what).
func addDelayFlags(fs *flag.FlagSet, what string) (runAtFlag, *time.Duration) {
	at := fs.String("run-at", "", "`TIME` (RFC 3339, 2026-12-24T18:00:00Z) at which the "+what+" starts: scheduled until then")
	delay := fs.Duration("delay", 0, "start the "+what+" after this long (90s, 10m, 2h): scheduled until then")
	return runAtFlag{at}, delay
}

// time is --run-at's time (zero: not given).
func (f runAtFlag) time(name string) (time.Time, error) {
	if *f.s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *f.s)
	if err != nil {
		return time.Time{}, usageErr("%s: --run-at %q is not an RFC 3339 time (2026-12-24T18:00:00Z)", name, *f.s)
	}
	return t, nil
}
