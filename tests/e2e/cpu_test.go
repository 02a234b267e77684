package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// procStat is what /proc/<pid>/stat tells of a process: its parent and CPU time
// (user and system).
type procStat struct {
	ppid int
	cpu  time.Duration
}

// readStat reads /proc/<pid>/stat (false: the process is gone).
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b) // the fields after the command name (which may hold spaces) close with ")"
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return procStat{ppid, time.Duration(u+k) * 10 * time.Millisecond}, true // USER_HZ 100
}

// cpuByPart is the CPU time used so far by each part of a running stack: its services,
// the runner's descendants (the executor processes and their sandboxes), the
// redis-server and this process (the producers).
func cpuByPart(s *harness.Stack, redisPid int) map[string]time.Duration {
	cpu := func(pid int) time.Duration { st, _ := readStat(pid); return st.cpu }
	runner := s.Runner.Cmd.Process.Pid
	out := map[string]time.Duration{
		"supervisor": cpu(s.API.Cmd.Process.Pid), "router": cpu(s.Router.Cmd.Process.Pid),
		"runner": cpu(runner), "scheduler": cpu(s.Scheduler.Cmd.Process.Pid), "redis": cpu(redisPid),
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out["client"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	stats := map[int]procStat{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		if st, ok := readStat(pid); ok {
			stats[pid] = st
		}
	}
	for pid, st := range stats {
		for p, hops := st.ppid, 0; p > 1 && hops < 8; p, hops = stats[p].ppid, hops+1 {
			if p == runner {
				out["executor"] += stats[pid].cpu
				break
			}
		}
	}
	return out
}
