package sandbox

import (
	"fmt"

	"github.com/hero-coordinator/hero/lib/model"
)

// Resolve works out the limits one job runs with, from what it asks for, its
// context's job_defaults and job_max, and this runner's defaults and maxima:
//
//   - each limit is the job's if set, else the context's default, else the runner's;
//   - a value the job or its context asked for above the context's or the runner's
//     maximum refuses the job (the error names the limit); the runner's own default
//     above a maximum is lowered to it; no value under a maximum means the maximum;
//   - network: the job's, else the context's default, else the runner's (lowered to
//     what is allowed); outbound is allowed only where the context's job_max says so
//     or, without one, where the runner's default is outbound — an operator's
//     setting, never a tenant's alone.
func Resolve(job, ctxDefaults, ctxMax *model.JobLimits, runner, runnerMax Limits) (Limits, error) {
	rd := runner.jobLimits()
	rm := runnerMax.jobLimits()
	jv, cd, cm := job.Numbers(), ctxDefaults.Numbers(), ctxMax.Numbers()
	rdv, rmv := rd.Numbers(), rm.Numbers()
	var out model.JobLimits
	for i, name := range model.LimitNames {
		v, asked := jv[i], true
		if v == 0 {
			v = cd[i]
		}
		if v == 0 {
			v, asked = rdv[i], false
		}
		for _, m := range []struct {
			max   int64
			whose string
		}{{cm[i], "the context's job_max"}, {rmv[i], "this runner's maximum"}} {
			switch {
			case m.max == 0:
			case v == 0 || (v > m.max && !asked):
				v = m.max
			case v > m.max:
				return Limits{}, fmt.Errorf("%s %d is above %s (%d)", name, v, m.whose, m.max)
			}
		}
		out.SetNumber(i, v)
	}
	l := Limits{MemoryBytes: out.MemoryBytes, Pids: int(out.Pids), CPUMillis: int(out.CPUMillis), FileSizeBytes: out.FileSizeBytes, DiskBytes: out.DiskBytes, Network: model.NetworkNone}
	allowed := runner.network()
	if ctxMax != nil && ctxMax.Network != "" {
		allowed = ctxMax.Network
	}
	want := pick(job, ctxDefaults)
	switch {
	case want == "":
		want = runner.network()
		if model.NetworkRank(want) > model.NetworkRank(allowed) {
			want = allowed
		}
	case model.NetworkRank(want) > model.NetworkRank(allowed):
		return Limits{}, fmt.Errorf("network %q is not allowed here (the context's job_max or, without one, the runner's --job-network allows %q)", want, allowed)
	}
	l.Network = want
	return l, nil
}

func pick(job, ctxDefaults *model.JobLimits) string {
	if job != nil && job.Network != "" {
		return job.Network
	}
	if ctxDefaults != nil {
		return ctxDefaults.Network
	}
	return ""
}

func (l Limits) jobLimits() *model.JobLimits {
	return &model.JobLimits{MemoryBytes: l.MemoryBytes, Pids: int64(l.Pids), CPUMillis: int64(l.CPUMillis), FileSizeBytes: l.FileSizeBytes, DiskBytes: l.DiskBytes, Network: l.Network}
}

func (l Limits) network() string {
	if l.Network == "" {
		return model.NetworkNone
	}
	return l.Network
}
