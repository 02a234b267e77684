// Package harness starts the real service binaries for end-to-end tests: it builds
// them once per test binary, starts each on free ports (127.0.0.1:0) against a real
// redis-server, and learns the bound addresses from the service's own "started" log
// line, so tests wait on that event instead of sleeping.
package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/procrun"
	"github.com/hero-coordinator/hero/lib/sandbox"
)

// Binaries lists what Build builds: the five services, heroctl, and the example Go
// executor (RRQ protocol) that handler-job tests run.
var Binaries = []string{"supervisor-daemon", "scheduler", "router", "runner", "mycelium-gateway", "heroctl", ExampleExecutor, OneConnExecutor}

// ExampleExecutor is the binary of lib/rrq/executor/example.
const ExampleExecutor = "hero-example-executor"

// OneConnExecutor is the binary of lib/rrq/executor/oneconn: it accepts exactly one
// connection and exits when it closes.
const OneConnExecutor = "hero-oneconn-executor"

// RepoRoot returns the repository root (where go.work is).
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the harness source")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the harness")
		}
		dir = parent
	}
}

// Build compiles every binary into dir.
func Build(dir string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	for _, b := range Binaries {
		pkg := "./services/" + b
		switch b {
		case "heroctl":
			pkg = "./cmd/heroctl"
		case ExampleExecutor:
			pkg = "./lib/rrq/executor/example"
		case OneConnExecutor:
			pkg = "./lib/rrq/executor/oneconn"
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", b, err, out)
		}
	}
	// The runner's forking sandbox, next to the runner as make build puts it (without
	// gcc: none, and the runner says it makes a sandbox per job).
	if _, err := exec.LookPath("gcc"); err == nil {
		return sandbox.BuildZygote(filepath.Join(root, "lib", "sandbox", "zygote", "zygote.c"), filepath.Join(dir, sandbox.ZygoteName))
	}
	return nil
}

// Proc is a running service binary.
type Proc struct {
	Name      string
	Cmd       *exec.Cmd
	Started   map[string]any // the fields of its "started" log line
	GRPCAddr  string
	AdminAddr string
	HTTPAddr  string

	group  procrun.Group // its process group (Setpgid), told from a later one of its id
	mu     sync.Mutex
	lines  []string
	done   chan struct{}
	exit   error
	waiter []chan string
}

// Options for Start.
type Options struct {
	Args []string
	Env  []string // extra KEY=VALUE
	// Wrap is a command to start the binary under: Wrap[0] runs with Wrap[1:], then the
	// binary's path and its arguments.
	// Plaintext starts a service without its TLS flags (TLSArgs are the default).
	Plaintext bool
	Wrap      []string
	// NoScripts: the harness does not load the store's Redis functions first
	// (EnsureScripts); a service other than supervisor-daemon then waits for them.
	NoScripts bool
}

// guarded are the secrets no service may ever log (GuardSecret).
var guarded = struct {
	sync.Mutex
	list []string
}{list: []string{AdminSecret}}

// GuardSecret adds a secret that no service started by Start may write to its log:
// each one's captured output is checked when its test ends.
func GuardSecret(s string) {
	guarded.Lock()
	guarded.list = append(guarded.list, s)
	guarded.Unlock()
}

// LeakedSecrets returns the guarded secrets that text contains (masked, so that the
// report does not leak them further).
func LeakedSecrets(text string) []string {
	guarded.Lock()
	defer guarded.Unlock()
	var out []string
	for _, s := range guarded.list {
		if s != "" && strings.Contains(text, s) {
			out = append(out, s[:4]+"…")
		}
	}
	return out
}

// Start runs bin/<name> with the given flags plus free ports, and waits for its
// "started" log line (or its exit). When the test ends the process is killed and its
// log checked for guarded secrets.
func Start(t testing.TB, binDir, name, redisURL string, opt Options) *Proc {
	t.Helper()
	p, err := StartProc(binDir, name, redisURL, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if leaked := LeakedSecrets(p.Output()); len(leaked) > 0 {
			t.Errorf("%s logged secrets: %v", name, leaked)
		}
		CheckACLLog(t, redisURL)
	})
	return p
}

