package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A sandboxed job's files live in a filesystem of its own: a tmpfs of its DiskBytes
// mounted at jobFS, which holds its work directory and is its /tmp (/var/tmp and /run
// lead there); the rest of its root and /dev are read-only, and /dev/shm is a tmpfs of
// at most shmMax. Nothing of it is on the host, and it is gone with the sandbox. What
// the runner takes from it — the result file, and whether it was full — is read in the
// sandbox, as the job's user, by the job's first process (wrapperScript), and comes out
// through a pipe that the job's own processes do not hold.

// jobFS is where the job's own filesystem is mounted in its sandbox.
const jobFS = "/tmp"

// shmMax bounds the job's /dev/shm (Docker's default size), DiskBytes if smaller.
const shmMax = 64 << 20

// ReasonDisk is the limit reason of a job whose own filesystem was full when it ended.
const ReasonDisk = "disk_limit"

// reportHeaderMax bounds the report's first line.
const reportHeaderMax = 256

// wrapperScript is the job's first process in its sandbox: PID 1 of its PID namespace
// (bwrap --as-pid-1, so that none of the job's processes can signal it), running as
// the job's user in its work directory. Its job's rlimits set (ulimits, put before it:
// a shell that cannot set one ends there), it first writes "start" to the report
// descriptor (%[1]d): the pipe's reader is the runner alone, so the write fails — and
// nothing of the job starts — when the runner is gone (guard.go); and "begun" right
// before the job's command runs (its prologue done: a sandbox made ahead has its job),
// which is when the job's time starts (Job.Begun: its timeout, its started_at_us) and
// which fails likewise when the runner is gone. Its prologue (a
// job's own: coldPrologue; a sandbox made ahead of its job: aheadPrologue) sets the
// result file's name (__hero_f), the most bytes of it to read (__hero_m), and, made
// ahead, the work directory, the environment and the command ("$@"). It runs the
// command without the report's descriptor, then kills
// whatever the command left running (nothing changes the job's files after that), and
// writes its report: "ok" or "full" (a byte cannot be written to the job's filesystem)
// and what the result file is, then, for a regular file, its first m bytes. It tests
// the file's type without following a link and reads only a regular file: a symbolic
// link is reported as one, never followed; a FIFO, socket or device is never opened.
// It ends with the command's status (128 + the signal's number for a signal).
const wrapperScript = `echo start >&%[1]d || exit 1
%[2]s
echo begun >&%[1]d || exit 1
"$@" %[1]d>&-
rc=$? f=$__hero_f m=$__hero_m PATH=/usr/bin:/bin
kill -KILL -1 2>/dev/null
{
d=ok
printf x 2>/dev/null >.hero-disk-probe || d=full
if [ -z "$f" ]; then k=none
elif [ -L "$f" ]; then k='a symbolic link'
elif [ -p "$f" ]; then k='a FIFO'
elif [ -S "$f" ]; then k='a socket'
elif [ -b "$f" ] || [ -c "$f" ]; then k='a device'
elif [ -d "$f" ]; then k='a directory'
elif [ -f "$f" ]; then k=file
elif [ -e "$f" ]; then k='another kind of file'
else k=none
fi
echo "$d $k"
if [ "$k" = file ]; then head -c "$m" -- "$f"; fi
} >&%[1]d 2>/dev/null
exit $rc
`

// coldPrologue: the job's command came with the sandbox (bwrap put it in its work
// directory); the result file's name (%[1]s, quoted) and bound (%[2]d) too.
const coldPrologue = `__hero_f=%[1]s __hero_m=%[2]d`

// aheadPrologue: a sandbox made ahead of its job (ahead.go) waits here, having said
// "start", for its job's spec on descriptor %[1]d: the runner writes it (handSpec) and
// closes the pipe; the shell runs it as it reads it (a pipe the job's user may open:
// Prepared gives it that user). A spec cut short (the runner gone) is a syntax error
// or lacks its last line (__hero_ok=1): the job's command does not run.
const aheadPrologue = `. /dev/fd/%[1]d || exit 1
exec %[1]d<&-
[ "$__hero_ok" = 1 ] || exit 1`

// wrapper is the argv that runs argv under wrapperScript, after ulimits (the job's
// rlimits: ulimits' command).
func wrapper(sh string, reportFD int, result string, max int64, ulimits string) []string {
	prologue := fmt.Sprintf(coldPrologue, shellQuote(result), max+1)
	return []string{sh, "-c", ulimits + fmt.Sprintf(wrapperScript, reportFD, prologue), "hero-job"}
}

