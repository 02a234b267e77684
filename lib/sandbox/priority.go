package sandbox

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A sandbox made ahead of its job is made in the background, beside the jobs that run:
// bwrap and its wrapper cost several milliseconds of CPU each on a small VM, and on a
// machine of two cores the making of the next job's sandbox took the CPU that the
// running job and the services moving the next dependent step needed. So a sandbox
// made ahead is made, and waits, at the lowest CPU priority (nice 19) — whatever the
// CPU leaves over — and is raised back to the runner's own priority the moment a job
// needs it: when its job is handed to it (before its job's command starts, so that
// every process of the job runs at the runner's priority, as a sandbox made for its job
// does), and when a job has to wait for one being made (its making is then on that
// job's path). Only where the runner may raise a priority back (CAP_SYS_NICE, as root,
// or an RLIMIT_NICE that allows it): elsewhere sandboxes are made at the runner's
// priority, as before.

// aheadNice is the priority (nice) a sandbox made ahead is made and waits at.
const aheadNice = 19

// priority is what the runner may do with the priorities of sandboxes made ahead.
type priority struct {
	lower bool // lower them while they are made and wait (base may be restored)
	base  int  // the runner's own nice: their jobs run at it
}

// runnerPriority is the runner's nice and whether it may lower a sandbox's priority
// and raise it back to that.
func runnerPriority() priority {
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return priority{}
	}
	base := 20 - raw // the system call's value is 20 - nice
	if base >= aheadNice {
		return priority{base: base}
	}
	var rl unix.Rlimit
	mayRaise := hasCapability(capSysNice) || (unix.Getrlimit(unix.RLIMIT_NICE, &rl) == nil && rl.Cur >= uint64(20-base))
	return priority{lower: mayRaise, base: base}
}

// capSysNice is CAP_SYS_NICE's number.
const capSysNice = 23

// hasCapability says whether this process has capability c in its effective set.
func hasCapability(c uint) bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		return err == nil && caps&(1<<c) != 0
	}
	return false
}

// lowerProcess lowers a sandbox's first process (waiting at its gate: what it starts
// inherits it) to aheadNice.
func (pr priority) lowerProcess(pid int) {
	if pr.lower {
		_ = unix.Setpriority(unix.PRIO_PROCESS, pid, aheadNice)
	}
}

// raiseGroup raises every process of a sandbox (its process group, pgid its first
// process) back to the runner's priority. A group already gone is no error (its end
// says how it ended).
func (pr priority) raiseGroup(pgid int) error {
	if !pr.lower {
		return nil
	}
	if err := unix.Setpriority(unix.PRIO_PGRP, pgid, pr.base); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}
