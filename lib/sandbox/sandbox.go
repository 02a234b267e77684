// Package sandbox runs a job's process in bubblewrap (bwrap, the sandbox Flatpak
// uses): its own user, PID, mount, IPC, UTS and network namespaces, a session of its
// own, dying with the runner (guard.go), a /proc of its own processes, the system's
// read-only directories it needs and a filesystem of its own that holds its work
// directory (files.go) — nothing else of the host: no service's secrets,
// certificates, configuration or state, no other job's files, no network. Resource
// limits go to a cgroup of the job's own (memory, processes, CPU) where this process
// may make cgroups, to rlimits (file size; address space and processes without
// cgroups), and to the size of its filesystem (disk). docs/security.md lists what it
// guarantees.
//
// A job waits at its gate, before anything of it is made, until the runner's guard
// knows it and it is in the job's cgroup with its rlimits, so that no process of the
// job ever runs outside its limits, nor after the runner is gone. With bwrap, bwrap
// itself is the job's first process, started as the job's user with its parent-death
// signal (the runner's fork does both): its gate is its options, which it reads from
// a pipe (--args) before it makes anything, and which the runner writes once it has
// put the process in its cgroup and set its rlimits. Without a sandbox the job starts
// through a trampoline, a shell started likewise as the job's user with its
// parent-death signal: it waits at its gate while the runner puts it in the job's
// cgroup, then sets the rlimits and executes the job.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
)

// Modes of Options.Mode.
const (
	ModeBwrap = "bwrap"
	ModeNone  = "none"
)

// Limits bound one job. Zero: no limit of that kind.
type Limits struct {
	MemoryBytes   int64
	Pids          int
	CPUMillis     int // thousandths of a CPU (cgroup CPU quota)
	FileSizeBytes int64
	DiskBytes     int64  // the job's own filesystem: its work directory and /tmp
	Network       string // model.NetworkNone ("" too) or model.NetworkOutbound
	// CPUWeight is the cgroup's share of the CPU against its siblings (the other jobs'
	// cgroups, each 100) when the CPU is contended: cgroup v2 cpu.weight (1-10000), v1
	// cpu.shares (weight × 10.24). 0: the default, 100. An executor pool's (the runner):
	// its start and its calls are not starved by the jobs running beside it.
	CPUWeight int
}

// String names the limits for the audit log (model.JobLimits' form).
func (l Limits) String() string { return l.jobLimits().String() }

// Options configure the sandbox.
type Options struct {
	Mode  string // ModeBwrap (default) or ModeNone (explicitly no sandbox)
	Bwrap string // the bwrap binary (default: bwrap on PATH)
	// UID and GID run jobs as this user outside their namespaces when the runner is
	// root (0: the runner's own). Use an id no service uses.
	UID, GID int
	// CgroupBase is the cgroup mount (default /sys/fs/cgroup); CgroupParent the
	// cgroup under which each job gets its own (default hero-jobs);
	// ExecutorCgroupParent the one under which each executor pool (Extra.Executor)
	// gets its own (default hero-executors): beside the jobs' parent, not in it, so
	// that the jobs, however many, weigh one share of the CPU against the pools', and
	// the pools' start and calls are not starved by them.
	CgroupBase, CgroupParent, ExecutorCgroupParent string
	// OwnersDir holds the runners' lock files that say which job cgroups belong to a
	// live runner (default: one per host and user, ownersDir's). A runner judges only
	// cgroups whose lock file it finds there: tests give one of their own, so that a
	// runner another test starts on the host meanwhile leaves their cgroups alone.
	OwnersDir string
	// ReadOnly are the host paths a job sees read-only (default DefaultReadOnly).
	ReadOnly []string
	// Binds are host directories every job may read and write (none by default).
	Binds []string
	// NetDeny are the ranges a job with outbound network cannot reach, and
	// NetDenyHost adds the host's own addresses (ParseDeny). NeedNetwork makes New
	// fail when outbound network cannot be had (the runner's default is outbound).
	NetDeny     []netip.Prefix
	NetDenyHost bool
	NeedNetwork bool
	// Pause, when set, is called at the steps of a job's launch: "spawned" (its
	// process started, waiting at its gate) and "gated" (the guard knows it; through
	// its gate), with its process (its group); "network" (its sandbox made, held until
	// its network is set up), with the sandbox's first process. Tests stop the runner
	// there to kill it.
	Pause func(step string, pid int)
	// Ahead: sandboxes made ahead of need (ahead.go; Max 0: none).
	Ahead AheadOptions
	// Fork: the sandboxes made ahead are forking ones (zygote.go), each serving one
	// job after another, with Zygote the hero-zygote program (default: FindZygote's);
	// without one each serves one job.
	Fork   bool
	Zygote string
}

