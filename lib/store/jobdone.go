package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hero-coordinator/hero/lib/model"
)

// EndedJob is one job of a coord:jobdone notice of awaited jobs (lua/finish_jobs.lua's
// Notices): its reference and its hash as the end left it, as HGETALL's field/value
// items (their strings may share the notice's memory).
type EndedJob struct {
	Ref   model.JobRef
	Pairs []string
}

// IsAwaitedNotice reports whether a coord:jobdone payload tells awaited jobs with their
// hashes (ParseAwaitedNotice) rather than job references, space-separated.
func IsAwaitedNotice(payload string) bool { return strings.HasPrefix(payload, "=") }

// ParseAwaitedNotice reads a coord:jobdone payload of awaited jobs: "=" and then, per
// job, "<ctx>:<caller>:<id> <length>\n" and the DUMP of its hash, of that length, as
// the finish script writes them; each job with its hash's fields and values
// (HashFromDump). A payload that does not read returns the jobs before the fault and
// an error naming it.
func ParseAwaitedNotice(payload string) ([]EndedJob, error) {
	if !IsAwaitedNotice(payload) {
		return nil, errors.New("awaited notice: does not begin with '='")
	}
	var out []EndedJob
	for s := payload[1:]; s != ""; {
		head, rest, ok := strings.Cut(s, "\n")
		r, l, ok2 := strings.Cut(head, " ")
		if !ok || !ok2 {
			return out, fmt.Errorf("awaited notice: job %d has no \"<context>:<caller>:<id> <length>\" line", len(out)+1)
		}
		ref, err := model.ParseJobRef(r)
		if err != nil {
			return out, fmt.Errorf("awaited notice: job %d: %v", len(out)+1, err)
		}
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 || n > len(rest) {
			return out, fmt.Errorf("awaited notice: job %s: a dump of %q bytes where %d are left", r, l, len(rest))
		}
		pairs, err := HashFromDump(rest[:n])
		if err != nil {
			return out, fmt.Errorf("awaited notice: job %s: %w", r, err)
		}
		out = append(out, EndedJob{Ref: ref, Pairs: pairs})
		s = rest[n:]
	}
	return out, nil
}

// JobFromPairs is the job callerID:id of this context from its hash as field/value
// items (HGETALL's, or an awaited notice's).
func (d *DB) JobFromPairs(callerID, id uint32, pairs []string) (*model.Job, error) {
	h := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		h[pairs[i]] = pairs[i+1]
	}
	return d.JobFromHash(callerID, id, h)
}