// aheadWrapper is wrapperScript for a sandbox made ahead of its job, its spec read
// from specFD, after ulimits.
func aheadWrapper(sh string, reportFD, specFD int, ulimits string) []string {
	return []string{sh, "-c", ulimits + fmt.Sprintf(wrapperScript, reportFD, fmt.Sprintf(aheadPrologue, specFD)), "hero-job"}
}

// handSpec is what a sandbox made ahead of its job runs to start it (aheadPrologue):
// shell commands of the runner's own making, every value quoted. It goes to the work
// directory (of the job's own filesystem: made with the sandbox when made is set,
// else made now), leaves of the wrapper's own
// environment nothing (PATH, and the OLDPWD its cd set), exports the job's whole
// environment and sets the command. A name no shell can hold is left out, as the
// wrapper's shell leaves it out of a job's environment made for it (the API refuses
// such names).
func handSpec(dir string, made bool, result string, max int64, env, argv []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "__hero_w=%s __hero_f=%s __hero_m=%d\n", shellQuote(dir), shellQuote(result), max+1)
	if !made {
		b.WriteString("mkdir -m 0700 -- \"$__hero_w\" && ")
	}
	b.WriteString("cd \"$__hero_w\" || exit 1\nunset PATH OLDPWD\n")
	for _, e := range env {
		if k, _, _ := strings.Cut(e, "="); shellName(k) {
			b.WriteString("export " + shellQuote(e) + "\n")
		}
	}
	b.WriteString("set --")
	for _, a := range argv {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString("\n__hero_ok=1\n")
	return []byte(b.String())
}