// DefaultReadOnly are the host paths a job sees (read-only): programs and
// libraries, and the few /etc files they read. Never a service's files.
var DefaultReadOnly = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/ssl/certs", "/etc/ca-certificates", "/etc/localtime", "/etc/nsswitch.conf",
	"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/mime.types", "/etc/python3", "/etc/python3.11",
}

// Sandbox makes job commands.
type Sandbox struct {
	opt   Options
	sh    string   // the wrapper's shell, and without a sandbox the trampoline's
	cg    *cgroups // nil: no cgroups (rlimits only)
	ecg   *cgroups // executor pools' (nil: cg's)
	own   *owner   // names its job cgroups and proves it alive (cgroup.go); with cg
	guard *guard   // kills the jobs' process groups when the runner is gone
	net   netTools // outbound network's programs (net.err: why there is none)
	ahead *ahead   // sandboxes made ahead of need (nil: none)
	// noFork says why Options.Fork is not had ("": it is, or was not asked for).
	noFork string
	seq    atomic.Uint64
}

// New checks that the sandbox works here (a trial run of bwrap) and finds the
// cgroups it may use.
func New(ctx context.Context, opt Options) (*Sandbox, error) {
	if opt.Mode == "" {
		opt.Mode = ModeBwrap
	}
	if opt.CgroupParent == "" {
		opt.CgroupParent = "hero-jobs"
	}
	if opt.ExecutorCgroupParent == "" {
		opt.ExecutorCgroupParent = "hero-executors"
	}
	if opt.ReadOnly == nil {
		opt.ReadOnly = DefaultReadOnly
	}
	s := &Sandbox{opt: opt}
	var err error
	if s.sh, err = exec.LookPath("sh"); err != nil {
		return nil, errors.New("sandbox: no shell (sh) on PATH: jobs start through one")
	}
	made := false
	defer func() {
		if !made && s.own != nil {
			s.own.release()
		}
	}()
	s.detectCgroups()
	if opt.Mode == ModeBwrap {
		s.net = findNetTools()
		if opt.NeedNetwork && s.net.err != nil {
			return nil, fmt.Errorf("sandbox: --job-network outbound: %v", s.net.err)
		}
	}
	switch opt.Mode {
	case ModeNone:
	case ModeBwrap:
		if s.opt.Bwrap == "" {
			if s.opt.Bwrap, err = exec.LookPath("bwrap"); err != nil {
				return nil, errors.New("sandbox: bwrap (bubblewrap) is not installed: apt-get install bubblewrap, or run with --sandbox=none")
			}
		}
	default:
		return nil, fmt.Errorf("sandbox mode %q: want bwrap or none", opt.Mode)
	}
	if s.guard, err = newGuard(s.sh); err != nil {
		return nil, fmt.Errorf("sandbox: %v", err)
	}
	if opt.Mode == ModeBwrap {
		if err := s.trial(ctx); err != nil {
			s.Close()
			return nil, fmt.Errorf("sandbox: bwrap cannot make a sandbox here (%v); in a container it needs namespaces allowed by seccomp and an unmasked /proc (docs/security.md), or run with --sandbox=none", err)
		}
		s.findZygote()
		if opt.Ahead.Max > 0 {
			s.ahead = newAhead(s, opt.Ahead)
		}
	}
	made = true
	return s, nil
}

// detectCgroups finds the cgroups of jobs and of executor pools this process may
// make, and ends what a killed runner left in them.
func (s *Sandbox) detectCgroups() {
	opt := s.opt
	if os.Geteuid() != 0 && !writable(filepath.Join(defaultString(opt.CgroupBase, "/sys/fs/cgroup"), "cgroup.procs")) {
		return
	}
	if s.cg = detectCgroups(opt.CgroupBase, opt.CgroupParent); s.cg == nil {
		return
	}
	s.own = newOwner(defaultString(opt.OwnersDir, ownersDir()))
	if opt.ExecutorCgroupParent != opt.CgroupParent {
		s.ecg = detectCgroups(opt.CgroupBase, opt.ExecutorCgroupParent)
	}
	if s.ecg != nil {
		reapOrphans(s.own, s.cg, s.ecg) // what a killed runner left in its job and pool cgroups
	} else {
		reapOrphans(s.own, s.cg) // what a killed runner left in its job cgroups
	}
}

