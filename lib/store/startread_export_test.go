package store

import "errors"

// BreakStartedDumps makes every started job's DUMP unreadable to a claim's read of its
// started jobs (as a Redis of a format HashFromDump does not know would), until the
// func it returns is called.
func BreakStartedDumps() (restore func()) {
	startedFromDump = func(string) ([]string, error) { return nil, errors.New("a dump of an unknown format") }
	return func() { startedFromDump = HashFromDump }
}
