package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hero-coordinator/hero/lib/model"
)

// EndedJob is one job of a coord:jobdone notice of awaited jobs (lua/finish_jobs.lua's
// Notices): its reference and its hash as the end left it, HGETALL's field/value items.
type EndedJob struct {
	Ref   model.JobRef
	Pairs []string
}

// IsAwaitedNotice reports whether a coord:jobdone payload tells awaited jobs with their
// hashes (ParseAwaitedNotice) rather than job references, space-separated.
func IsAwaitedNotice(payload string) bool { return strings.HasPrefix(payload, "=") }

// ParseAwaitedNotice reads a coord:jobdone payload of awaited jobs: per job
// "=<ctx>:<caller>:<id> <pairs>\n", then its 2*pairs fields and values, each
// "<length>:<bytes>". The strings returned share the payload's memory. A payload that
// does not read returns the jobs before the fault and an error naming it.
func ParseAwaitedNotice(payload string) ([]EndedJob, error) {
	var out []EndedJob
	s := payload
	for len(s) > 0 {
		if s[0] != '=' {
			return out, fmt.Errorf("awaited notice: job %d does not begin with '='", len(out)+1)
		}
		head, rest, ok := strings.Cut(s[1:], "\n")
		if !ok {
			return out, fmt.Errorf("awaited notice: job %d has no end of line", len(out)+1)
		}
		r, n, ok := strings.Cut(head, " ")
		ref, err := model.ParseJobRef(r)
		if !ok || err != nil {
			return out, fmt.Errorf("awaited notice: job %d: %q is not \"<context>:<caller>:<id> <pairs>\"", len(out)+1, head)
		}
		pairs, err := strconv.Atoi(n)
		if err != nil || pairs < 0 || pairs > len(rest)/4 { // each pair takes at least "0:0:"
			return out, fmt.Errorf("awaited notice: job %s: %q is not a count of pairs", r, n)
		}
		items := make([]string, 2*pairs)
		for i := range items {
			l, tail, ok := strings.Cut(rest, ":")
			size, err := strconv.Atoi(l)
			if !ok || err != nil || size < 0 || size > len(tail) {
				return out, fmt.Errorf("awaited notice: job %s: item %d is not <length>:<bytes>", r, i+1)
			}
			items[i], rest = tail[:size], tail[size:]
		}
		out = append(out, EndedJob{Ref: ref, Pairs: items})
		s = rest
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
