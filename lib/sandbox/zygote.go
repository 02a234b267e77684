package sandbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hero-coordinator/hero/lib/procrun"
)

// Forking sandboxes. A sandbox made by bwrap costs 12–15 ms of CPU on a small VM, and
// its wrapper shell another 3: most of a dependent step's time (docs/benchmarks.md).
// A forking sandbox is a sandbox made ahead of need (ahead.go) as any other — its
// cgroup, its user, its gate, the guard knowing its group, bwrap's namespaces, mounts
// and parent-death signal — whose first process is hero-zygote (zygote/zygote.c), a
// small program that holds CAP_SYS_ADMIN and CAP_SETPCAP in the sandbox's user
// namespace and nothing else. It serves one job at a time: for each it forks a
// process into fresh PID, mount, IPC and UTS namespaces with a fresh /tmp (the job's
// own filesystem, of its disk bound), /dev/shm and /proc — made before the job comes —,
// which forks the job's process: rlimits set, every
// capability dropped, no_new_privs, its command executed. When that process ends
// every other of its namespace is killed and reaped, the report written as the
// wrapper shell writes it (files.go), and the zygote answers the runner with the job's
// status; the namespace's end, after the answer, takes its tmpfs with it (the zygote
// waits for it before it makes the next job's namespace). Shared by the jobs one zygote
// serves: its user namespace and user id, its network namespace (no network), its
// read-only binds and cgroup (its limits: a job that went over one, was killed, or
// left a process in it, ends the zygote: a new one is made; so does the 256th job).
// docs/security.md, "The forking sandbox", says what each test shows.

// ZygoteName is the forking sandbox's program, found next to the runner's binary or
// on PATH (FindZygote).
const ZygoteName = "hero-zygote"

// zygotePath is where the zygote's program is in its sandbox.
const zygotePath = "/.hero-zygote"

// zygoteJobs bounds the jobs one zygote serves; then another is made.
const zygoteJobs = 256

// FindZygote finds hero-zygote: next to this process's binary, else on PATH.
func FindZygote() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), ZygoteName)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(ZygoteName)
	if err != nil {
		return "", fmt.Errorf("%s is not next to the runner's binary nor on PATH (make build puts it in bin/)", ZygoteName)
	}
	return filepath.Abs(p)
}

// findZygote settles Options.Fork: the zygote found and tried (a job run through it),
// else none (s.noFork says why: each job's sandbox is then made by bwrap).
func (s *Sandbox) findZygote() {
	if !s.opt.Fork || s.opt.Ahead.Max == 0 { // forking sandboxes are made ahead
		s.opt.Fork = false
		s.opt.Zygote = ""
		return
	}
	if s.opt.Zygote == "" {
		z, err := FindZygote()
		if err != nil {
			s.noFork = "no forking sandbox (" + err.Error() + "): each job's sandbox made by bwrap"
			return
		}
		s.opt.Zygote = z
	}
	if err := s.forkTrial(); err != nil {
		s.noFork = fmt.Sprintf("no forking sandbox (%s: %v): each job's sandbox made by bwrap", s.opt.Zygote, err)
		s.opt.Zygote = ""
	}
}

// NoFork says why --sandbox-fork (Options.Fork) was asked for and is not had ("": it
// is had, or was not asked for).
func (s *Sandbox) NoFork() string { return s.noFork }

// forkTrial runs one job through a forking sandbox, as New's trial does through bwrap.
func (s *Sandbox) forkTrial() error {
	p, err := s.prepareAhead(Limits{DiskBytes: 1 << 20}, time.Minute, true)
	if err != nil {
		return err
	}
	defer p.destroy()
	var out procrun.Capped
	out.Max = 4096
	proc, j, err := p.Hand(Handoff{Argv: []string{"/bin/sh", "-c", `test "$(cat /proc/1/comm)" != systemd && echo ok > result && echo ok`},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: workDirIn(JobDir), Result: "result", ResultMax: 16, Stdout: &out, Stderr: &out})
	if err != nil {
		return err
	}
	res := proc.Wait()
	r := j.Result()
	j.Cleanup()
	if res.ExitCode != 0 || strings.TrimSpace(out.String()) != "ok" || string(r.Data) != "ok\n" {
		return fmt.Errorf("trial job: exit %d %s: %s (result %q %s)", res.ExitCode, res.Signal, strings.TrimSpace(out.String()), r.Data, r.Problem)
	}
	return nil
}