// Close ends the guard (lib/sandbox/guard.go) once no job runs: it kills what is left.
func (s *Sandbox) Close() {
	if s.ahead != nil {
		s.ahead.close()
	}
	if s.guard != nil {
		s.guard.close()
	}
	if s.own != nil {
		s.own.release()
	}
}

// trial runs a job as every job runs — in its own filesystem, under its wrapper,
// leaving a result file — and checks what it did and what the runner got.
func (s *Sandbox) trial(ctx context.Context) error {
	dir, remove, err := s.WorkDir("", "hero-sandbox-check-")
	if err != nil {
		return err
	}
	defer remove()
	j, err := s.PrepareWith(dir, []string{"/bin/sh", "-c", `test "$(cat /proc/1/comm)" != systemd && echo ok > result && echo ok`},
		Limits{DiskBytes: 1 << 20}, Extra{Result: "result", ResultMax: 16})
	if err != nil {
		return err
	}
	defer j.Cleanup()
	j.trial = true
	cmd := exec.CommandContext(ctx, j.Argv[0], j.Argv[1:]...)
	var out bytes.Buffer
	cmd.Env, cmd.Stdout, cmd.Stderr = []string{"PATH=/usr/bin:/bin"}, &out, &out
	waited, err := j.Launch(cmd)
	if err != nil {
		return err
	}
	err = cmd.Wait()
	waited()
	if res := j.Result(); err != nil || strings.TrimSpace(out.String()) != "ok" || string(res.Data) != "ok\n" {
		return fmt.Errorf("%v: %s (result %q %s)", err, strings.TrimSpace(out.String()), res.Data, res.Problem)
	}
	return nil
}

func defaultString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func writable(path string) bool {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// Mode is the sandbox's mode.
func (s *Sandbox) Mode() string { return s.opt.Mode }

// Describe says how jobs run, for the start-up log and /readyz.
func (s *Sandbox) Describe() string {
	d := "sandbox " + s.opt.Mode
	if s.cg != nil {
		d += "; limits by " + s.cg.String()
	} else {
		d += "; limits by rlimits (no cgroup may be made here)"
	}
	if s.opt.UID != 0 && os.Geteuid() == 0 {
		d += fmt.Sprintf("; jobs run as uid %d", s.opt.UID)
	}
	switch {
	case s.opt.Zygote != "" && s.opt.Ahead.Max > 0:
		d += "; jobs forked by forking sandboxes made ahead (" + s.opt.Zygote + ")"
	case s.noFork != "":
		d += "; " + s.noFork
	}
	return d
}

// credential runs the job as the configured uid when the runner is root.
func (s *Sandbox) credential() *syscall.SysProcAttr {
	if s.opt.UID == 0 || os.Geteuid() != 0 {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(s.opt.UID), Gid: uint32(s.opt.GID), NoSetGroups: true}}
}

// chownForJob gives a job's work directory to the job's uid (0700).
func (s *Sandbox) chownForJob(dir string) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if s.opt.UID == 0 || os.Geteuid() != 0 {
		return nil
	}
	return os.Chown(dir, s.opt.UID, s.opt.GID)
}

// Extra widens one sandbox, or says more about its job.
type Extra struct {
	// ReadOnly are more host paths it sees read-only (an executor's program);
	// ShareNet gives it the host's network (an executor that listens on TCP must be
	// reachable).
	ReadOnly []string
	ShareNet bool
	// HostDir: the work directory given to PrepareWith is a host directory, bound
	// into the sandbox (an executor pool's, whose sockets the runner reaches), not
	// one of the job's own filesystem (WorkDir).
	HostDir bool
	// Executor: an executor pool's sandbox, whose cgroup is made under
	// Options.ExecutorCgroupParent (the jobs' parent where that cannot be made).
	Executor bool
	// Result names a file of the work directory that the runner takes after the job
	// (Job.Result), and ResultMax the most bytes of it.
	Result    string
	ResultMax int64
	outbound  bool // the job's own network namespace served by slirp4netns (network.go)
	// ahead: a sandbox made ahead of its job (ahead.go): its command, work directory
	// and result file come later, on its spec's descriptor.
	ahead bool
	// zygote: made ahead, a forking sandbox (zygote.go): hero-zygote is its first
	// process, with CAP_SYS_ADMIN in its user namespace (to make each job's).
	zygote bool
}

