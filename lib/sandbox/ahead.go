package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/procrun"
)

// Sandboxes made ahead of need. Making a job's sandbox — bwrap's namespaces and
// mounts, its cgroup, the programs it starts — takes tens of milliseconds of CPU on a
// small VM; a job that waits for it has that much added to its start.
// Ahead keeps a few sandboxes made before their jobs, by limits (the sandbox's
// filesystem size and cgroup are made with them), for the limits jobs asked for
// recently: each is the whole sandbox of one job, started as a job starts (its gate,
// its cgroup, its user, bwrap, the guard knowing it), whose first process (the
// wrapper, files.go) said "start" and waits for its job's spec on a pipe. Take hands
// one to a job: the job's command, environment, work directory and result file come
// through the pipe, its script on its standard input; then it runs as any job does,
// and ends with its job (a job never sees another's leftovers: each sandbox serves
// one job). Nothing is made for limits no job asked for within the TTL; what is made
// and not taken within the TTL is destroyed; a runner gone leaves none (guard.go: the
// guard kills each one's group; the wrapper ends at its spec's end of file).

// AheadOptions set how many sandboxes are made ahead.
type AheadOptions struct {
	// Max bounds the sandboxes made or being made ahead, all limits together (0:
	// none made ahead: each job's is made for it, as before).
	Max int
	// TTL: limits no job asked for within it get none made ahead (and those made are
	// destroyed). Default one minute.
	TTL time.Duration
	// ReadyWait bounds a sandbox's making (default one minute): one not ready by then
	// is destroyed, and its job told why.
	ReadyWait time.Duration
	// Made, when set, is called with how long each sandbox took to make (err: why it
	// failed) — a metric's.
	Made func(d time.Duration, err error)
}

// ahead is the sandboxes made ahead of need, by limits.
type ahead struct {
	s      *Sandbox
	opt    AheadOptions
	mu     sync.Mutex
	keys   map[Limits]*aheadKey
	total  int // made and being made, all keys
	busy   int // forking sandboxes serving a job, all keys (counted against Max)
	closed bool
	wg     sync.WaitGroup // makings and destructions under way
	// changed is closed, and replaced, when the counts of ready and making change
	// (WaitAhead).
	changed chan struct{}
}

// aheadKey is the sandboxes of one set of limits.
type aheadKey struct {
	a         *ahead
	lim       Limits
	ready     []*Prepared // made, oldest first
	making    int
	busy      int                // forking sandboxes serving a job (zygote.go), back after it
	waiters   []chan madeSandbox // jobs waiting for one, first come first served
	last      time.Time          // the last job that asked
	timer     *time.Timer        // the TTL's
	forgotten bool
}

type madeSandbox struct {
	p   *Prepared
	err error
}

func newAhead(s *Sandbox, opt AheadOptions) *ahead {
	if opt.TTL <= 0 {
		opt.TTL = time.Minute
	}
	if opt.ReadyWait <= 0 {
		opt.ReadyWait = time.Minute
	}
	return &ahead{s: s, opt: opt, keys: map[Limits]*aheadKey{}}
}

// Ahead says whether jobs of lim start in sandboxes made ahead (Take).
func (s *Sandbox) Ahead(lim Limits) bool {
	return s.ahead != nil && s.opt.Mode == ModeBwrap && lim.Network != model.NetworkOutbound
}

// Take returns a sandbox made ahead for a job of lim, at once when one is ready, else
// once the first being made is (one is started for the job when none is). It also
// starts making more, up to AheadOptions.Max, for the jobs of lim to come. The caller
// hands it its job (Prepared.Hand) or gives it back (Prepared.Destroy).
func (s *Sandbox) Take(ctx context.Context, lim Limits) (*Prepared, error) {
	a := s.ahead
	if !s.Ahead(lim) {
		return nil, errors.New("sandbox: no sandbox is made ahead for these limits")
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, errors.New("sandbox: shutting down")
	}
	k := a.keyLocked(lim)
	for len(k.ready) > 0 {
		p := k.ready[0]
		k.ready = k.ready[1:]
		a.total--
		a.changedLocked()
		if p.alive() {
			a.takenLocked(k, p)
			a.fillLocked(k)
			a.mu.Unlock()
			return p, nil
		}
		a.destroyLater(p)
	}
	ch := make(chan madeSandbox, 1)
	k.waiters = append(k.waiters, ch)
	if k.making < len(k.waiters) {
		a.makeLocked(k) // the job's own, beyond Max if need be
	}
	a.fillLocked(k)
	a.mu.Unlock()
	select {
	case m := <-ch:
		return m.p, m.err
	case <-ctx.Done():
	}
	a.mu.Lock()
	for i, w := range k.waiters {
		if w == ch {
			k.waiters = append(k.waiters[:i], k.waiters[i+1:]...)
			break
		}
	}
	a.mu.Unlock()
	select {
	case m := <-ch: // handed over meanwhile
		if m.p != nil {
			m.p.Destroy()
		}
	default:
	}
	return nil, ctx.Err()
}