// shellName: k is a name a POSIX shell can export.
func shellName(k string) bool {
	for i, c := range k {
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return k != ""
}

// Result is what the runner took of a job's result file.
type Result struct {
	Found   bool   // the file was there (Data, or Problem)
	Data    []byte // its content (Problem "")
	Problem string // why it was not taken: "not a regular file (a FIFO)", "larger than 1048576 bytes"
}

// report gathers the wrapper's report as it comes (a pipe's reader: the wrapper may
// write more than a pipe holds).
type report struct {
	r    *os.File
	max  int64 // the result's bound
	done chan struct{}
	// started is closed once the wrapper said "start": its sandbox is made (a sandbox
	// made ahead of its job is ready for it).
	started   chan struct{}
	saidStart bool
	// begunAt is when the wrapper said "begun" (zero before): the job's command is
	// about to run. As this process read it: late, never early, when it was stopped;
	// or, a forking sandbox's job ("begun <unix ns>": hero-zygote's job process, right
	// before it executes the job's command, before any of the job's code ran), that
	// time, never later than its reading.
	begunAt time.Time
	mu      sync.Mutex
	buf     bytes.Buffer
}

// read keeps the first reportHeaderMax+max+1 bytes and drains the rest until EOF.
func (rp *report) read() {
	defer close(rp.done)
	defer func() { _ = rp.r.Close() }()
	b := make([]byte, 32<<10)
	for {
		n, err := rp.r.Read(b)
		rp.mu.Lock()
		if room := reportHeaderMax + rp.max + 1 - int64(rp.buf.Len()); room > 0 {
			rp.buf.Write(b[:min(int64(n), room)])
		}
		if !rp.saidStart && rp.started != nil && bytes.HasPrefix(rp.buf.Bytes(), []byte("start\n")) {
			close(rp.started)
			rp.saidStart = true
		}
		if rp.begunAt.IsZero() {
			rp.begunAt = begunLine(rp.buf.Bytes())
		}
		rp.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// errEndedEarly: a sandbox's first process ended before it said "start".
var errEndedEarly = errors.New("the sandbox ended before its job")

// awaitStart waits until the sandbox's first process said "start" (nil), its report
// ended without it (errEndedEarly), or wait passed. A forking sandbox's zygote says
// "start" and closes the report at once, and a runner slow to look (a loaded host, a
// restart's sandboxes all being made) finds both the word and the end: the word said
// decides. Before, one select on both picked either at random, and half such sandboxes
// were destroyed as ended before their job — the error of a job waiting for one.
func (rp *report) awaitStart(wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	timedOut := false
	select {
	case <-rp.started:
		return nil
	case <-rp.done:
	case <-t.C:
		timedOut = true
	}
	select {
	case <-rp.started: // said before the end: read closes started first
		return nil
	default:
	}
	if timedOut {
		return fmt.Errorf("the sandbox was not made within %s", wait)
	}
	return errEndedEarly
}

// begunLine is when a report (b, so far) says its job began: its "begun" line read now,
// or the time it names ("begun <unix ns>") when earlier; zero before that line.
func begunLine(b []byte) time.Time {
	rest, ok := bytes.CutPrefix(b, []byte("start\nbegun"))
	line, _, whole := bytes.Cut(rest, []byte("\n"))
	if !ok || !whole {
		return time.Time{}
	}
	now := time.Now()
	if ns, err := strconv.ParseInt(string(bytes.TrimPrefix(line, []byte(" "))), 10, 64); err == nil && len(line) > 1 {
		if at := time.Unix(0, ns); at.Before(now) {
			return at
		}
	}
	return now
}

// begun is when the wrapper said "begun" (ok false: not yet).
func (rp *report) begun() (time.Time, bool) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.begunAt, !rp.begunAt.IsZero()
}

// reportWait bounds the wait for the report's end once the job's process ended (its
// sandbox holds the pipe's other end until then).
const reportWait = 2 * time.Second

// wait returns the report once the pipe's writers are gone (or after reportWait).
func (rp *report) wait() []byte {
	t := time.NewTimer(reportWait)
	defer t.Stop()
	select {
	case <-rp.done:
	case <-t.C:
		_ = rp.r.SetReadDeadline(time.Now())
		<-rp.done
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.buf.Bytes()
}

// parseReport reads a wrapper's report: whether the job's filesystem was full, and
// its result file. ok is false when there is no report (the wrapper did not end:
// the job was killed).
func parseReport(b []byte, max int64) (full bool, res Result, ok bool) {
	b, _ = bytes.CutPrefix(b, []byte("start\n"))
	if bytes.HasPrefix(b, []byte("begun")) { // "begun" or "begun <unix ns>"
		_, b, _ = bytes.Cut(b, []byte("\n"))
	}
	line, data, found := bytes.Cut(b, []byte("\n"))
	disk, kind, _ := strings.Cut(string(line), " ")
	if !found || (disk != "ok" && disk != "full") {
		return false, Result{}, false
	}
	full = disk == "full"
	switch kind {
	case "none":
		return full, Result{}, true
	case "file":
		return full, fileResult(data, max), true
	}
	return full, Result{Found: true, Problem: "not a regular file (" + kind + ")"}, true
}

func fileResult(data []byte, max int64) Result {
	if int64(len(data)) > max {
		return Result{Found: true, Problem: "larger than " + strconv.FormatInt(max, 10) + " bytes"}
	}
	return Result{Found: true, Data: data}
}

// ReadHostFile reads a job's file on the host (a job without a sandbox of its own):
// never through a symbolic link, never blocking (a FIFO, socket or device is named,
// not read), a file of the job's uid only (uid >= 0), at most max bytes.
func ReadHostFile(file string, uid int, max int64) Result {
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return Result{}
	case errors.Is(err, unix.ELOOP):
		return Result{Found: true, Problem: "not a regular file (a symbolic link)"}
	case errors.Is(err, unix.ENXIO):
		return Result{Found: true, Problem: "not a regular file (a socket)"}
	case err != nil:
		return Result{Found: true, Problem: err.Error()}
	}
	f := os.NewFile(uintptr(fd), file)
	defer func() { _ = f.Close() }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Result{Found: true, Problem: err.Error()}
	}
	if kind := fileKind(st.Mode); kind != "file" {
		return Result{Found: true, Problem: "not a regular file (" + kind + ")"}
	}
	if uid >= 0 && int(st.Uid) != uid {
		return Result{Found: true, Problem: fmt.Sprintf("not the job's own file (owner uid %d)", st.Uid)}
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return Result{Found: true, Problem: err.Error()}
	}
	return fileResult(data, max)
}

// fileKind names a file's type as the wrapper does.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFBLK, unix.S_IFCHR:
		return "a device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return "another kind of file"
}

// JobDir is the pattern (WorkDir's) of the work directory a sandbox made ahead has
// made already, with its sandbox (bwrap), for its job: a job given it starts without
// the wrapper making one (a program run: the time of a dependent step). Every job's
// filesystem is its own, so every sandboxed job may have the same name.
const JobDir = "hero-job-"

// workDirIn names a work directory of the job's own filesystem.
func workDirIn(pattern string) string {
	return path.Join(jobFS, strings.TrimRight(pattern, "-"))
}