// WorkDir names a new work directory for one job, pattern its name: with a sandbox,
// a directory of the job's own filesystem (the sandbox makes it; nothing is made on
// the host); without one, a new directory under parent on the host. remove undoes
// what was made.
func (s *Sandbox) WorkDir(parent, pattern string) (dir string, remove func(), err error) {
	if s.opt.Mode == ModeBwrap {
		return workDirIn(pattern), func() {}, nil
	}
	if dir, err = os.MkdirTemp(parent, pattern); err != nil {
		return "", nil, err
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// bwrapArgs is the bwrap command line for argv run in workDir: the job's own
// filesystem (jobFS, of lim's DiskBytes) with workDir in it and the rest of its root
// read-only, or (x.HostDir) the host's workDir bound and writable tmpfs mounts. gated
// are the options bwrap reads at its gate (--args), command the rest of its command
// line: --hostname, which bwrap refuses without the gate's --unshare-uts (a gate that
// closes empty — the runner gone — makes nothing), then argv.
func (s *Sandbox) bwrapArgs(workDir string, argv []string, x Extra, lim Limits) (gated, command []string) {
	net := "--unshare-net"
	if x.ShareNet {
		net = "--share-net"
	}
	a := []string{
		// --disable-userns: a job cannot make user namespaces of its own (a kernel
		// surface it has no use for).
		"--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts", net, "--unshare-cgroup-try",
		// No --new-session: the job's processes stay in its process group (the guard
		// kills it), a session of its own without a terminal (Launch).
		"--die-with-parent", "--proc", "/proc", "--dev", "/dev",
	}
	if x.HostDir {
		a = append(a, "--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", "/var/tmp")
	} else {
		a = append(a, sizeArgs(lim.DiskBytes, "--tmpfs", jobFS)...)
		a = append(a, sizeArgs(min(lim.DiskBytes, shmMax), "--tmpfs", "/dev/shm")...)
		a = append(a, "--symlink", jobFS, "/var/tmp", "--symlink", jobFS, "/run")
	}
	if os.Geteuid() == 0 && s.opt.UID == 0 {
		a = append(a, "--cap-drop", "ALL")
	}
	if x.zygote {
		// The zygote's capabilities, in the sandbox's user namespace: to make each
		// job's namespaces and mounts (CAP_SYS_ADMIN), and to drop every capability
		// from the job's bounding set (CAP_SETPCAP); each job's process drops both
		// (zygote.c).
		a = append(a, "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP", "--ro-bind", s.opt.Zygote, zygotePath)
	}
	a = append(a, s.readOnlyArgs(x.ReadOnly)...)
	for _, b := range s.opt.Binds {
		a = append(a, "--bind", b, b)
	}
	if x.outbound {
		// fd 3 and 4 are the first of the job's files (Launch).
		a = append(a, "--ro-bind", s.net.resolv, "/etc/resolv.conf", "--info-fd", "3", "--block-fd", "4")
	}
	switch {
	case x.HostDir:
		a = append(a, "--bind", workDir, workDir, "--chdir", workDir)
	case x.ahead:
		// The work directory (JobDir's) is made now, for the job to come: it starts
		// there without a program run to make it (the wrapper makes another name).
		a = append(a, "--perms", "0700", "--dir", workDir, "--chdir", jobFS, "--remount-ro", "/dev", "--remount-ro", "/", "--as-pid-1")
	default:
		// The wrapper is the job's PID 1 (--as-pid-1): no process of the job can
		// signal it. Its root and /dev are read-only: the job writes its own
		// filesystem (and /dev/shm) only.
		a = append(a, "--perms", "0700", "--dir", workDir, "--chdir", workDir, "--remount-ro", "/dev", "--remount-ro", "/", "--as-pid-1")
	}
	return a, append([]string{"--hostname", "hero-job", "--"}, argv...)
}

// sizeArgs is a bwrap mount (mount, dest) of size bytes; 0: the job's filesystem
// without a bound (the kernel's default, half the memory), /dev/shm of shmMax.
func sizeArgs(size int64, mount, dest string) []string {
	switch {
	case size > 0:
	case dest == jobFS:
		return []string{mount, dest}
	default:
		size = shmMax
	}
	return []string{"--size", strconv.FormatInt(size, 10), mount, dest}
}

// readOnlyArgs shows the read-only paths (the sandbox's and more) as they are on the
// host: a symbolic link as a link, anything else bound read-only.
func (s *Sandbox) readOnlyArgs(more []string) []string {
	var a []string
	for _, p := range append(append([]string(nil), s.opt.ReadOnly...), more...) {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				a = append(a, "--symlink", t, p)
			}
		default:
			a = append(a, "--ro-bind", p, p)
		}
	}
	return a
}