// Warm starts making sandboxes for jobs of lim before any job asked, as if one just
// had (the runner's default limits, at its start): the first jobs then find theirs
// made instead of waiting for it while the rest are made beside them. What is made and
// not taken within the TTL is destroyed, as for any limits.
func (s *Sandbox) Warm(lim Limits) {
	if !s.Ahead(lim) {
		return
	}
	a := s.ahead
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.fillLocked(a.keyLocked(lim))
	}
}

// keyLocked is lim's key, made when new; its TTL starts again. Called with a.mu.
func (a *ahead) keyLocked(lim Limits) *aheadKey {
	k := a.keys[lim]
	if k == nil {
		k = &aheadKey{lim: lim, a: a}
		a.keys[lim] = k
		k.timer = time.AfterFunc(a.opt.TTL, func() { a.expire(k) })
	}
	k.last = time.Now()
	return k
}

// fillLocked starts making sandboxes for k up to Max (all keys together). Called with
// a.mu.
func (a *ahead) fillLocked(k *aheadKey) {
	for a.total+a.busy < a.opt.Max && len(k.ready)+k.making+k.busy < a.opt.Max+len(k.waiters) {
		a.makeLocked(k)
	}
}

// makeLocked starts making one sandbox for k. Called with a.mu.
func (a *ahead) makeLocked(k *aheadKey) {
	k.making++
	a.changedLocked()
	a.total++
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		start := time.Now()
		p, err := a.s.prepareAhead(k.lim, a.opt.ReadyWait, false)
		if p != nil {
			p.key = k
		}
		if a.opt.Made != nil {
			a.opt.Made(time.Since(start), err)
		}
		a.made(k, p, err)
	}()
}

// made places a sandbox made for k (or its failure): the first job waiting, else the
// ready ones; destroyed when k or the whole was given up meanwhile.
func (a *ahead) made(k *aheadKey, p *Prepared, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k.making--
	defer a.changedLocked()
	switch {
	case len(k.waiters) > 0:
		a.total--
		ch := k.waiters[0]
		k.waiters = k.waiters[1:]
		if err == nil {
			a.takenLocked(k, p)
		}
		ch <- madeSandbox{p, err}
		if err == nil && !a.closed {
			a.fillLocked(k) // the jobs of k to come
		}
	case err != nil:
		a.total-- // none made again until a job asks
	case a.closed || k.forgotten:
		a.total--
		a.destroyLater(p)
	default:
		k.ready = append(k.ready, p)
	}
}

// takenLocked counts a forking sandbox handed to a job as busy: it comes back after
// its job (returned). Called with a.mu.
func (a *ahead) takenLocked(k *aheadKey, p *Prepared) {
	if p.zy != nil {
		k.busy++
		a.busy++
		p.zy.setTaken(true)
	}
}

// returned takes a forking sandbox back after its job: ready for the next one when
// reuse holds (its job left it sound) and its limits are still wanted within Max,
// else destroyed; more are made for its limits as for a taken sandbox.
func (a *ahead) returned(p *Prepared, reuse bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := p.key
	k.busy--
	a.busy--
	p.zy.setTaken(false)
	defer a.changedLocked()
	if !reuse || a.closed || k.forgotten || a.total+a.busy >= a.opt.Max {
		a.destroyLater(p)
		if !a.closed && !k.forgotten {
			a.fillLocked(k)
		}
		return
	}
	if len(k.waiters) > 0 {
		ch := k.waiters[0]
		k.waiters = k.waiters[1:]
		a.takenLocked(k, p)
		ch <- madeSandbox{p: p}
		return
	}
	a.total++
	k.ready = append(k.ready, p)
}

// expire forgets k once no job asked for its limits within the TTL: its ready
// sandboxes are destroyed, those being made once made.
func (a *ahead) expire(k *aheadKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if left := a.opt.TTL - time.Since(k.last); left > 0 || len(k.waiters) > 0 {
		k.timer.Reset(max(left, time.Millisecond))
		return
	}
	k.forgotten = true
	if a.keys[k.lim] == k {
		delete(a.keys, k.lim)
	}
	for _, p := range k.ready {
		a.destroyLater(p)
	}
	a.total -= len(k.ready)
	k.ready = nil
	a.changedLocked()
}

// destroyLater destroys p in the background (counted: close waits). Called with a.mu.
func (a *ahead) destroyLater(p *Prepared) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		p.destroy()
	}()
}

