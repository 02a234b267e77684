// Package proctest lets tests wait on other processes by events instead of polls: a
// named pipe a process writes a line to when it gets somewhere (Signal), and pidfds,
// which the kernel makes readable when their process exits (WaitExit).
package proctest

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Signal is a named pipe that processes write a line to ("echo x > <Path>") and a
// test waits on.
type Signal struct {
	Path  string
	lines chan struct{}
	f     *os.File
}

// NewSignal makes the pipe "signal" in dir, writable by every user (jobs run as
// another uid), and starts reading it: the reader holds it open read-write, so that
// writers never block and it never reads an end of file.
func NewSignal(dir string) (*Signal, error) {
	path := filepath.Join(dir, "signal")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o666); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	s := &Signal{Path: path, lines: make(chan struct{}, 1<<16), f: f}
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			s.lines <- struct{}{}
		}
	}()
	return s, nil
}

// Wait waits for n lines; false when the timeout passed first.
func (s *Signal) Wait(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for ; n > 0; n-- {
		select {
		case <-s.lines:
		case <-deadline.C:
			return false
		}
	}
	return true
}

// Drain forgets the lines signalled so far.
func (s *Signal) Drain() {
	for {
		select {
		case <-s.lines:
		default:
			return
		}
	}
}

// Close stops reading.
func (s *Signal) Close() { _ = s.f.Close() }

// Pgrep returns the pids of the processes whose command line contains pattern
// (pgrep -f), but not pgrep's own.
func Pgrep(pattern string) []int {
	out, _ := exec.Command("pgrep", "-f", pattern).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Roots keeps of pids those whose parent is not among them: a shell's child caught
// between its fork and its exec still has the shell's command line.
func Roots(pids []int) []int {
	in := map[int]bool{}
	for _, p := range pids {
		in[p] = true
	}
	var out []int
	for _, p := range pids {
		if !in[Parent(p)] {
			out = append(out, p)
		}
	}
	return out
}

// Parent is a process's parent pid (0 when it cannot be read).
func Parent(pid int) int {
	_, _, ppid, _ := Stat(pid)
	return ppid
}

// Stat reads a process's name, state (R, S, Z: a zombie, …) and parent pid from
// /proc/<pid>/stat; ok is false when it cannot be read.
func Stat(pid int) (comm, state string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", 0, false
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses, so from the last ')'.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", "", 0, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 2 {
		return "", "", 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return s[open+1 : end], f[0], ppid, true
}

// live is every live process (not a zombie): its parent and its process group.
func live() map[int][2]int {
	dirs, _ := os.ReadDir("/proc")
	out := map[int][2]int{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …: from the last ')', as Stat does.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		out[pid] = [2]int{ppid, pgrp}
	}
	return out
}

// Descendants are the live processes below pid: its children, theirs, and so on.
func Descendants(pid int) []int {
	procs := live()
	var out []int
	for p := range procs {
		for a := procs[p][0]; a > 1; a = procs[a][0] {
			if a == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// WaitGroupExit waits until process group pgid has no live process, at most timeout
// (its members may be dying when asked, or fork as they die), and returns those
// still running.
func WaitGroupExit(pgid int, timeout time.Duration) ([]int, error) {
	deadline := time.Now().Add(timeout)
	for {
		members := Group(pgid)
		if len(members) == 0 {
			return nil, nil
		}
		left, err := WaitExit(members, time.Until(deadline))
		if err != nil || len(left) > 0 {
			return left, err
		}
	}
}

// Group are the live processes of process group pgid.
func Group(pgid int) []int {
	var out []int
	for p, v := range live() {
		if v[1] == pgid {
			out = append(out, p)
		}
	}
	return out
}

// ZombieChildren lists the children of process parent that are zombies (dead, not yet
// waited for), as "<pid> <name>".
func ZombieChildren(parent int) []string {
	dirs, _ := os.ReadDir("/proc")
	var out []string
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if comm, state, ppid, ok := Stat(pid); ok && ppid == parent && state == "Z" {
			out = append(out, d.Name()+" "+comm)
		}
	}
	return out
}

// WaitExit waits until every one of pids has exited (a zombie has), at most timeout,
// and returns those still running.
func WaitExit(pids []int, timeout time.Duration) ([]int, error) {
	deadline := time.Now().Add(timeout)
	var fds []unix.PollFd // of the processes still running
	pidOf := map[int32]int{}
	defer func() {
		for _, p := range fds {
			_ = unix.Close(int(p.Fd))
		}
	}()
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // gone (and reaped) already
		}
		if err != nil {
			return nil, err
		}
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		pidOf[int32(fd)] = pid
	}
	for left := time.Until(deadline); len(fds) > 0 && left > 0; left = time.Until(deadline) {
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
			return nil, err
		}
		running := fds[:0]
		for _, p := range fds {
			if p.Revents == 0 {
				running = append(running, p)
			} else {
				_ = unix.Close(int(p.Fd))
			}
		}
		fds = running
	}
	var out []int
	for _, p := range fds {
		out = append(out, pidOf[p.Fd])
	}
	return out, nil
}

// CPU is the CPU time a process has used and that of the children it waited for
// (utime, stime, cutime and cstime of /proc/<pid>/stat); 0 when it is gone. Summed
// over a tree of live processes it counts each process's CPU once: by itself while it
// lives, else by the process that waited for it.
func CPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} { // fields 14-17
		n, _ := strconv.ParseInt(f[k], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}