// Job is one sandboxed job: the command that starts it (Launch), and what it needs
// afterwards. A job with a host work directory (an executor pool) may start several
// processes of the same command.
type Job struct {
	Argv    []string
	workDir string
	private bool    // the work directory is of the job's own filesystem
	ahead   bool    // made ahead of its job: its spec comes on a descriptor of its own
	trial   bool    // New's trial job (no Options.Pause)
	result  *Extra  // the result file to take (nil: none)
	report  *report // the wrapper's report (a private job's, once launched)
	group   *jobGroup
	net     *jobNet
	s       *Sandbox
	fork    *forkJob // a job a forking sandbox forked (zygote.go)
	// direct: bwrap is the job's first process (no trampoline); the runner lets it
	// through its gate by writing gate, its options (bwrap --args); its rlimits are set
	// in the sandbox (ulimits).
	direct  bool
	rlimits []rlimit
	gate    []byte
}

// Prepare makes the job's cgroup and the command that runs argv in the sandbox with
// lim, in workDir (WorkDir's). Cleanup must follow the job's end.
func (s *Sandbox) Prepare(workDir string, argv []string, lim Limits) (*Job, error) {
	return s.PrepareWith(workDir, argv, lim, Extra{})
}

// PrepareWith is Prepare with a wider sandbox, or a result file to take.
//
// With bwrap the command is bwrap itself, started as the job's user: it waits at its
// gate for its options (--args, Launch), the runner having put it in its cgroup
// (Job.join), then makes the sandbox, where the wrapper (files.go) sets the rlimits
// and runs the job's command. Without a sandbox it is the trampoline, a shell script
// started as the job's user likewise: wait at the gate (the runner having put it in
// its cgroup), set the rlimits, execute the job's command. What the scripts
// interpolate is the runner's own (numbers, descriptors); the job's command comes as
// arguments.
func (s *Sandbox) PrepareWith(workDir string, argv []string, lim Limits, x Extra) (*Job, error) {
	j := &Job{s: s, workDir: workDir, private: s.opt.Mode == ModeBwrap && !x.HostDir, ahead: x.ahead}
	if j.ahead && (!j.private || lim.Network == model.NetworkOutbound) {
		return nil, errors.New("sandbox: only a job of its own filesystem without network is made ahead")
	}
	if j.ahead {
		// its work directory comes with its spec
	} else if j.private {
		if path.Dir(workDir) != jobFS {
			return nil, fmt.Errorf("sandbox: work directory %q is not one of the job's own filesystem (WorkDir)", workDir)
		}
	} else if err := s.chownForJob(workDir); err != nil {
		return nil, fmt.Errorf("sandbox: work directory: %v", err)
	}
	if x.Result != "" {
		j.result = &Extra{Result: x.Result, ResultMax: x.ResultMax}
	}
	if lim.Network == model.NetworkOutbound && s.opt.Mode == ModeBwrap && !x.ShareNet {
		if s.net.err != nil {
			return nil, s.net.err
		}
		n, err := newJobNet()
		if err != nil {
			return nil, fmt.Errorf("sandbox: network: %v", err)
		}
		j.net, x.outbound = n, true
	}
	j.direct = s.opt.Mode == ModeBwrap
	if err := s.makeGroup(j, lim, x.Executor); err != nil {
		j.Cleanup()
		return nil, err
	}
	j.rlimits = rlimits(lim, j.group != nil)
	if j.direct {
		// The rlimits are set in the sandbox, by its first process (as the job's user,
		// which may lower them): the runner may not set another user's.
		ul := ulimits(j.rlimits)
		switch {
		case x.zygote:
			argv = append([]string{zygotePath, strconv.Itoa(j.reportFD()), strconv.Itoa(j.specFD())}, s.zygoteArgs(lim.DiskBytes)...)
		case j.ahead:
			argv = aheadWrapper(s.sh, j.reportFD(), j.specFD(), ul)
		case j.private:
			argv = append(wrapper(s.sh, j.reportFD(), x.Result, x.ResultMax, ul), argv...)
		case ul != "":
			argv = append([]string{s.sh, "-c", ul + `exec "$@"`, "hero-limits"}, argv...)
		}
		gated, command := s.bwrapArgs(workDir, argv, x, lim)
		j.gate = []byte(strings.Join(gated, "\x00") + "\x00")
		j.Argv = append([]string{s.opt.Bwrap, "--args", strconv.Itoa(j.gateFD())}, command...)
		return j, nil
	}
	j.Argv = s.trampoline(j, argv)
	return j, nil
}

