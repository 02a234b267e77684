package model

import (
	"fmt"
	"strings"
)

// Job network modes, in the order of what they allow.
const (
	NetworkNone     = "none"     // no network at all (the default)
	NetworkOutbound = "outbound" // outbound through a user-mode network stack; never the host or internal ranges
)

// JobLimits bound one job's run (an extension beyond the seeds). On a job: what it
// asks for; on a context: the defaults its jobs get (job_defaults, the context's
// admins set them) and the most they may ask for (job_max, operators only). Zero
// (and "" for Network): not set at this level. docs/security.md has the rules.
type JobLimits struct {
	MemoryBytes   int64  `json:"memory_bytes,omitempty"`    // the job's processes together
	Pids          int64  `json:"pids,omitempty"`            // processes and threads at once
	CPUMillis     int64  `json:"cpu_millis,omitempty"`      // thousandths of a CPU
	FileSizeBytes int64  `json:"file_size_bytes,omitempty"` // the largest file it may write
	DiskBytes     int64  `json:"disk_bytes,omitempty"`      // the space its files may take (work directory and /tmp)
	Network       string `json:"network,omitempty"`         // none or outbound
}

// IsZero says nothing is set.
func (l *JobLimits) IsZero() bool { return l == nil || *l == JobLimits{} }

// LimitNames are the JSON names of the numeric limits, in a fixed order.
var LimitNames = []string{"memory_bytes", "pids", "cpu_millis", "file_size_bytes", "disk_bytes"}

// Numbers are the numeric limits in LimitNames' order.
func (l *JobLimits) Numbers() []int64 {
	if l == nil {
		return make([]int64, len(LimitNames))
	}
	return []int64{l.MemoryBytes, l.Pids, l.CPUMillis, l.FileSizeBytes, l.DiskBytes}
}

// SetNumber sets the numeric limit at index i of LimitNames.
func (l *JobLimits) SetNumber(i int, v int64) {
	switch i {
	case 0:
		l.MemoryBytes = v
	case 1:
		l.Pids = v
	case 2:
		l.CPUMillis = v
	case 3:
		l.FileSizeBytes = v
	case 4:
		l.DiskBytes = v
	}
}

// NetworkRank orders network modes: none 0, outbound 1; -1 unknown.
func NetworkRank(n string) int {
	switch n {
	case NetworkNone:
		return 0
	case NetworkOutbound:
		return 1
	}
	return -1
}

// Validate checks the values; field names the object's field ("limits", "job_max", …).
func (l *JobLimits) Validate(object string, id uint32, field string) error {
	if l == nil {
		return nil
	}
	for i, v := range l.Numbers() {
		if v < 0 {
			return verr(object, id, field+"."+LimitNames[i], "must not be negative (0: not set)")
		}
	}
	if l.Pids > 1<<22 || l.CPUMillis > 1<<20 {
		return verr(object, id, field, "pids or cpu_millis is out of range")
	}
	if l.Network != "" && NetworkRank(l.Network) < 0 {
		return verr(object, id, field+".network", "%q is not a network mode (none or outbound)", l.Network)
	}
	return nil
}

// Exceeds names the first limit of l above max (a set limit of max bounds it); ""
// when l is within max.
func (l *JobLimits) Exceeds(max *JobLimits) string {
	if l == nil || max == nil {
		return ""
	}
	have, most := l.Numbers(), max.Numbers()
	for i := range have {
		if most[i] > 0 && have[i] > most[i] {
			return fmt.Sprintf("%s %d is above the maximum %d", LimitNames[i], have[i], most[i])
		}
	}
	if max.Network != "" && l.Network != "" && NetworkRank(l.Network) > NetworkRank(max.Network) {
		return fmt.Sprintf("network %q is above the maximum %q", l.Network, max.Network)
	}
	return ""
}

// String is the short form of logs and heroctl: memory=512MiB,pids=64,cpu=500,
// file-size=1024MiB,disk=1024MiB,network=outbound ("none" when nothing is set).
func (l *JobLimits) String() string {
	if l.IsZero() {
		return "none"
	}
	var parts []string
	if l.MemoryBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory=%dMiB", l.MemoryBytes>>20))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids=%d", l.Pids))
	}
	if l.CPUMillis > 0 {
		parts = append(parts, fmt.Sprintf("cpu=%d", l.CPUMillis))
	}
	if l.FileSizeBytes > 0 {
		parts = append(parts, fmt.Sprintf("file-size=%dMiB", l.FileSizeBytes>>20))
	}
	if l.DiskBytes > 0 {
		parts = append(parts, fmt.Sprintf("disk=%dMiB", l.DiskBytes>>20))
	}
	if l.Network != "" {
		parts = append(parts, "network="+l.Network)
	}
	return strings.Join(parts, ",")
}

// Job priorities (Job.Priority): 1 is claimed first, PriorityLowest last; a job
// without one has PriorityDefault. A job's wait counts against a better priority by
// Context.PriorityAgeMs (default PriorityAgeMs) per step (docs/scheduling.md).
const (
	PriorityHighest = 1
	PriorityDefault = 3
	PriorityLowest  = 5
	PriorityAgeMs   = 10000
	// PriorityAgeMaxMs bounds Context.PriorityAgeMs (a day).
	PriorityAgeMaxMs = 86_400_000
)

// Concurrency keys (Job.ConcurrencyKey): at most MaxConcurrencyKeyLen bytes, a limit
// of at most MaxConcurrencyLimit running jobs per key.
const (
	MaxConcurrencyKeyLen = 200
	MaxConcurrencyLimit  = 10000
)

// The policies of a concurrency key at its limit (Job.ConcurrencyPolicy).
const (
	ConcurrencyQueue        = "queue"
	ConcurrencyCancelNewest = "cancel_newest"
	ConcurrencyCancelOldest = "cancel_oldest"
)

// MaxWeight bounds Context.Weight, a context's claims per round on a shared runner.
const MaxWeight = 100