// socketPair is a forking sandbox's control socket: its end, the runner's.
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: control socket: %v", ErrLaunch, err)
	}
	return os.NewFile(uintptr(fds[0]), "zygote-control"), os.NewFile(uintptr(fds[1]), "zygote-control"), nil
}

// zygote is the runner's side of a forking sandbox.
type zygote struct {
	conn    *net.UnixConn
	rd      *bufio.Reader
	mu      sync.Mutex
	taken   bool // handed to a job by ahead (back with returned)
	serving bool // running a job
	jobs    int
	// next are the next job's pipes (jobPipes), made before it comes: while the job
	// before it runs, or with the sandbox; nil: made at the handoff. closed: the
	// sandbox is destroyed (pipes made after are closed, not kept).
	next   []*os.File
	closed bool
}

// makeNext makes the next job's pipes unless they are made already or the sandbox is
// gone (an error: the handoff makes them, and says what failed).
func (z *zygote) makeNext() {
	z.mu.Lock()
	made := z.next != nil || z.closed
	z.mu.Unlock()
	if made {
		return
	}
	pipes, err := jobPipes()
	if err != nil {
		return
	}
	for _, i := range [...]int{0, 3, 5, 7} { // the job's ends (handFork)
		pipes[i].Fd() // blocking, as the job gets them: made so here, not at the handoff
	}
	z.mu.Lock()
	keep := z.next == nil && !z.closed
	if keep {
		z.next = pipes
	}
	z.mu.Unlock()
	if !keep {
		closeAll(pipes...)
	}
}

// takeNext takes the next job's pipes made ahead, else makes them.
func (z *zygote) takeNext() ([]*os.File, error) {
	z.mu.Lock()
	pipes := z.next
	z.next = nil
	z.mu.Unlock()
	if pipes != nil {
		return pipes, nil
	}
	return jobPipes()
}

// close closes the pipes made ahead; none is made after.
func (z *zygote) close() {
	z.mu.Lock()
	pipes := z.next
	z.next, z.closed = nil, true
	z.mu.Unlock()
	closeAll(pipes...)
}

// forking makes p a forking sandbox, its zygote ready, p.spec its control socket.
func (p *Prepared) forking() error {
	control := p.spec
	c, err := net.FileConn(control)
	_ = control.Close()
	if err != nil {
		p.destroy()
		return fmt.Errorf("%w: control socket: %v", ErrLaunch, err)
	}
	p.spec = nil // its copy is the connection's
	p.zy = &zygote{conn: c.(*net.UnixConn), rd: bufio.NewReader(c)}
	p.zy.makeNext() // the first job's pipes, with the sandbox
	return nil
}

func (z *zygote) setTaken(v bool) {
	z.mu.Lock()
	z.taken = v
	z.mu.Unlock()
}

func (z *zygote) isTaken() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.taken
}

// alive: the zygote waits for a job (its control socket has nothing to read: no end
// of file).
func (z *zygote) alive() bool {
	rc, err := z.conn.SyscallConn()
	if err != nil {
		return false
	}
	readable := true
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		readable = err != nil || n > 0
	})
	return !readable
}

// forkJob is a job a forking sandbox forked: how it ended, for its sandbox's reuse.
type forkJob struct {
	p     *Prepared
	proc  *procrun.Proc
	clean bool        // the zygote answered its end
	read  atomic.Bool // wait has read the zygote's answer (or found it gone)
}