// trampoline is the command that runs argv without a sandbox: a shell, started as the
// job's user with its parent-death signal (Launch), that waits at the job's gate while
// the runner puts it in its cgroup, sets its rlimits and executes argv — one program
// before the job's (a shell, then util-linux's setpriv to become the job's user and
// restore the parent-death signal, before: each program started costs milliseconds of
// CPU on a small VM).
func (s *Sandbox) trampoline(j *Job, argv []string) []string {
	// First the gate: nothing happens until the guard knows the job (Launch).
	script := []string{fmt.Sprintf("read -r _ <&%d", j.gateFD())}
	for _, l := range j.rlimits {
		script = append(script, fmt.Sprintf("ulimit -%c %d", l.flag, l.n))
	}
	script = append(script, fmt.Sprintf(`exec "$@" %d<&-`, j.gateFD()))
	return append([]string{s.sh, "-c", strings.Join(script, " && "), "hero-sandbox"}, argv...)
}

// rlimit is one resource limit of a job, as the shell's ulimit -<flag> n sets it (soft
// and hard).
type rlimit struct {
	flag byte
	n    int64
}

// ulimits is the shell command that sets rls, ending the shell when one cannot be set
// ("" for none).
func ulimits(rls []rlimit) string {
	if len(rls) == 0 {
		return ""
	}
	var b strings.Builder
	for i, l := range rls {
		if i > 0 {
			b.WriteString(" && ")
		}
		fmt.Fprintf(&b, "ulimit -%c %d", l.flag, l.n)
	}
	b.WriteString(" || exit 1\n")
	return b.String()
}

// groupFor is the cgroups a job of lim gets one of (nil: none, rlimits instead): under
// the executors' parent for an executor pool's sandbox (executor), else under the
// jobs'.
func (s *Sandbox) groupFor(lim Limits, executor bool) *cgroups {
	cg := s.cg
	if executor && s.ecg != nil {
		cg = s.ecg
	}
	if cg != nil && (lim.MemoryBytes > 0 || lim.Pids > 0 || lim.CPUMillis > 0 || lim.CPUWeight > 0) {
		return cg
	}
	return nil
}

// rlimits are the rlimits of a job of lim: its file size, and its memory (address
// space) and processes when it has no cgroup (group false).
func rlimits(lim Limits, group bool) []rlimit {
	var out []rlimit
	if !group {
		if lim.MemoryBytes > 0 {
			out = append(out, rlimit{'v', lim.MemoryBytes >> 10})
		}
		if lim.Pids > 0 {
			out = append(out, rlimit{'p', int64(lim.Pids)})
		}
	}
	if lim.FileSizeBytes > 0 {
		out = append(out, rlimit{'f', lim.FileSizeBytes / 512})
	}
	return out
}

// makeGroup makes the job's cgroup (j.group), if it gets one, and tells the guard.
func (s *Sandbox) makeGroup(j *Job, lim Limits, executor bool) error {
	cg := s.groupFor(lim, executor)
	if cg == nil {
		return nil
	}
	g, err := cg.create(s.own.cgroupName(s.seq.Add(1)), lim)
	if err != nil {
		return err
	}
	j.group = g
	s.guard.addDirs(g.directories())
	return nil
}

// The job's process gets files as fd 3 onwards, in this order: the network's (bwrap's
// --info-fd and --block-fd), the report's (a job of its own filesystem), the spec's (a
// sandbox made ahead of its job), the gate's.
func (j *Job) reportFD() int {
	if j.net != nil {
		return 5
	}
	return 3
}

