package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
)

// A job's processes never outlive the runner. Each job starts as a process group
// (and session) of its own, and every process of it stays in that group unless the
// job's own code leaves it — inside its PID namespace, which ends with its first
// process. The runner's guard, a small process of its own session that is not the
// runner's child in any way that ends it, holds a pipe from the runner and knows the
// group of every job (and executor) running: when the pipe closes — the runner is
// gone, however it ended — it kills every one of them (kill -KILL -<group>, from
// outside their PID namespaces, so that their first process dies too). A job waits
// at its gate, before it makes anything (bwrap reading its options; the trampoline's
// first step without a sandbox), until the guard knows its group: a runner that dies
// before that leaves the gate's pipe closed, and the job ends there, having started
// nothing.
//
// This holds where the kernel's parent-death signals do not: bwrap's process that
// becomes the job's PID 1 has none while it sets the sandbox up, and arms it only
// then, against whatever is its parent by then (a runner killed meanwhile let jobs
// start after its death); a change of user clears the signal until it is armed again.

// guardScript keeps the groups the runner names on its standard input ("+<group>" when
// one starts, "-<group>" once it has ended and been waited for) and the job cgroups
// ("c<directory>" once made, "d<directory>" once removed), and when the input ends
// kills the groups left, then empties and removes the cgroups left (a sandbox made
// ahead of its job, or a job, leaves no cgroup behind either; each is tried for about
// five seconds; a process of another PID namespace shows as 0 in cgroup v2, and kill 0
// would be the guard's own group). Signals for the runner's terminal or its stop do
// not end it.
const guardScript = `trap '' HUP INT TERM
l=' ' c=' '
while read -r a; do
	case $a in
	+*) l="$l${a#+} " ;;
	-*) case $l in *" ${a#-} "*) l="${l%% ${a#-} *} ${l#* ${a#-} }" ;; esac ;;
	c*) c="$c${a#c} " ;;
	d*) case $c in *" ${a#d} "*) c="${c%% ${a#d} *} ${c#* ${a#d} }" ;; esac ;;
	esac
done
for p in $l; do kill -KILL -"$p" 2>/dev/null; done
for d in $c; do
	n=0
	while [ -d "$d" ] && ! rmdir "$d" 2>/dev/null && [ $n -lt 100 ]; do
		for p in $(cat "$d/cgroup.procs" 2>/dev/null); do [ "$p" = 0 ] || kill -KILL "$p" 2>/dev/null; done
		n=$((n + 1))
		sleep 0.05
	done
done
`

// guard is the runner's side of its guard process.
type guard struct {
	sh     string
	mu     sync.Mutex
	cmd    *exec.Cmd
	w      *os.File        // the guard's input (nil: not running)
	live   map[int]bool    // the groups it is to kill, for a guard started again
	dirs   map[string]bool // the cgroups it is to remove, likewise
	closed bool
}

func newGuard(sh string) (*guard, error) {
	g := &guard{sh: sh, live: map[int]bool{}, dirs: map[string]bool{}}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g, g.start()
}

// start starts the guard process, telling it every live group. Called with g.mu.
func (g *guard) start() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(g.sh, "-c", guardScript, "hero-guard")
	cmd.Stdin, cmd.Env = r, []string{"PATH=/usr/bin:/bin"}
	// A session of its own: a signal to the runner's process group does not reach it;
	// no parent-death signal: it must outlive the runner.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return fmt.Errorf("start the guard: %v", err)
	}
	go g.watch(cmd)
	g.cmd, g.w = cmd, w
	for pid := range g.live {
		if err := g.write('+', pid); err != nil {
			return err
		}
	}
	for d := range g.dirs {
		if err := g.writeLine('c', d); err != nil {
			return err
		}
	}
	return nil
}

// watch waits for the guard process to end and starts another in its place unless
// it was closed (killed by someone, say).
func (g *guard) watch(cmd *exec.Cmd) {
	_ = cmd.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.cmd != cmd {
		return
	}
	g.closeLocked()
	_ = g.start() // an error: the next add tries again, and fails the job's start
}

// write sends one line to the guard. Called with g.mu.
func (g *guard) write(op byte, pid int) error {
	if g.w == nil {
		return errors.New("the guard is not running")
	}
	_, err := g.w.Write(append(strconv.AppendInt([]byte{op}, int64(pid), 10), '\n'))
	return err
}

// writeLine sends one line naming a cgroup directory. Called with g.mu.
func (g *guard) writeLine(op byte, dir string) error {
	if g.w == nil {
		return errors.New("the guard is not running")
	}
	_, err := g.w.Write([]byte(string(op) + dir + "\n"))
	return err
}

// addDirs tells the guard of a job's cgroup (its directories), to be removed if the
// runner dies; a guard gone hears of it when it is started again.
func (g *guard) addDirs(dirs []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range dirs {
		g.dirs[d] = true
		_ = g.writeLine('c', d)
	}
}

// removeDirs tells the guard a job's cgroup is gone.
func (g *guard) removeDirs(dirs []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range dirs {
		delete(g.dirs, d)
		_ = g.writeLine('d', d)
	}
}

// add tells the guard of a new group: when it returns nil, the guard kills the group
// if the runner dies. A guard found gone is started again.
func (g *guard) add(pid int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live[pid] = true
	if err := g.write('+', pid); err == nil {
		return nil
	}
	g.closeLocked()
	if err := g.start(); err != nil {
		delete(g.live, pid)
		return err
	}
	return nil
}

// remove tells the guard a group has ended (its leader waited for).
func (g *guard) remove(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.live, pid)
	_ = g.write('-', pid) // a guard gone is started again by the next add
}

// close ends the guard: it kills the groups still live (none, after a drain).
func (g *guard) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.closeLocked()
}

func (g *guard) closeLocked() {
	if g.w != nil {
		_ = g.w.Close()
		g.w = nil
	}
}