// close destroys every sandbox made ahead, and those being made once made; jobs
// waiting for one are told.
func (a *ahead) close() {
	a.mu.Lock()
	a.closed = true
	for _, k := range a.keys {
		k.timer.Stop()
		for _, p := range k.ready {
			a.destroyLater(p)
		}
		a.total -= len(k.ready)
		k.ready = nil
		for _, ch := range k.waiters {
			ch <- madeSandbox{err: errors.New("sandbox: shutting down")}
		}
		k.waiters = nil
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// changedLocked wakes the WaitAhead calls: the counts changed. Called with a.mu.
func (a *ahead) changedLocked() {
	if a.changed != nil {
		close(a.changed)
		a.changed = nil
	}
}

// countsLocked are the sandboxes ready for a job and being made. Called with a.mu.
func (a *ahead) countsLocked() (ready, making int) {
	for _, k := range a.keys {
		ready += len(k.ready)
		making += k.making
	}
	return ready, making
}

// AheadCounts are the sandboxes made ahead now: ready for a job, and being made.
func (s *Sandbox) AheadCounts() (ready, making int) {
	if s.ahead == nil {
		return 0, 0
	}
	s.ahead.mu.Lock()
	defer s.ahead.mu.Unlock()
	return s.ahead.countsLocked()
}

// WaitAhead waits until done holds of the counts of sandboxes made ahead (ready,
// being made), checked at once and at each change, or until ctx ends (its error).
func (s *Sandbox) WaitAhead(ctx context.Context, done func(ready, making int) bool) error {
	if s.ahead == nil {
		if done(0, 0) {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
	a := s.ahead
	for {
		a.mu.Lock()
		if done(a.countsLocked()) {
			a.mu.Unlock()
			return nil
		}
		if a.changed == nil {
			a.changed = make(chan struct{})
		}
		ch := a.changed
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Prepared is a sandbox made ahead of its job, waiting for it.
type Prepared struct {
	job    *Job
	cmd    *exec.Cmd
	spec   *os.File // the spec's pipe, the runner's end
	stdin  *os.File // the job's standard input, the runner's end
	stdout *lateWriter
	stderr *lateWriter
	waited func()
	once   sync.Once // Hand or Destroy
	key    *aheadKey // the limits it was made for
	// zy: a forking sandbox (zygote.go), which serves one job after another; nil: a
	// sandbox of one job, destroyed with it. fork: made as one (zy set once made).
	zy   *zygote
	fork bool
}

// prepareAhead makes a sandbox of lim and waits until it is ready (trial: New's trial
// of a forking sandbox, which Options.Pause does not stop; its wrapper said
// "start"), at most wait.
func (s *Sandbox) prepareAhead(lim Limits, wait time.Duration, trial bool) (*Prepared, error) {
	p, err := s.launchAhead(lim, trial)
	if err != nil {
		return nil, err
	}
	if err := p.ready(wait); err != nil {
		return nil, err
	}
	return p, nil
}

// launchAhead starts making a sandbox of lim (prepareAhead): its first process
// launched and through its gate; ready waits for it.
func (s *Sandbox) launchAhead(lim Limits, trial bool) (*Prepared, error) {
	fork := s.opt.Zygote != ""
	j, err := s.PrepareWith(workDirIn(JobDir), nil, lim, Extra{ahead: true, zygote: fork})
	if err != nil {
		return nil, err
	}
	j.trial = trial
	p := &Prepared{job: j, stdout: &lateWriter{}, stderr: &lateWriter{}, fork: fork}
	specR, specW, err := s.specFiles(fork)
	if err != nil {
		j.Cleanup()
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		closeAll(specR, specW)
		j.Cleanup()
		return nil, fmt.Errorf("%w: stdin pipe: %v", ErrLaunch, err)
	}
	cmd := exec.Command(j.Argv[0], j.Argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = []string{"PATH=/usr/bin:/bin"}, inR, p.stdout, p.stderr
	cmd.WaitDelay = 2 * time.Second // children holding the pipes do not hold the job
	p.cmd, p.spec, p.stdin = cmd, specW, inW
	p.waited, err = j.launch(cmd, specR)
	closeAll(specR, inR) // the sandbox holds its own copies
	if err != nil {
		closeAll(specW, inW)
		j.Cleanup()
		return nil, err
	}
	return p, nil
}

// ready waits until a sandbox launchAhead started is made (its first process said
// "start"), at most wait; one not made is destroyed, and the error says why.
func (p *Prepared) ready(wait time.Duration) error {
	err := p.job.report.awaitStart(wait)
	if err == nil {
		if p.fork {
			return p.forking()
		}
		return nil
	}
	p.Destroy()
	if errors.Is(err, errEndedEarly) {
		// Read once its process was waited for: its last words (bwrap's error) are
		// copied by then (they come through a pipe of their own, read beside the
		// report's: read when the report ended, they might not be there yet).
		err = fmt.Errorf("%w: %s", err, strings.TrimSpace(p.stderr.early()))
	}
	return err
}

// specFiles are the pipe of a sandbox's spec (its end, the runner's); fork: the
// control socket of a forking sandbox (zygote.go).
func (s *Sandbox) specFiles(fork bool) (specR, specW *os.File, err error) {
	if fork {
		return socketPair()
	}
	if specR, specW, err = os.Pipe(); err != nil {
		return nil, nil, fmt.Errorf("%w: spec pipe: %v", ErrLaunch, err)
	}
	// The job's user reads its spec as a file (/dev/fd: the shell's own reading of
	// its commands, no process of its own), which a pipe of the runner's (root) is not.
	if c := s.credential(); c != nil {
		if err := specR.Chown(int(c.Credential.Uid), int(c.Credential.Gid)); err != nil {
			closeAll(specR, specW)
			return nil, nil, fmt.Errorf("%w: spec pipe: %v", ErrLaunch, err)
		}
	}
	return specR, specW, nil
}

// alive: its wrapper still waits (its report's pipe is open); a forking sandbox: its
// process runs.
func (p *Prepared) alive() bool {
	if p.zy != nil {
		return p.zy.alive()
	}
	select {
	case <-p.job.report.done:
		return false
	default:
		return true
	}
}

// Handoff is the job a sandbox made ahead is given.
type Handoff struct {
	Argv []string // the interpreter and its arguments
	Env  []string // its whole environment
	// Dir is its work directory (WorkDir's: of its own filesystem, made by the
	// wrapper); Script comes on its standard input.
	Dir    string
	Script string
	// Result names the file of Dir the runner takes (Job.Result), of ResultMax bytes.
	Result    string
	ResultMax int64
	// Stdout and Stderr get its output.
	Stdout, Stderr io.Writer
	// KillGrace: SIGTERM → SIGKILL when its process is killed (procrun).
	KillGrace time.Duration
}

// Hand gives the sandbox its job, which starts at once: its process (the sandbox's
// own, or the job a forking sandbox forked), and the job (Reason, Result, Watch,
// Cleanup: after Cleanup a forking sandbox serves the next job).
func (p *Prepared) Hand(h Handoff) (*procrun.Proc, *Job, error) {
	if path.Dir(h.Dir) != jobFS {
		p.Destroy()
		return nil, nil, fmt.Errorf("sandbox: work directory %q is not one of the job's own filesystem (WorkDir)", h.Dir)
	}
	if p.zy != nil {
		return p.handFork(h)
	}
	handed := false
	p.once.Do(func() { handed = true })
	if !handed {
		return nil, nil, fmt.Errorf("%w: the sandbox was handed a job or destroyed already", ErrLaunch)
	}
	j := p.job
	made := h.Dir == j.workDir // made with the sandbox (bwrapArgs)
	j.workDir = h.Dir
	j.result = &Extra{Result: h.Result, ResultMax: h.ResultMax}
	j.report.mu.Lock()
	j.report.max = h.ResultMax
	j.report.mu.Unlock()
	p.stdout.set(h.Stdout)
	p.stderr.set(h.Stderr)
	_, err := p.spec.Write(handSpec(h.Dir, made, h.Result, h.ResultMax, h.Env, h.Argv))
	_ = p.spec.Close()
	if err != nil {
		// Gone meanwhile: its end says how (Wait).
		_ = p.stdin.Close()
		return procrun.Adopt(p.cmd, p.waited, h.KillGrace), j, nil
	}
	go func() {
		_, _ = io.WriteString(p.stdin, h.Script) // an error: the job ended without reading it all
		_ = p.stdin.Close()
	}()
	return procrun.Adopt(p.cmd, p.waited, h.KillGrace), j, nil
}

// Destroy ends a sandbox that was not handed a job (or a forking sandbox taken and not
// handed one): its processes killed and waited for, its cgroup removed.
func (p *Prepared) Destroy() {
	if p.zy != nil && p.zy.isTaken() {
		p.key.a.returned(p, false)
		return
	}
	p.destroy()
}

func (p *Prepared) destroy() {
	p.once.Do(func() {
		closeAll(p.spec, p.stdin) // the wrapper ends at its spec's end of file
		if p.zy != nil {
			_ = p.zy.conn.Close() // the zygote ends at its control socket's end of file
			p.zy.close()
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Wait()
		p.waited()
		p.job.Cleanup()
	})
}

// lateWriter is a sandbox's output before its job has one: kept (a little, to say
// why a sandbox failed), then the job's.
type lateWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf bytes.Buffer
}

func (l *lateWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w != nil {
		return l.w.Write(b)
	}
	if room := 4096 - l.buf.Len(); room > 0 {
		l.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (l *lateWriter) set(w io.Writer) {
	if w == nil {
		w = io.Discard
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w = w
}

func (l *lateWriter) early() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
