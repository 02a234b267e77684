package sandbox

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Limit reasons: what a job that went over a limit ends with (its error and the
// failure reason of hero_jobs_failed_total).
const (
	ReasonMemory   = "memory_limit"
	ReasonPids     = "pids_limit"
	ReasonFileSize = "file_size_limit"
)

// cgroups is where job cgroups are made: cgroup v1 (one hierarchy per controller) or
// v2 (one unified hierarchy, with the controllers delegated to our parent).
type cgroups struct {
	v2     bool
	root   string            // v2: the parent directory of job cgroups
	roots  map[string]string // v1: controller → the parent directory of job cgroups
	parent string            // the name of the parent cgroup
}

// detectCgroups finds a cgroup hierarchy where this process may make children with
// the memory, pids and cpu controllers; nil when there is none (limits then fall back
// to rlimits).
func detectCgroups(base, parent string) *cgroups {
	if base == "" {
		base = "/sys/fs/cgroup"
	}
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err == nil {
		// v2: we need write access to base/parent and its subtree_control.
		root := filepath.Join(base, parent)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil
		}
		want := []string{"memory", "pids", "cpu"}
		for _, c := range want {
			_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+"+c), 0o644)
		}
		b, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
		if err != nil {
			return nil
		}
		for _, c := range want {
			if !strings.Contains(string(b), c) {
				return nil
			}
		}
		return &cgroups{v2: true, root: root, parent: parent}
	}
	cg := &cgroups{roots: map[string]string{}, parent: parent}
	for _, c := range []string{"memory", "pids", "cpu"} {
		dir := filepath.Join(base, c, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil
		}
		cg.roots[c] = dir
	}
	return cg
}

func (c *cgroups) String() string {
	if c.v2 {
		return "cgroup v2 at " + c.root
	}
	return "cgroup v1 under " + c.roots["memory"] + " (memory, pids, cpu)"
}

// Who owns a job cgroup. A cgroup is named job-<pid>-<instance>-<n>: instance is a
// random id of the Sandbox that made it (newOwner), n its count; the pid (the runner's,
// in its own PID namespace) is for runners of an earlier version on the same host,
// which read job-<pid>-… and ask kill(pid, 0), and say nothing here. The owner holds an exclusive
// flock on <owners>/<instance>.lock for as long as it lives; the kernel lets the lock
// go when the process is gone, however it ended. Whether a cgroup's owner is alive is
// asked of that lock (LOCK_EX|LOCK_NB), never of a pid: runners in different PID
// namespaces share the host's cgroups (a runner that is PID 1 of its container, or
// under unshare --pid), and a pid names another process — or none — in another
// namespace; nor do a process's pid and its name's pid agree once pids are reused.
// The lock file is made under a temporary name, locked, then renamed into place, so
// that no other runner ever finds it unlocked while its owner lives. A cgroup whose
// lock file is missing (another owners directory, a name of another form) is left
// alone: only a lock file found unlocked proves its owner gone.

// owner is this Sandbox's claim on its job cgroups: its instance id and, held while it
// lives, the lock on its lock file (nil: no owners directory could be had; the guard
// alone then removes what a killed runner leaves).
type owner struct {
	instance string
	dir      string
	lock     *os.File
}

// ownersDir is the directory of the owners' lock files: one every runner of this host
// sees (a PID namespace of its own keeps the mounts), writable by its user only. Root:
// /run/hero-jobs; another user: hero-jobs-<uid> in $XDG_RUNTIME_DIR or the temporary
// directory. "" when none is safe (another user's, or writable by others).
func ownersDir() string {
	uid := os.Geteuid()
	var cands []string
	if uid == 0 {
		cands = append(cands, "/run/hero-jobs")
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		cands = append(cands, filepath.Join(d, "hero-jobs"))
	}
	cands = append(cands, filepath.Join(os.TempDir(), fmt.Sprintf("hero-jobs-%d", uid)))
	for _, d := range cands {
		_ = os.Mkdir(d, 0o700)
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != uid {
			continue
		}
		return d
	}
	return ""
}

// newOwner makes this Sandbox's instance id and, in dir, its lock file, locked.
func newOwner(dir string) *owner {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	o := &owner{instance: hex.EncodeToString(b)}
	if dir == "" {
		return o
	}
	tmp := filepath.Join(dir, ".new-"+o.instance)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return o
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil || os.Rename(tmp, filepath.Join(dir, o.instance+".lock")) != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return o
	}
	o.dir, o.lock = dir, f
	return o
}

// cgroupName is the name of this Sandbox's n-th job cgroup.
func (o *owner) cgroupName(n uint64) string {
	return fmt.Sprintf("job-%d-%s-%d", os.Getpid(), o.instance, n)
}

// release removes the lock file and lets the lock go (the Sandbox closed: none of its
// jobs runs any more).
func (o *owner) release() {
	if o.lock == nil {
		return
	}
	_ = os.Remove(filepath.Join(o.dir, o.instance+".lock"))
	_ = o.lock.Close()
	o.lock = nil
}

// instanceOf is the instance id of a job cgroup's name ("" for another form, such as
// an earlier version's job-<pid>-<n>: left to its guard).
func instanceOf(name string) string {
	f := strings.Split(name, "-")
	if len(f) != 4 || f[0] != "job" || len(f[2]) != 16 {
		return ""
	}
	if _, err := hex.DecodeString(f[2]); err != nil {
		return ""
	}
	return f[2]
}

// ownerGone says whether the owner of instance is gone: its lock file is there and
// nobody holds its lock. The lock is then held until unlock, which removes the file
// too when remove (every cgroup of the gone owner reaped: a cgroup left, of processes
// this runner cannot see from its PID namespace, keeps it for a runner that can).
func (o *owner) ownerGone(instance string) (gone bool, unlock func(remove bool)) {
	if o.dir == "" || instance == "" || instance == o.instance {
		return false, nil
	}
	path := filepath.Join(o.dir, instance+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false, nil // no lock file: not ours to judge
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		_ = f.Close()
		return false, nil // its owner holds it: alive (maybe stopped, never dead)
	}
	return true, func(remove bool) {
		if remove {
			_ = os.Remove(path)
		}
		_ = f.Close()
	}
}

// reapOrphans ends what is left in the job cgroups of runners that are gone, then
// removes those cgroups. The guard (guard.go) kills a gone runner's jobs the moment
// it is gone; this is what is left should the guard have gone with it (both killed at
// once, by a stop of everything): bwrap's process that becomes the job's PID 1 has no
// parent-death signal while it sets the sandbox up. Every job joins its cgroup before
// anything of it starts, so what a gone runner left is found there, and ended before
// this runner takes back the gone runner's jobs (a job must not run twice at once).
// A gone runner is one whose lock file is unlocked (owner above): a runner in another
// PID namespace is as alive as it is, and a cgroup made a moment ago by a live runner,
// its job about to join it, stays. Lock files of gone runners are removed too.
//
// Every parent (the jobs', the executor pools') is reaped in one pass: a gone
// runner's lock file goes only once none of its cgroups is left under any of them.
func reapOrphans(o *owner, parents ...*cgroups) {
	if o.dir == "" {
		return
	}
	type orphan struct {
		parent int
		name   string
	}
	orphans := map[orphan]*jobGroup{} // its directories, one per controller in v1
	unlocks := map[string]func(bool){}
	left := map[string]bool{} // instances with a cgroup that could not be removed
	judged := map[string]bool{}
	gone := func(instance string) bool {
		if g, ok := judged[instance]; ok {
			return g
		}
		g, unlock := o.ownerGone(instance)
		judged[instance] = g
		if unlock != nil {
			unlocks[instance] = unlock
		}
		return g
	}
	for i, c := range parents {
		roots := map[string]string{"": c.root}
		if !c.v2 {
			roots = c.roots
		}
		for ctl, r := range roots {
			entries, _ := os.ReadDir(r)
			for _, e := range entries {
				if !e.IsDir() || !gone(instanceOf(e.Name())) {
					continue
				}
				k := orphan{i, e.Name()}
				g := orphans[k]
				if g == nil {
					g = &jobGroup{v2: c.v2, dirs: map[string]string{}}
					orphans[k] = g
				}
				g.dirs[ctl] = filepath.Join(r, e.Name())
			}
		}
	}
	for k, g := range orphans {
		g.kill(5 * time.Second)
		if !g.remove() {
			left[instanceOf(k.name)] = true
		}
	}
	for inst, unlock := range unlocks {
		unlock(!left[inst])
	}
	// Lock files of gone runners that left no cgroup.
	entries, _ := os.ReadDir(o.dir)
	for _, e := range entries {
		inst, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || judged[inst] {
			continue
		}
		if g, unlock := o.ownerGone(inst); g {
			unlock(true)
		}
	}
}

// jobGroup is one job's cgroup (one directory per controller in v1).
type jobGroup struct {
	v2   bool
	dirs map[string]string // controller ("" in v2) → directory
}

// create makes the job's cgroup with its limits.
func (c *cgroups) create(name string, lim Limits) (*jobGroup, error) {
	g := &jobGroup{v2: c.v2, dirs: map[string]string{}}
	write := func(dir, file, val string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: %v", file, err)
		}
		return nil
	}
	if c.v2 {
		dir := filepath.Join(c.root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %v", err)
		}
		g.dirs[""] = dir
		var err error
		if lim.MemoryBytes > 0 {
			err = errors.Join(err, write(dir, "memory.max", strconv.FormatInt(lim.MemoryBytes, 10)), write(dir, "memory.swap.max", "0"))
		}
		if lim.Pids > 0 {
			err = errors.Join(err, write(dir, "pids.max", strconv.Itoa(lim.Pids)))
		}
		if lim.CPUMillis > 0 {
			err = errors.Join(err, write(dir, "cpu.max", fmt.Sprintf("%d 100000", lim.CPUMillis*100)))
		}
		if lim.CPUWeight > 0 {
			err = errors.Join(err, write(dir, "cpu.weight", strconv.Itoa(min(lim.CPUWeight, 10000))))
		}
		if err != nil {
			g.remove()
			return nil, err
		}
		return g, nil
	}
	for ctl, root := range c.roots {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("cgroup: %v", err)
		}
		g.dirs[ctl] = dir
	}
	var err error
	if lim.MemoryBytes > 0 {
		v := strconv.FormatInt(lim.MemoryBytes, 10)
		err = errors.Join(err, write(g.dirs["memory"], "memory.limit_in_bytes", v))
		// With swap accounting, memory+swap too: a job cannot page its way past the limit.
		if _, serr := os.Stat(filepath.Join(g.dirs["memory"], "memory.memsw.limit_in_bytes")); serr == nil {
			err = errors.Join(err, write(g.dirs["memory"], "memory.memsw.limit_in_bytes", v))
		}
	}
	if lim.Pids > 0 {
		err = errors.Join(err, write(g.dirs["pids"], "pids.max", strconv.Itoa(lim.Pids)))
	}
	if lim.CPUMillis > 0 {
		err = errors.Join(err, write(g.dirs["cpu"], "cpu.cfs_period_us", "100000"), write(g.dirs["cpu"], "cpu.cfs_quota_us", strconv.Itoa(lim.CPUMillis*100)))
	}
	if lim.CPUWeight > 0 {
		err = errors.Join(err, write(g.dirs["cpu"], "cpu.shares", strconv.Itoa(min(lim.CPUWeight, 10000)*1024/100)))
	}
	if err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

// directories are the cgroup's directories (one per controller in v1).
func (g *jobGroup) directories() []string {
	out := make([]string, 0, len(g.dirs))
	for _, d := range g.dirs {
		out = append(out, d)
	}
	return out
}

// procsFiles are the cgroup.procs files a process writes its pid into to join.
func (g *jobGroup) procsFiles() []string {
	var out []string
	for _, d := range g.dirs {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// eventsFiles change when a limit is hit (watched to stop the job at once).
func (g *jobGroup) eventsFiles() []string {
	if g.v2 {
		return []string{filepath.Join(g.dirs[""], "memory.events"), filepath.Join(g.dirs[""], "pids.events")}
	}
	return []string{filepath.Join(g.dirs["pids"], "pids.events"), filepath.Join(g.dirs["memory"], "memory.oom_control")}
}

// reason says which limit the job went over, if any.
func (g *jobGroup) reason() string {
	memDir, pidsDir := g.dirs["memory"], g.dirs["pids"]
	memFile, memKey := "memory.oom_control", "oom_kill"
	if g.v2 {
		memDir, pidsDir = g.dirs[""], g.dirs[""]
		memFile = "memory.events"
	}
	if readKey(filepath.Join(memDir, memFile), memKey) > 0 {
		return ReasonMemory
	}
	if readKey(filepath.Join(pidsDir, "pids.events"), "max") > 0 {
		return ReasonPids
	}
	return ""
}

// readKey reads "<key> <n>" from a flat-keyed cgroup file (0 when absent).
func readKey(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// kill ends every process left in the cgroup (SIGKILL), until it is empty or the
// deadline passes.
func (g *jobGroup) kill(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond // processes of a torn-down PID namespace are gone within ms
	for {
		pids := g.pids()
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(wait)
		wait = min(2*wait, 20*time.Millisecond)
	}
}

func (g *jobGroup) pids() []int {
	seen := map[int]bool{}
	var out []int
	for _, f := range g.procsFiles() {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Fields(string(b)) {
			// A process outside this PID namespace shows as 0 in cgroup v2 (v1 leaves it
			// out): never a pid to signal (kill(0) is this process's own group).
			if p, err := strconv.Atoi(l); err == nil && p > 0 && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// remove deletes the job's cgroup (empty by then); false when a directory stayed.
func (g *jobGroup) remove() bool {
	ok := true
	for _, d := range g.dirs {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			ok = false
		}
	}
	return ok
}
