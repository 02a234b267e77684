// Package procrun runs a script under its interpreter as its own process group, so
// that a stop or a timeout kills the script and every child it spawned: SIGTERM to the
// group, SIGKILL after a grace period. The runner's jobs and the Hero Dispatcher worker
// both run scripts through it.
package procrun

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Spec says what to run.
type Spec struct {
	Argv      []string  // the interpreter and its arguments; the script comes on stdin
	Dir       string    // working directory
	Env       []string  // the whole environment (nothing is inherited)
	Stdin     io.Reader // the script
	Stdout    io.Writer
	Stderr    io.Writer
	KillGrace time.Duration // SIGTERM → SIGKILL (default 500 ms)
	// Credential runs the process as another user (the sandbox's job uid).
	Credential *syscall.Credential
	// ExtraFiles are open as fd 3 onwards in the process.
	ExtraFiles []*os.File
	// Launch starts the prepared command in place of its Start (a sandbox's, which
	// gives it its files; lib/sandbox Job.Launch); waited is called once the process
	// has been waited for.
	Launch func(cmd *exec.Cmd) (waited func(), err error)
}

// Proc is a running process group.
type Proc struct {
	cmd    *exec.Cmd
	pid    int
	end    func() Result // Track's: the end of a process this one did not start
	ended  func() bool   // Track's: whether that process has ended, end not yet returned
	group  Group         // its process group, told from a later one of the same id
	waited func()
	grace  time.Duration
	mu     sync.Mutex
	reason string
	done   chan struct{}
	res    Result
	// pidfd refers to the process (-1: none, or closed once it was waited for): it
	// tells whether the process has ended before this process has collected it.
	pidfd int
}

// Result is how the process ended.
type Result struct {
	ExitCode int    // -1 when killed by a signal or never started
	Signal   string // the signal that killed it, if any
	Killed   string // the reason given to Kill, if it was killed
	Err      error  // a wait error other than a non-zero exit
}

// Start starts the process in its own process group. The process gets SIGKILL if the
// calling process dies (Linux parent-death signal).
func Start(s Spec) (*Proc, error) {
	if len(s.Argv) == 0 {
		return nil, errors.New("procrun: no command")
	}
	cmd := exec.Command(s.Argv[0], s.Argv[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = s.Dir, s.Env, s.Stdin, s.Stdout, s.Stderr
	cmd.ExtraFiles = s.ExtraFiles
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.Credential}
	cmd.WaitDelay = 2 * time.Second // children holding the pipes do not hold the job
	waited := func() {}
	var err error
	if s.Launch != nil {
		waited, err = s.Launch(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return nil, err
	}
	return Adopt(cmd, waited, s.KillGrace), nil
}

// Adopt makes a Proc of a command started elsewhere (a sandbox made ahead of its job:
// lib/sandbox Prepared.Hand), its own process group, not waited for yet; waited is
// called once it has been (nil: nothing).
func Adopt(cmd *exec.Cmd, waited func(), grace time.Duration) *Proc {
	if waited == nil {
		waited = func() {}
	}
	p := &Proc{cmd: cmd, pid: cmd.Process.Pid, group: GroupOf(cmd.Process.Pid), waited: waited, grace: grace, done: make(chan struct{}), pidfd: -1}
	// Opened before the wait below can reap the process: it names this child.
	if fd, err := unix.PidfdOpen(cmd.Process.Pid, 0); err == nil {
		p.pidfd = fd
	}
	if p.grace <= 0 {
		p.grace = 500 * time.Millisecond
	}
	go p.wait()
	return p
}

// Track makes a Proc of a process that is not this one's child (a job a forking
// sandbox started: lib/sandbox's zygote), in process group group, which Kill signals;
// end blocks until the process has ended and says how (its Killed is Kill's). waited
// is called once end has returned (nil: nothing). Exited is true once end returned, or
// once ended (nil: none) says the process has ended without waiting — its end is
// there to read, though this process, stopped or starved, has not read it yet (as a
// child's pidfd says: a timeout that fires late must not kill a job that ended in time).
func Track(group int, end func() Result, ended func() bool, waited func(), grace time.Duration) *Proc {
	if waited == nil {
		waited = func() {}
	}
	if grace <= 0 {
		grace = 500 * time.Millisecond
	}
	p := &Proc{pid: group, end: end, ended: ended, group: GroupOf(group), waited: waited, grace: grace, done: make(chan struct{}), pidfd: -1}
	go p.wait()
	return p
}

func (p *Proc) wait() {
	if p.end != nil {
		r := p.end()
		p.waited()
		p.mu.Lock()
		r.Killed = p.reason
		p.res = r
		close(p.done)
		p.mu.Unlock()
		return
	}
	err := p.cmd.Wait()
	p.waited()
	r := Result{ExitCode: -1}
	if st := p.cmd.ProcessState; st != nil {
		r.ExitCode = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Signal = ws.Signal().String()
		}
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		r.Err = err
	}
	p.mu.Lock()
	r.Killed = p.reason
	p.res = r
	if p.pidfd >= 0 {
		_ = unix.Close(p.pidfd)
		p.pidfd = -1
	}
	close(p.done) // under the lock: Exited never sees the pidfd closed and done open
	p.mu.Unlock()
}

// Exited reports whether the process has ended, even when this process has not
// collected its end yet (a wait that has not run: this process was stopped, or
// starved of CPU, when the process ended). The kernel says, through a pidfd; without
// one (a kernel before 5.3) only a collected end counts.
func (p *Proc) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return true
	default:
	}
	if p.ended != nil {
		return p.ended()
	}
	return p.pidfdReadable()
}