func (j *Job) specFD() int { return j.reportFD() + 1 }

func (j *Job) gateFD() int {
	switch {
	case j.ahead:
		return j.specFD() + 1
	case j.private:
		return j.reportFD() + 1
	}
	return j.reportFD()
}

func shellQuote(v string) string { return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'" }

// ErrLaunch is the error of a launch that failed in the sandbox's own steps (its
// pipes, its guard), not in starting the command: errors.Is tells them apart.
var ErrLaunch = errors.New("sandbox: launch")

// Launch starts cmd, made of j.Argv (its environment and output the caller's): in a
// session and process group of its own, with the parent-death signal, given the job's
// files and its working directory on the host; for a job of its own filesystem it
// gathers the wrapper's report (Result, Reason). Once the guard knows the process's
// group, the job passes its gate. waited is to be called once cmd has been waited for.
// A job of a host directory (an executor pool's) may be launched more than once.
func (j *Job) Launch(cmd *exec.Cmd) (waited func(), err error) {
	if j.ahead {
		return nil, fmt.Errorf("%w: a sandbox made ahead of its job starts through Sandbox.Take", ErrLaunch)
	}
	return j.launch(cmd, nil)
}

// launch is Launch, giving a sandbox made ahead of its job its spec's descriptor.
func (j *Job) launch(cmd *exec.Cmd, spec *os.File) (waited func(), err error) {
	var files []*os.File
	if j.net != nil {
		files = append(files, j.net.files()...)
	}
	var rw *os.File
	if j.private {
		var rr *os.File
		if rr, rw, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("%w: report pipe: %v", ErrLaunch, err)
		}
		max := int64(0)
		if j.result != nil {
			max = j.result.ResultMax
		}
		j.report = &report{r: rr, max: max, done: make(chan struct{}), started: make(chan struct{})}
		files = append(files, rw)
		if spec != nil {
			files = append(files, spec)
		}
		cmd.Dir = "/" // the work directory is in the sandbox only
	}
	gateR, gateW, err := os.Pipe()
	if err != nil {
		closeAll(rw, j.reportReader())
		return nil, fmt.Errorf("%w: gate pipe: %v", ErrLaunch, err)
	}
	cmd.ExtraFiles = append(files, gateR)
	// Setsid: no terminal of the runner's reaches the job (bwrap's --new-session did
	// that before); Pdeathsig: the job's first process ends with the runner, at its
	// gate and after it (bwrap, the trampoline's shell and the job's program, of no
	// set-user-id, keep it). The first process is started as the job's user, its groups
	// cleared: Go's fork sets the parent-death signal after the change of user, which
	// would clear it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if c := j.s.credential(); c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.Credential.Uid, Gid: c.Credential.Gid, Groups: []uint32{}}
	}
	err = cmd.Start()
	closeAll(rw, gateR) // the job holds its own copies
	if err != nil {
		closeAll(gateW, j.reportReader())
		return nil, err
	}
	if j.report != nil {
		go j.report.read()
	}
	j.pause("spawned", cmd.Process.Pid)
	waited, err = j.pass(cmd, gateW)
	if err == nil {
		j.pause("gated", cmd.Process.Pid)
	}
	return waited, err
}

// pause calls Options.Pause (not for New's trial job).
func (j *Job) pause(step string, pid int) {
	if j.s.opt.Pause != nil && !j.trial {
		j.s.opt.Pause(step, pid)
	}
}

// pass lets a started job through its gate once the guard knows its process group;
// a job the guard cannot know is ended at its gate and waited for.
func (j *Job) pass(cmd *exec.Cmd, gate *os.File) (func(), error) {
	pid := cmd.Process.Pid
	err := j.join(pid)
	if err == nil {
		err = j.s.guard.add(pid)
	}
	if err != nil {
		_ = gate.Close() // the job reads the end of the file: it ends there
		_ = cmd.Wait()
		return nil, fmt.Errorf("%w: %v", ErrLaunch, err)
	}
	open := []byte("\n")
	if j.direct {
		open = j.gate
	}
	_, _ = gate.Write(open) // an error: the job is gone already (its exit status says how)
	_ = gate.Close()
	return func() { j.s.guard.remove(pid) }, nil
}

