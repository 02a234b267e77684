package model

import (
	"strings"
	"testing"
)

func TestJobLimits(t *testing.T) {
	max := &JobLimits{MemoryBytes: 100, Network: NetworkNone}
	for _, c := range []struct {
		l    *JobLimits
		want string
	}{
		{nil, ""},
		{&JobLimits{MemoryBytes: 100, Pids: 1 << 20}, ""},
		{&JobLimits{MemoryBytes: 101}, "memory_bytes 101 is above the maximum 100"},
		{&JobLimits{Network: NetworkOutbound}, `network "outbound" is above the maximum "none"`},
	} {
		if got := c.l.Exceeds(max); got != c.want {
			t.Errorf("%+v: %q, want %q", c.l, got, c.want)
		}
	}
	for _, c := range []struct {
		l    *JobLimits
		want string
	}{
		{&JobLimits{Pids: -1}, "limits.pids"},
		{&JobLimits{Network: "all"}, "limits.network"},
		{&JobLimits{CPUMillis: 1 << 30}, "out of range"},
	} {
		if err := c.l.Validate("job", 1, "limits"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.l, err, c.want)
		}
	}
	ctx := &Context{ID: 1, Admins: []uint32{1}, JobDefaults: &JobLimits{Pids: 20}, JobMax: &JobLimits{Pids: 10}}
	if err := ctx.Validate(); err == nil || !strings.Contains(err.Error(), "job_defaults") {
		t.Errorf("defaults above the maximum: %v", err)
	}
	// Through a Redis hash and back.
	j := &Job{ID: 1, Limits: &JobLimits{MemoryBytes: 5, Network: NetworkOutbound}}
	var back Job
	if err := FromHash("job:1:1", HashMap(j), &back); err != nil || back.Limits == nil || *back.Limits != *j.Limits {
		t.Errorf("hash round trip: %+v %v", back.Limits, err)
	}
}