// handFork sends the zygote its job: the spec and the job's descriptors (its standard
// input, output and error, its report), and returns the job's process as the runner
// sees it (its end: the zygote's answer; a kill: the sandbox's process group's, which
// ends the zygote too).
func (p *Prepared) handFork(h Handoff) (*procrun.Proc, *Job, error) {
	z := p.zy
	z.mu.Lock()
	busy := z.serving
	if !busy {
		z.serving = true
		z.jobs++
	}
	z.mu.Unlock()
	if busy {
		return nil, nil, fmt.Errorf("%w: the forking sandbox runs a job already", ErrLaunch)
	}
	fj := &forkJob{p: p}
	j := &Job{s: p.job.s, workDir: h.Dir, private: true, group: p.job.group, result: &Extra{Result: h.Result, ResultMax: h.ResultMax}, fork: fj}
	pipes, err := z.takeNext()
	if err != nil {
		j.Cleanup()
		return nil, nil, err
	}
	j.report = &report{r: pipes[6], max: h.ResultMax, done: make(chan struct{})}
	msg := forkMessage(forkSpec(h, p.job.rlimits))
	rights := unix.UnixRights(int(pipes[0].Fd()), int(pipes[3].Fd()), int(pipes[5].Fd()), int(pipes[7].Fd()))
	// One message, the descriptors with its first byte: the zygote's first read gets
	// the whole spec when it fits the socket's buffer, without a second wake-up.
	n, _, err := z.conn.WriteMsgUnix(msg, rights, nil)
	if err == nil && n < len(msg) {
		_, err = z.conn.Write(msg[n:])
	}
	closeAll(pipes[0], pipes[3], pipes[5], pipes[7]) // the job's ends: the zygote holds its own
	if err != nil {
		closeAll(pipes[1], pipes[2], pipes[4], pipes[6])
		j.Cleanup()
		return nil, nil, fmt.Errorf("%w: the forking sandbox is gone: %v", ErrLaunch, err)
	}
	go j.report.read()
	var copies sync.WaitGroup
	for _, c := range []struct {
		w io.Writer
		r *os.File
	}{{h.Stdout, pipes[2]}, {h.Stderr, pipes[4]}} {
		copies.Add(1)
		go func() {
			defer copies.Done()
			w := c.w
			if w == nil {
				w = io.Discard
			}
			_, _ = io.Copy(w, c.r)
			_ = c.r.Close()
		}()
	}
	go func() {
		_, _ = io.WriteString(pipes[1], h.Script) // an error: the job ended without reading it all
		_ = pipes[1].Close()
	}()
	end := func() procrun.Result {
		r := fj.wait(z)
		waitOrCut(&copies, reportWait, pipes[2], pipes[4])
		return r
	}
	fj.proc = procrun.Track(p.cmd.Process.Pid, end, func() bool { return fj.ended(z) }, nil, h.KillGrace)
	go z.makeNext() // the next job's pipes, while this one runs: off the next handoff
	return fj.proc, j, nil
}

// jobPipes are a forked job's pipes, each read end then write end: stdin, stdout,
// stderr, report.
func jobPipes() ([]*os.File, error) {
	var out []*os.File
	for i := 0; i < 4; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(out...)
			return nil, fmt.Errorf("%w: pipe: %v", ErrLaunch, err)
		}
		out = append(out, r, w)
	}
	return out, nil
}

// waitOrCut waits for the output's copies, at most d (then cuts their reads).
func waitOrCut(wg *sync.WaitGroup, d time.Duration, files ...*os.File) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		for _, f := range files {
			_ = f.SetReadDeadline(time.Now())
		}
		<-done
	}
}

// ended says whether the job has ended, without waiting: its answer read, or there to
// read on the control socket (the zygote answers once the job's namespace is gone, or
// closes the socket as it dies).
func (fj *forkJob) ended(z *zygote) bool {
	if fj.read.Load() {
		return true
	}
	rc, err := z.conn.SyscallConn()
	if err != nil {
		return false
	}
	there := false
	_ = rc.Control(func(fd uintptr) { there = readable(fd) })
	return there || fj.read.Load()
}

// readable: the descriptor has something to read, or its peer is gone (no wait).
func readable(fd uintptr) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0
}

// wait reads the zygote's answer, the job's end ("E <exit code> <signal>"); the
// zygote gone without one (killed): killed by SIGKILL.
func (fj *forkJob) wait(z *zygote) procrun.Result {
	r := procrun.Result{ExitCode: -1, Signal: syscall.SIGKILL.String()}
	// The answer is waited for without being read, and only then marked there, so
	// that ended never finds it neither on the socket nor marked: a runner stopped
	// while its job ended resumes with this wait and the job's timeout firing at
	// once, and a read that took the answer off the socket before marking it made
	// the timeout kill, and record as timed out, a job that had ended in time.
	if z.rd.Buffered() == 0 {
		if rc, err := z.conn.SyscallConn(); err == nil {
			_ = rc.Read(func(fd uintptr) bool { return readable(fd) })
		}
	}
	fj.read.Store(true)
	line, err := z.rd.ReadString('\n')
	if err != nil {
		return r
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "E" {
		r.Err = fmt.Errorf("forking sandbox: answer %q", strings.TrimSpace(line))
		return r
	}
	code, err1 := strconv.Atoi(f[1])
	sig, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		r.Err = fmt.Errorf("forking sandbox: answer %q", strings.TrimSpace(line))
		return r
	}
	fj.clean = true
	if sig > 0 {
		return procrun.Result{ExitCode: -1, Signal: syscall.Signal(sig).String()}
	}
	return procrun.Result{ExitCode: code}
}

