package app

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the services' GOGC when the environment sets none: the Go
// default (100) has the collector run four times as often, which cost the job path
// 7–9% of its CPU (docs/benchmarks.md); the services' live heaps are small (tens of
// MB), so the peak heap stays small too.
const DefaultGCPercent = 400

// memoryLimitShare is the part of the cgroup's memory limit that becomes the Go
// runtime's soft memory limit (GOMEMLIMIT) when the environment sets none: the
// collector works harder as the heap nears it, whatever GOGC says, instead of the
// process being killed at the cgroup's limit.
const memoryLimitShare = 0.9

// cgroupMemoryFiles hold a cgroup's memory limit: v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// tuneGC sets GOGC (DefaultGCPercent) and, under a cgroup memory limit, GOMEMLIMIT
// (memoryLimitShare of it), each unless the environment sets it. It returns what it
// set (0: left alone).
func tuneGC(getenv func(string) string, files []string) (gcPercent int, memLimit int64) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
		gcPercent = DefaultGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		if limit := cgroupMemoryLimit(files); limit > 0 {
			memLimit = int64(float64(limit) * memoryLimitShare)
			debug.SetMemoryLimit(memLimit)
		}
	}
	return gcPercent, memLimit
}

// cgroupMemoryLimit reads the first of files that holds a memory limit in bytes; 0
// when none does ("max", v1's near-2^63 "no limit", or no such file).
func cgroupMemoryLimit(files []string) int64 {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v <= 0 || v >= 1<<60 {
			return 0 // "max" or no limit
		}
		return v
	}
	return 0
}