// join puts the job's first process (bwrap, or the trampoline), waiting at its gate,
// in the job's cgroup: the processes it starts from there are in it from their start.
func (j *Job) join(pid int) error {
	if j.group == nil {
		return nil
	}
	b := []byte(strconv.Itoa(pid))
	for _, f := range j.group.procsFiles() {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return fmt.Errorf("join the job's cgroup: %v", err)
		}
	}
	return nil
}

func (j *Job) reportReader() *os.File {
	if j.report == nil {
		return nil
	}
	r := j.report.r
	j.report = nil
	return r
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}

// Watch calls over with a limit's reason as soon as the job's cgroup says one was
// hit (the kernel's file notifications on its events files); it returns a stop func.
func (j *Job) Watch(over func(reason string)) func() {
	if j.group == nil {
		return func() {}
	}
	return watchFiles(j.group.eventsFiles(), func() {
		if r := j.group.reason(); r != "" {
			over(r)
		}
	})
}

// Reason says which limit the ended job went over ("" for none), from its cgroup's
// counters, its own filesystem (full when it ended), and from how it ended: the signal
// that ended it, or an exit code of 128+SIGXFSZ (a shell whose command was stopped by
// the file size limit). Its process must have been waited for.
func (j *Job) Reason(signal string, exitCode int) string {
	if j.group != nil {
		if r := j.group.reason(); r != "" {
			return r
		}
	}
	if full, _, _ := j.collect(); full {
		return ReasonDisk
	}
	if signal == syscall.SIGXFSZ.String() || exitCode == 128+int(syscall.SIGXFSZ) {
		return ReasonFileSize
	}
	return ""
}

// Result is what the runner takes of the job's result file (Extra.Result) once its
// process has been waited for: read in the sandbox by the job's own user, or (no
// sandbox of its own) on the host without following a link or opening what is not a
// regular file.
func (j *Job) Result() Result {
	if j.result == nil {
		return Result{}
	}
	if j.private {
		_, res, _ := j.collect()
		return res
	}
	uid := -1
	if c := j.s.credential(); c != nil {
		uid = int(c.Credential.Uid)
	}
	return ReadHostFile(filepath.Join(j.workDir, j.result.Result), uid, j.result.ResultMax)
}

// collect is the wrapper's report (full: the job's filesystem was full).
func (j *Job) collect() (full bool, res Result, ok bool) {
	if j.report == nil {
		return false, Result{}, false
	}
	return parseReport(j.report.wait(), j.report.max)
}

// Begun says when the job's own command began (ok false: not yet): its wrapper said
// so once its sandbox was made, its prologue done (a sandbox made ahead: its job
// handed to it), right before the command runs. Its time is counted from then — its
// timeout, its started_at_us — not from its launch: the making of its sandbox is not
// the job's. As the runner read it: a runner stopped meanwhile reads it late, never
// early. A job without a wrapper of its own (no sandbox of its own: Measured false)
// has no such moment.
func (j *Job) Begun() (at time.Time, ok bool) {
	if j.report == nil {
		return time.Time{}, false
	}
	return j.report.begun()
}

// Measured says whether the job has a wrapper that says when its command began
// (Begun): one of its own filesystem, once launched.
func (j *Job) Measured() bool { return j.report != nil }

// Started must be called once the job's process runs: a job with outbound network
// waits in bwrap until its network is set up here. An error leaves the job held (kill
// it).
func (j *Job) Started() error {
	if j.net == nil {
		return nil
	}
	ready := func(pid int) { j.pause("network", pid) }
	if err := j.net.start(j.s.net, j.s.opt.NetDeny, j.s.opt.NetDenyHost, ready); err != nil {
		return fmt.Errorf("sandbox: outbound network: %v", err)
	}
	return nil
}

// Contained says whether the job runs in a PID namespace of its own whose PID 1 is
// its wrapper (a job of its own filesystem): once that process has ended by itself,
// the kernel has ended every other process of the job (Cleanup then only removes what
// held them: its cgroup, its network).
func (j *Job) Contained() bool { return j.private }

// Cleanup kills whatever of the job is left, its network stack and its cgroup; a job
// of a forking sandbox gives the sandbox back (zygote.go).
func (j *Job) Cleanup() {
	if j.fork != nil {
		j.fork.release(j)
		return
	}
	if j.net != nil {
		j.net.close()
	}
	if j.group == nil {
		return
	}
	j.group.kill(5 * time.Second)
	j.group.remove()
	j.s.guard.removeDirs(j.group.directories())
}