// release gives the forking sandbox back after its job (Job.Cleanup): for the next
// job when the job left it sound — it ended by itself, its zygote answered, no limit
// was hit, nothing of it is left in the cgroup —, else it is destroyed.
func (fj *forkJob) release(j *Job) {
	p := fj.p
	z := p.zy
	reuse := fj.clean && fj.proc != nil && fj.proc.KillReason() == ""
	if reuse && j.group != nil {
		reuse = j.group.reason() == "" && onlyZygote(j.group.pids(), p.cmd.Process.Pid)
	}
	z.mu.Lock()
	reuse = reuse && z.jobs < zygoteJobs
	z.serving = false
	z.mu.Unlock()
	if p.key == nil {
		p.destroy() // not of the made-ahead pool (New's trial)
		return
	}
	p.key.a.returned(p, reuse)
}

// onlyZygote: of pids (a forking sandbox's cgroup's, bwrap's the first process) none
// is but bwrap, the zygote (its child) and the zygote's children (the next job's
// namespace's first process, made ahead): nothing of a job is left.
func onlyZygote(pids []int, bwrap int) bool {
	for _, pid := range pids {
		up := pid
		for depth := 0; up != bwrap; depth++ {
			if depth == 2 {
				return false
			}
			if up = parentOf(up); up == 0 {
				break // gone since the cgroup was read: nothing of it is left
			}
			if up == 1 {
				return false
			}
		}
	}
	return true
}

// parentOf is a process's parent (0: gone).
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// forkSpec is the job's spec as zygote.c reads it: NUL-terminated fields.
func forkSpec(h Handoff, rls []rlimit) []byte {
	f := []string{h.Dir, h.Result, strconv.FormatInt(h.ResultMax+1, 10), strconv.Itoa(len(rls))}
	for _, l := range rls {
		res, n := rlimitOf(l)
		f = append(f, strconv.Itoa(res), strconv.FormatInt(n, 10))
	}
	f = append(f, strconv.Itoa(len(h.Argv)))
	f = append(f, h.Argv...)
	var env []string
	for _, e := range h.Env {
		// As the wrapper's shell: a name no shell can hold is left out (the API
		// refuses such names).
		if k, _, _ := strings.Cut(e, "="); shellName(k) {
			env = append(env, e)
		}
	}
	f = append(f, strconv.Itoa(len(env)))
	f = append(f, env...)
	return []byte(strings.Join(f, "\x00") + "\x00")
}

// forkMessage is a spec as sent to the zygote: its length (4 bytes, little-endian),
// then the spec.
func forkMessage(spec []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(spec)), uint32(len(spec))), spec...)
}

// rlimitOf is the setrlimit resource and value of a ulimit flag and its count.
func rlimitOf(l rlimit) (int, int64) {
	switch l.flag {
	case 'f':
		return unix.RLIMIT_FSIZE, l.n * 512
	case 'v':
		return unix.RLIMIT_AS, l.n << 10
	}
	return unix.RLIMIT_NPROC, l.n
}

// BuildZygote compiles hero-zygote's source (zygote/zygote.c) into exe with gcc
// (static where the C library allows; tests and the e2e harness; make build and the
// Dockerfile run the same command).
func BuildZygote(src, exe string) error {
	tmp := exe + ".tmp"
	var out []byte
	var err error
	for _, static := range []bool{true, false} {
		args := []string{"-O2", "-Wall", "-o", tmp, src}
		if static {
			args = append([]string{"-static"}, args...)
		}
		if out, err = exec.Command("gcc", args...).CombinedOutput(); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("build %s: %v: %s", ZygoteName, err, out)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, exe)
}

// zygoteArgs are hero-zygote's arguments after its descriptors: its jobs' filesystem
// bound (0: the kernel's default), /dev/shm's, and the mounts in the job's filesystem.
func (s *Sandbox) zygoteArgs(disk int64) []string {
	shm := int64(shmMax)
	if disk > 0 {
		shm = min(disk, shmMax)
	}
	return append([]string{strconv.FormatInt(disk, 10), strconv.FormatInt(shm, 10)}, s.mountsInJobFS()...)
}

// mountsInJobFS are the sandbox's binds in the job's filesystem's place (/tmp), which
// the zygote binds again in each job's fresh one: shortest first (a bind within
// another comes after it).
func (s *Sandbox) mountsInJobFS() []string {
	var out []string
	for _, p := range append(append([]string(nil), s.opt.ReadOnly...), s.opt.Binds...) {
		if strings.HasPrefix(filepath.Clean(p), jobFS+"/") {
			out = append(out, filepath.Clean(p))
		}
	}
	sort.Slice(out, func(a, b int) bool { return len(out[a]) < len(out[b]) })
	return out
}
