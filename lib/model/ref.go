package model

import (
	"fmt"
	"strconv"
	"strings"
)

// JobRef names a job across contexts: <context_id>:<caller_id>:<id>. Job ids repeat
// across contexts, so anything that leaves a context names a job this way.
type JobRef struct {
	ContextID uint32 `json:"context_id"`
	CallerID  uint32 `json:"caller_id"`
	ID        uint32 `json:"id"`
}

func (r JobRef) String() string {
	b := make([]byte, 0, 32)
	b = strconv.AppendUint(b, uint64(r.ContextID), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, uint64(r.CallerID), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, uint64(r.ID), 10)
	return string(b)
}

// ParseJobRef parses "<context_id>:<caller_id>:<id>".
func ParseJobRef(s string) (JobRef, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return JobRef{}, fmt.Errorf("%q is not a job reference (<context_id>:<caller_id>:<id>)", s)
	}
	var v [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return JobRef{}, fmt.Errorf("%q is not a job reference (<context_id>:<caller_id>:<id>)", s)
		}
		v[i] = uint32(n)
	}
	return JobRef{v[0], v[1], v[2]}, nil
}