// pidfdReadable: the kernel says the process has ended (its pidfd is readable). The
// caller holds p.mu.
func (p *Proc) pidfdReadable() bool {
	if p.pidfd < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
}

// Pid is the process (and process group) id.
func (p *Proc) Pid() int { return p.pid }

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the end and returns it.
func (p *Proc) Wait() Result {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}

// Kill ends the whole process group: SIGTERM, then SIGKILL after the grace. The first
// reason given is the one reported.
func (p *Proc) Kill(reason string) {
	p.mu.Lock()
	if p.reason != "" {
		p.mu.Unlock()
		return
	}
	p.reason = reason
	p.mu.Unlock()
	_ = p.group.Signal(syscall.SIGTERM)
	go func() {
		t := time.NewTimer(p.grace)
		defer t.Stop()
		<-t.C
		// Even after the leader exited, children may remain in the group; a group
		// ended meanwhile is not signalled (its id may be another's by now: Group).
		_ = p.group.Signal(syscall.SIGKILL)
	}()
}

// KillReason returns the reason given to Kill ("" if not killed).
func (p *Proc) KillReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reason
}

// Describe says why a process failed, in the words a job's error uses: "exit code 3",
// "killed by signal killed", with the tail of stderr.
func (r Result) Describe(stderrTail string) string {
	msg := fmt.Sprintf("exit code %d", r.ExitCode)
	if r.ExitCode < 0 && r.Signal != "" {
		msg = "killed by signal " + r.Signal
	}
	if r.Err != nil {
		msg = "wait: " + r.Err.Error()
	}
	if stderrTail != "" {
		msg += ": " + stderrTail
	}
	return msg
}

// Capped keeps the first Max bytes written.
type Capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	Max int
}

func (c *Capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.Max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

func (c *Capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// Tail keeps the last Max bytes written.
type Tail struct {
	mu  sync.Mutex
	buf []byte
	Max int
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.Max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.Max:]...)
	}
	return len(p), nil
}

func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Multi writes to every writer; a failing writer does not stop the others.
type Multi []io.Writer

func (m Multi) Write(p []byte) (int, error) {
	for _, w := range m {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

// Batcher gathers a process's output and hands it to flush in chunks: when 32 KiB
// have gathered, or 50 ms after the first byte not yet flushed, so that a reader
// elsewhere (job logs -f) follows closely without a write per line.
type Batcher struct {
	flush   func([]byte)
	mu      sync.Mutex
	buf     []byte
	timer   *time.Timer
	flushMu sync.Mutex
}

// NewBatcher returns a Batcher that calls flush with each chunk, in order.
func NewBatcher(flush func([]byte)) *Batcher { return &Batcher{flush: flush} }

func (b *Batcher) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.buf = append(b.buf, p...)
	full := len(b.buf) >= 32<<10
	if !full && b.timer == nil {
		b.timer = time.AfterFunc(50*time.Millisecond, b.Flush)
	}
	b.mu.Unlock()
	if full {
		b.Flush()
	}
	return len(p), nil
}

// Flush hands what has gathered to flush now.
func (b *Batcher) Flush() {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	chunk := b.buf
	b.buf = nil
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.mu.Unlock()
	if len(chunk) > 0 {
		b.flush(chunk)
	}
}

// Close flushes what is left.
func (b *Batcher) Close() { b.Flush() }
