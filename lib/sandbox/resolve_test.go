package sandbox

import (
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/lib/model"
)

func TestResolve(t *testing.T) {
	const mib = 1 << 20
	runner := Limits{MemoryBytes: 1024 * mib, Pids: 512, FileSizeBytes: 1024 * mib}
	cases := []struct {
		name                 string
		job, ctxDef, ctxMax  *model.JobLimits
		runnerDef, runnerMax Limits
		want                 Limits
		refused              string // part of the error; "" for none
	}{
		{name: "runner defaults", runnerDef: runner,
			want: Limits{MemoryBytes: 1024 * mib, Pids: 512, FileSizeBytes: 1024 * mib, Network: "none"}},
		{name: "context defaults over the runner's", runnerDef: runner, ctxDef: &model.JobLimits{Pids: 16, Network: "none"},
			want: Limits{MemoryBytes: 1024 * mib, Pids: 16, FileSizeBytes: 1024 * mib, Network: "none"}},
		{name: "the job's over the context's", runnerDef: runner, ctxDef: &model.JobLimits{Pids: 16}, job: &model.JobLimits{Pids: 64, CPUMillis: 500},
			want: Limits{MemoryBytes: 1024 * mib, Pids: 64, CPUMillis: 500, FileSizeBytes: 1024 * mib, Network: "none"}},
		{name: "a runner default above the context's maximum is lowered", runnerDef: runner, ctxMax: &model.JobLimits{MemoryBytes: 256 * mib},
			want: Limits{MemoryBytes: 256 * mib, Pids: 512, FileSizeBytes: 1024 * mib, Network: "none"}},
		{name: "no limit under a maximum is the maximum", runnerMax: Limits{CPUMillis: 2000},
			want: Limits{CPUMillis: 2000, Network: "none"}},
		{name: "a job above the runner's maximum is refused", runnerDef: runner, runnerMax: Limits{MemoryBytes: 512 * mib},
			job: &model.JobLimits{MemoryBytes: 1024 * mib}, refused: "memory_bytes 1073741824 is above this runner's maximum"},
		{name: "a context default above the runner's maximum is refused", runnerMax: Limits{Pids: 100},
			ctxDef: &model.JobLimits{Pids: 200}, refused: "pids 200 is above this runner's maximum (100)"},
		{name: "a job above the context's maximum is refused", ctxMax: &model.JobLimits{Pids: 10},
			job: &model.JobLimits{Pids: 11}, refused: "above the context's job_max"},
		{name: "outbound by the runner's default", runnerDef: Limits{Network: "outbound"},
			want: Limits{Network: "outbound"}},
		{name: "a job may drop the network", runnerDef: Limits{Network: "outbound"}, job: &model.JobLimits{Network: "none"},
			want: Limits{Network: "none"}},
		{name: "the runner's outbound default lowered by the context's maximum", runnerDef: Limits{Network: "outbound"}, ctxMax: &model.JobLimits{Network: "none"},
			want: Limits{Network: "none"}},
		{name: "outbound allowed by the context's maximum", job: &model.JobLimits{Network: "outbound"}, ctxMax: &model.JobLimits{Network: "outbound"},
			want: Limits{Network: "outbound"}},
		{name: "a context's admins alone cannot turn the network on", ctxDef: &model.JobLimits{Network: "outbound"},
			refused: `network "outbound" is not allowed here`},
		{name: "a job alone cannot turn the network on", job: &model.JobLimits{Network: "outbound"},
			refused: `network "outbound" is not allowed here`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Resolve(c.job, c.ctxDef, c.ctxMax, c.runnerDef, c.runnerMax)
			if c.refused != "" {
				if err == nil || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("got %+v, %v; want refused with %q", got, err, c.refused)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestParseDeny(t *testing.T) {
	p, host, err := ParseDeny("host, 203.0.113.7, 198.51.100.0/24")
	if err != nil || !host || len(p) != 2 || p[0].String() != "203.0.113.7/32" || p[1].String() != "198.51.100.0/24" {
		t.Fatalf("%v %v %v", p, host, err)
	}
	p, host, err = ParseDeny("private")
	if err != nil || host || len(p) != len(privateRanges) {
		t.Fatalf("%v %v %v", p, host, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "fd00::/8"} {
		if _, _, err := ParseDeny(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
