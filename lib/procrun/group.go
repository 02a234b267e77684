package procrun

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Group is a process group as its leader started it: the group's id (its leader's
// pid) and the leader's start time, which tell it from a later group of the same id.
//
// A group's id is its leader's pid. While any process of the group lives (its leader
// a zombie included) the kernel gives that pid to no other process; once the last is
// gone and the leader was waited for, the pid is free, and pids are reused — soon
// where pid_max is 32768 and processes come and go by the thousand (a test suite
// starting sandboxes, each several processes, every one a group of its own). A signal
// sent by id to a group that has ended since lands on whatever group has that id by
// then: another job's, another service's. Signal does not send it when the id names a
// later process.
//
// The leader is known by its pidfs inode number (a pidfd's, on Linux 6.9 and later:
// unique to one process for the life of the system), else by its start time, which
// is in clock ticks (10 ms): a later process that got the id within the same tick is
// taken for the leader then.
type Group struct {
	ID    int
	start uint64 // the leader's start time (clock ticks after boot); 0: unknown
	ino   uint64 // the leader's pidfs inode number; 0: unknown (no pidfs)
}

// GroupOf is the group pid leads (pid must not have been waited for yet: what tells
// its leader is read now).
func GroupOf(pid int) Group {
	ino, _ := pidIno(pid)
	return Group{ID: pid, start: startTime(pid), ino: ino}
}

// Signal sends sig to the group, unless its id names a process that is not its
// leader (the leader was waited for, the group ended, and the pid was reused): then
// the group is gone, and nothing is sent (syscall.ESRCH). A leader gone whose group
// still has processes keeps the id from reuse: they get the signal.
func (g Group) Signal(sig syscall.Signal) error {
	if g.ID <= 0 {
		return syscall.ESRCH
	}
	switch {
	case g.ino != 0:
		// No process of that id (its leader was waited for): the id may still be the
		// group's, kept by its other processes, and the kill tells.
		if now, err := pidIno(g.ID); err == nil && now != g.ino {
			return syscall.ESRCH
		}
	case g.start != 0:
		if now := startTime(g.ID); now != 0 && now != g.start {
			return syscall.ESRCH
		}
	}
	return syscall.Kill(-g.ID, sig)
}

// pidfsMagic is the pidfs filesystem's magic number (statfs's f_type of a pidfd).
const pidfsMagic = 0x50494446

// pidIno is the pidfs inode number of process pid (alive, or a zombie not waited for
// yet); 0 with no error where pidfds are not of pidfs (a kernel before 6.9: their
// inode is one for all). An error: no such process (or no pidfd_open).
func pidIno(pid int) (uint64, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, err
	}
	defer func() { _ = unix.Close(fd) }()
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type != pidfsMagic {
		return 0, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, nil
	}
	return st.Ino, nil
}

// startTime is a process's start time (field 22 of /proc/<pid>/stat); 0 when there
// is no such process (or no /proc).
func startTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold anything: the fields
	// after its last ')' are plain. Field 3 is the first of them; 22 the 20th.
	k := bytes.LastIndexByte(b, ')')
	if k < 0 {
		return 0
	}
	f := bytes.Fields(b[k+1:])
	if len(f) < 20 {
		return 0
	}
	n, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
