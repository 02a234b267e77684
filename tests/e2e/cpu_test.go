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
	ppid     int
	cpu, sys time.Duration // sys: the part of cpu in the kernel
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
	return procStat{ppid, time.Duration(u+k) * 10 * time.Millisecond, time.Duration(k) * 10 * time.Millisecond}, true // USER_HZ 100
}

// cpuByPart is the CPU time used so far by each part of a running stack: its services,
// the runner's descendants (the executor processes and their sandboxes), the
// redis-server and this process (the producers); "kernel" is the part of all of them
// spent in the kernel (not a part of its own: it is in theirs).
func cpuByPart(s *harness.Stack, redisPid int) map[string]time.Duration {
	out := map[string]time.Duration{}
	cpu := func(pid int) time.Duration {
		st, _ := readStat(pid)
		out["kernel"] += st.sys
		return st.cpu
	}
	runner := s.Runner.Cmd.Process.Pid
	out["supervisor"], out["router"] = cpu(s.API.Cmd.Process.Pid), cpu(s.Router.Cmd.Process.Pid)
	out["runner"], out["scheduler"], out["redis"] = cpu(runner), cpu(s.Scheduler.Cmd.Process.Pid), cpu(redisPid)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out["client"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		out["kernel"] += time.Duration(ru.Stime.Nano())
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
				out["kernel"] += stats[pid].sys
				break
			}
		}
	}
	return out
}

// schedWait is what the kernel's schedstat tells of a process's threads: the time they
// waited on a run queue, runnable but not running (a wake-up's wait for a core), and
// the times they were put on a core.
type schedWait struct {
	run, wait        time.Duration // on a core; runnable on a run queue
	slices           int64
	voluntary, preem int64 // context switches: the thread blocked / was preempted
}

// readSchedWait sums /proc/<pid>/task/*/schedstat (run time, run-queue wait, time
// slices) over the process's threads; zero when the kernel has no schedstats.
func readSchedWait(pid int) schedWait {
	var out schedWait
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/[0-9]*/schedstat")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			continue
		}
		r, _ := strconv.ParseInt(f[0], 10, 64)
		w, _ := strconv.ParseInt(f[1], 10, 64)
		out.run += time.Duration(r)
		n, _ := strconv.ParseInt(f[2], 10, 64)
		out.wait += time.Duration(w)
		out.slices += n
		st, err := os.ReadFile(filepath.Join(filepath.Dir(t), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			k, v, _ := strings.Cut(line, ":")
			c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch k {
			case "voluntary_ctxt_switches":
				out.voluntary += c
			case "nonvoluntary_ctxt_switches":
				out.preem += c
			}
		}
	}
	return out
}

// schedByPart is readSchedWait of each part of a running stack (as cpuByPart; the
// executors: the runner's children and their threads).
func schedByPart(s *harness.Stack, redisPid int) map[string]schedWait {
	runner := s.Runner.Cmd.Process.Pid
	out := map[string]schedWait{
		"supervisor": readSchedWait(s.API.Cmd.Process.Pid), "runner": readSchedWait(runner),
		"redis": readSchedWait(redisPid), "client": readSchedWait(os.Getpid()),
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		if descends(pid, runner) {
			w, e := readSchedWait(pid), out["executor"]
			out["executor"] = schedWait{e.run + w.run, e.wait + w.wait, e.slices + w.slices, e.voluntary + w.voluntary, e.preem + w.preem}
		}
	}
	return out
}

// descends: process pid is a descendant of process of (within eight generations).
func descends(pid, of int) bool {
	st, ok := readStat(pid)
	for hops := 0; ok && st.ppid > 1 && hops < 8; hops++ {
		if st.ppid == of {
			return true
		}
		st, ok = readStat(st.ppid)
	}
	return false
}
