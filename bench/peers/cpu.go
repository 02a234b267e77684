package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU is the CPU time (user and system) a process has used so far; 0 when it cannot
// be read.
func procCPU(pid int) time.Duration {
	all, _ := procTimes(pid)
	return all
}

// procSys is the part of procCPU spent in the kernel.
func procSys(pid int) time.Duration {
	_, sys := procTimes(pid)
	return sys
}

// procTimes is a process's CPU time so far, all of it and its part in the kernel.
func procTimes(pid int) (all, sys time.Duration) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	// The fields after the command name (which may hold spaces) close with ")".
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * clockTick, time.Duration(k) * clockTick
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// selfSys is the part of selfCPU spent in the kernel.
func selfSys() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Stime.Nano())
}