// StartProc is Start without a testing.TB; the caller kills the process.
func StartProc(binDir, name, redisURL string, opt Options) (*Proc, error) {
	args := []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-level", "debug"}
	if name == "supervisor-daemon" {
		args = append(args, "--http-addr", "127.0.0.1:0")
	}
	if !opt.Plaintext {
		tlsArgs, err := TLSArgs(name)
		if err != nil {
			return nil, err
		}
		args = append(args, tlsArgs...)
	}
	if name == "runner" {
		if err := os.MkdirAll(ScratchRoot(), 0o755); err != nil {
			return nil, err
		}
		_ = os.Chmod(ScratchRoot(), 0o1777)
		args = append(args, "--sandbox-bind", ScratchRoot())
	}
	if services[name] && name != "supervisor-daemon" && !opt.NoScripts {
		if err := EnsureScripts(redisURL); err != nil {
			return nil, err
		}
	}
	args = append(args, placementArgs(name, redisURL)...)
	redisURL, redisArgs, err := redisFor(name, redisURL)
	if err != nil {
		return nil, err
	}
	args = append(args, redisArgs...)
	args = append(args, opt.Args...)
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	if len(opt.Wrap) > 0 {
		wrapped := append(append(slices.Clone(opt.Wrap[1:]), filepath.Join(binDir, name)), args...)
		cmd = exec.Command(opt.Wrap[0], wrapped...)
	}
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "REDIS_URL=" + redisURL}, opt.Env...)
	// (Pdeathsig: the service ends with the test process, however that ends — a kill
	// -9, a go test timeout —, not left running to hold its ports and a core)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Name: name, Cmd: cmd, group: procrun.GroupOf(cmd.Process.Pid), done: make(chan struct{})}
	started := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		seenStart := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.lines = append(p.lines, line)
			for _, w := range p.waiter {
				select {
				case w <- line:
				default:
				}
			}
			p.mu.Unlock()
			if seenStart || !strings.Contains(line, `"message":"started"`) {
				continue // only the start line is parsed: the rest is kept as text
			}
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["message"] == "started" {
				seenStart = true
				select {
				case started <- m:
				default:
				}
			}
		}
		p.exit = cmd.Wait()
		close(p.done)
	}()
	select {
	case m := <-started:
		p.Started = m
		p.GRPCAddr, _ = m["grpc_addr"].(string)
		p.AdminAddr, _ = m["admin_addr"].(string)
		p.HTTPAddr, _ = m["http_addr"].(string)
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before it started (%v): %s", name, p.exit, p.Output())
	case <-time.After(time.Minute):
		p.Kill()
		return nil, fmt.Errorf("%s did not start within a minute: %s", name, p.Output())
	}
}

// Output returns everything the process logged so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// WaitLog waits until a log line contains every substring, or the deadline.
func (p *Proc) WaitLog(ctx context.Context, subs ...string) (string, error) {
	ch := make(chan string, 64)
	p.mu.Lock()
	for _, l := range p.lines {
		if containsAll(l, subs) {
			p.mu.Unlock()
			return l, nil
		}
	}
	p.waiter = append(p.waiter, ch)
	p.mu.Unlock()
	for {
		select {
		case l := <-ch:
			if containsAll(l, subs) {
				return l, nil
			}
		case <-p.done:
			return "", fmt.Errorf("%s exited while waiting for %q", p.Name, subs)
		case <-ctx.Done():
			return "", fmt.Errorf("%s: no log line with %q: %v", p.Name, subs, ctx.Err())
		}
	}
}

func containsAll(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// Signal sends a signal to the process.
func (p *Proc) Signal(sig syscall.Signal) error { return p.Cmd.Process.Signal(sig) }

// Wait waits for the process to exit and returns its exit code.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		return -1, fmt.Errorf("%s did not exit within %v", p.Name, timeout)
	}
	if p.exit == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(p.exit, &ee) {
		return ee.ExitCode(), nil
	}
	return -1, p.exit
}

// Kill sends SIGKILL to the process group (kill -9) and waits for the exit. A group
// that ended before (the process was killed or stopped earlier in the test) is not
// signalled again: its id may be another process's by now (procrun.Group), say a job
// of another test's runner.
func (p *Proc) Kill() {
	if p.Cmd.Process == nil {
		return
	}
	_ = p.group.Signal(syscall.SIGKILL)
	<-p.done
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }
