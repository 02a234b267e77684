package sandbox

import (
	"bufio"
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

// reapOrphans ends what is left in the job cgroups of runners that are gone, then
// removes those cgroups. The guard (guard.go) kills a gone runner's jobs the moment
// it is gone; this is what is left should the guard have gone with it (both killed at
// once, by a stop of everything): bwrap's process that becomes the job's PID 1 has no
// parent-death signal while it sets the sandbox up. Every job joins its cgroup before
// anything of it starts, so what a gone runner left is found there, and ended before
// this runner takes back the gone runner's jobs (a job must not run twice at once).
func (c *cgroups) reapOrphans() {
	orphans := map[string]*jobGroup{} // name → its directories, one per controller in v1
	roots := map[string]string{"": c.root}
	if !c.v2 {
		roots = c.roots
	}
	for ctl, r := range roots {
		entries, _ := os.ReadDir(r)
		for _, e := range entries {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "job-") || ownerAlive(e.Name()) {
				continue
			}
			g := orphans[e.Name()]
			if g == nil {
				g = &jobGroup{v2: c.v2, dirs: map[string]string{}}
				orphans[e.Name()] = g
			}
			g.dirs[ctl] = filepath.Join(r, e.Name())
		}
	}
	for _, g := range orphans {
		g.kill(5 * time.Second)
		g.remove()
	}
}

// ownerAlive says whether the runner that made a job cgroup (job-<pid>-<n>) still
// runs: another runner on this host may have made it a moment ago, and its job is
// about to join it.
func ownerAlive(name string) bool {
	f := strings.SplitN(name, "-", 3)
	if len(f) != 3 {
		return false
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
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
			if p, err := strconv.Atoi(l); err == nil && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// remove deletes the job's cgroup (empty by then).
func (g *jobGroup) remove() {
	for _, d := range g.dirs {
		_ = os.Remove(d)
	}
}
