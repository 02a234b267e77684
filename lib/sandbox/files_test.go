package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// resultCases are result files a job may leave, and what the runner takes of each:
// a regular file's content; for anything else, a problem that names it — a symbolic
// link is never followed (here to the job's own environment, and to a file the
// runner may read), a FIFO or socket never opened; a file over the bound is refused.
var resultCases = []struct {
	name, script string
	data         string // Result.Data; "" with problem
	problem      string // Result.Problem
}{
	{"regular", "printf 'A=1\\nB=2\\n' > result", "A=1\nB=2\n", ""},
	{"absent", "true", "", ""},
	{"symlink to environ", "ln -sf /proc/self/environ result", "", "not a regular file (a symbolic link)"},
	{"symlink to a host file", "ln -sf %s result", "", "not a regular file (a symbolic link)"},
	{"fifo", "mkfifo result", "", "not a regular file (a FIFO)"},
	{"socket", "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"result\")'", "", "not a regular file (a socket)"},
	{"directory", "mkdir result", "", "not a regular file (a directory)"},
	{"oversized", "head -c 5000 /dev/zero > result", "", "larger than 4096 bytes"},
}

// secretFile is a file only the runner's user may read (the test runs as root),
// standing for its secrets.
func secretFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte("SECRET=hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// A sandboxed job's result file is read in its sandbox: what the runner takes of each
// kind of file it may leave, the job ending at once (a FIFO does not hold it).
func TestResultFileInTheSandbox(t *testing.T) { eachWay(t, testResultFileInTheSandbox) }

func testResultFileInTheSandbox(t *testing.T, s *Sandbox) {
	secret := secretFile(t)
	for _, tc := range resultCases {
		t.Run(tc.name, func(t *testing.T) {
			script := strings.Replace(tc.script, "%s", secret, 1)
			out, res, _, got := runJob(t, s, script, []string{"PATH=/usr/bin:/bin"}, Limits{}, Extra{Result: "result", ResultMax: 4096})
			if res.ExitCode != 0 {
				t.Fatalf("exit %+v: %s", res, out)
			}
			checkResult(t, got, tc.data, tc.problem)
		})
	}
}

// Without a sandbox (--sandbox=none) the runner reads the result file on the host,
// the same way: no link followed, nothing but a regular file opened, bounded.
func TestResultFileOnTheHost(t *testing.T) {
	s, err := New(context.Background(), Options{Mode: ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	secret := secretFile(t)
	for _, tc := range resultCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "symlink to environ" {
				tc.script = "ln -sf /proc/" + "self/environ result" // the runner's own, were it followed
			}
			script := strings.Replace(tc.script, "%s", secret, 1)
			out, res, _, got := runJob(t, s, script, []string{"PATH=/usr/bin:/bin"}, Limits{}, Extra{Result: "result", ResultMax: 4096})
			if res.ExitCode != 0 {
				t.Fatalf("exit %+v: %s", res, out)
			}
			checkResult(t, got, tc.data, tc.problem)
		})
	}
}

func checkResult(t *testing.T, got Result, data, problem string) {
	t.Helper()
	if string(got.Data) != data || got.Problem != problem || got.Found != (data != "" || problem != "") {
		t.Fatalf("result %+v (%q), want data %q problem %q", got, got.Data, data, problem)
	}
	if strings.Contains(string(got.Data), "hunter2") || strings.Contains(string(got.Data), "PATH=") {
		t.Fatalf("a file outside the job's directory was read: %q", got.Data)
	}
}

// A job's files take at most its DiskBytes: its work directory, /tmp, /var/tmp and
// /run are one filesystem of that size, the rest of its root and /dev are
// read-only, /dev/shm is bounded too. A job that fills its filesystem ends with the
// reason disk_limit, one that stays within it with none; nothing of it reaches the
// host's disk, and its space is free again after it.
func TestDiskLimit(t *testing.T) { eachWay(t, testDiskLimit) }

func testDiskLimit(t *testing.T, s *Sandbox) {
	free := func() uint64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(os.TempDir(), &st); err != nil {
			t.Fatal(err)
		}
		return st.Bavail * uint64(st.Bsize)
	}
	before := free()
	lim := Limits{DiskBytes: 16 << 20, FileSizeBytes: 1 << 30}
	out, res, reason := run(t, s, "head -c 100000000 /dev/zero > a; head -c 100000000 /dev/zero > /var/tmp/b; echo wrote", []string{"PATH=/usr/bin:/bin"}, lim)
	if reason != ReasonDisk { // even though the script went on and exited 0
		t.Fatalf("filling its disk: reason %q, %+v: %s", reason, res, out)
	}
	out, res, reason = run(t, s, `
touch /x 2>/dev/null && echo LEAK-root
touch /dev/x 2>/dev/null && echo LEAK-dev
touch /usr/x 2>/dev/null && echo LEAK-usr
head -c 100000000 /dev/zero > /dev/shm/big 2>/dev/null || echo shm-bounded
echo x > /run/r && echo x > /var/tmp/v && test -e /tmp/r && test -e /tmp/v && echo one-fs
case "$PWD" in /tmp/hero-sbx-test*) echo work-in-tmp;; esac
rm -f /dev/shm/big; head -c 1000000 /dev/zero > c && echo within`, []string{"PATH=/usr/bin:/bin"}, lim)
	if reason != "" || res.ExitCode != 0 || strings.Contains(out, "LEAK") {
		t.Fatalf("within its disk: reason %q, %+v: %s", reason, res, out)
	}
	for _, want := range []string{"shm-bounded", "one-fs", "work-in-tmp", "within"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	// 200 MB written, 16 MiB kept: the host's disk did not take them (other processes
	// of the host may write meanwhile: a margin).
	if after := free(); after+64<<20 < before {
		t.Errorf("the host's free space went from %d to %d bytes", before, after)
	}
}
