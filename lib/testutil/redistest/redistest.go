// Package redistest starts a real redis-server (Debian's package) on a free port in a
// temporary directory, for tests. One server per test binary is the usual pattern:
//
//	var srv *redistest.Server
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }
//
// Tests then call srv.Flush(t) (every DB) at their start.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/testutil/freeport"
)

// Databases is the number of databases test servers have (contexts 1..63).
const Databases = 64

// ZsetMaxListpackEntries is the zset-max-listpack-entries every redis-server of the
// tests runs with, as docker-compose.yml, the Helm chart and scripts/local-stack.sh
// run theirs (Redis's default: 128): a sorted set of more than 8 members is a
// skiplist, whose inserts cost a fraction of a listpack's of tens of members (the
// indexes of the jobs in flight: docs/benchmarks.md "Redis's sorted sets").
const ZsetMaxListpackEntries = "8"

// RDBCompression is the rdbcompression every redis-server of the tests runs with, as
// this stack's deployments run theirs (Redis's default: yes): a DUMP (a claim's read
// of each job it starts, lib/store HashFromDump) gives a hash's listpack as it is
// instead of compressing it with LZF first, ~9k instructions of Redis a job that the
// runner then spent undoing (docs/benchmarks.md "Job hashes read uncompressed"). RDB
// files and an append-only file's RDB preamble are written uncompressed too.
const RDBCompression = "no"

// Server is a running redis-server.
type Server struct {
	Addr    string
	URL     string
	UnixURL string // the same server on its Unix socket (unix://<dir>/redis.sock?db=0)
	Dir     string
	cmd     *exec.Cmd
	done    chan error
	args    []string
	tls     *tls.Config // the test clients' TLS (TLS mode)
	pass    string      // the test clients' password (a user's, in ACL mode)
}

// Options tweak the server.
type Options struct {
	Password  string   // requirepass
	Databases int      // default Databases
	ExtraArgs []string // more redis-server arguments
	// TLS serves TLS only (no plaintext port), requiring client certificates of CA.
	TLS *TLS
	// ACLFile: redis-server --aclfile; User and UserPassword are what the test's own
	// clients (Client, Flush, Keys) log in as. URL names the user, not the password.
	ACLFile      string
	User         string
	UserPassword string
	// SentinelPassword (StartGroup): the Sentinels require it (requirepass), and use
	// it among themselves (sentinel sentinel-pass).
	SentinelPassword string
}

// TLS are the files of a TLS server: its certificate, the CA its clients' certificates
// chain to, and the client certificate the test's own clients present.
type TLS struct {
	CA, Cert, Key         string
	ClientCert, ClientKey string
}

// Start starts a server for one test (stopped by t.Cleanup).
func Start(t testing.TB, opt ...Options) *Server {
	t.Helper()
	s, err := StartServer(opt...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Main starts a server, runs the package's tests and stops the server.
func Main(m *testing.M, srv **Server, opt ...Options) int {
	s, err := StartServer(opt...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*srv = s
	defer s.Stop()
	return m.Run()
}

// StartServer starts a server; the caller stops it.
func StartServer(opt ...Options) (*Server, error) {
	var o Options
	if len(opt) > 0 {
		o = opt[0]
	}
	if o.Databases == 0 {
		o.Databases = Databases
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH: install it (apt-get install redis-server) or run `make deps`")
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freeport.Port() // outside the ephemeral range: a restart rebinds it
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir}
		s.args = []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--databases", strconv.Itoa(o.Databases),
			"--daemonize", "no", "--loglevel", "notice", "--logfile", "",
			"--unixsocket", filepath.Join(dir, "redis.sock"), "--unixsocketperm", "700",
			// As this stack's deployments run Redis (docker-compose.yml, the Helm chart,
			// scripts/local-stack.sh): sorted sets of more than 8 members as skiplists,
			"--zset-max-listpack-entries", ZsetMaxListpackEntries,
			// and DUMPs (a claim's reads) and RDB files uncompressed
			"--rdbcompression", RDBCompression,
		}
		s.UnixURL = "unix://" + filepath.Join(dir, "redis.sock") + "?db=0"
		if o.ACLFile != "" {
			s.args = append(s.args, "--aclfile", o.ACLFile)
			s.pass = o.UserPassword
		}
		if o.TLS != nil {
			s.args = append(s.args, "--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", o.TLS.Cert, "--tls-key-file", o.TLS.Key,
				"--tls-ca-cert-file", o.TLS.CA, "--tls-auth-clients", "yes")
			ca, err := os.ReadFile(o.TLS.CA)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(ca)
			cert, err := tls.LoadX509KeyPair(o.TLS.ClientCert, o.TLS.ClientKey)
			if err != nil {
				return nil, err
			}
			s.tls = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
		if o.TLS != nil || o.ACLFile != "" {
			scheme, user := "redis", ""
			if o.TLS != nil {
				scheme = "rediss"
			}
			if o.User != "" {
				user = o.User + "@"
			}
			s.URL = scheme + "://" + user + s.Addr + "/0"
		} else if o.Password != "" {
			s.args = append(s.args, "--requirepass", o.Password)
			s.URL = fmt.Sprintf("redis://:%s@%s/0", o.Password, s.Addr)
			s.UnixURL = "unix://:" + o.Password + "@" + filepath.Join(dir, "redis.sock") + "?db=0"
		} else {
			s.URL = "redis://" + s.Addr + "/0"
		}
		s.args = append(s.args, o.ExtraArgs...)
		if last = s.start(bin); last == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("start redis-server: %v", last)
}

func (s *Server) start(bin string) error {
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.SysProcAttr = diesWithTest()
	s.done = make(chan error, 1)
	// The server's own "Ready to accept connections" line says it listens.
	if err := runUntilLine(s.cmd, s.done, filepath.Join(s.Dir, "redis.log"), "Ready to accept connections"); err != nil {
		return fmt.Errorf("redis-server on %s: %v: %s", s.Addr, err, s.logTail())
	}
	return nil
}

// runUntilLine starts cmd, copies its standard output to logPath, and returns once
// a line holds ready (an error when cmd exits first, or after 15 s: then it is
// killed). done receives cmd's end (and keeps an early one for the caller).
// diesWithTest makes a server end with the test process that started it, however
// that ends (a kill -9, a go test timeout): no server is left behind to hold its port
// and a core for the next run. (Pdeathsig is sent when the thread that started the
// process ends; Go ends no thread but one a goroutine locked, and nothing here locks
// one.)
func diesWithTest() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func runUntilLine(cmd *exec.Cmd, done chan error, logPath, ready string) error {
	out, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout = pw
	err = cmd.Start()
	_ = pw.Close()
	if err != nil {
		_ = out.Close()
		return err
	}
	up := make(chan struct{})
	logf, _ := os.Create(logPath)
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if logf != nil {
				_, _ = logf.WriteString(line + "\n")
			}
			if !signalled && strings.Contains(line, ready) {
				signalled = true
				close(up)
			}
		}
		if logf != nil {
			_ = logf.Close()
		}
		_ = out.Close()
	}()
	go func() { done <- cmd.Wait() }()
	select {
	case <-up:
		return nil
	case err := <-done:
		done <- err
		return fmt.Errorf("exited: %v", err)
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("no %q within 15s", ready)
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "; ")
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server dies too
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = os.RemoveAll(s.Dir)
}

// Client returns a client on a DB, closed at the end of the test.
func (s *Server) Client(t testing.TB, db int) *redis.Client {
	opt := s.Options()
	opt.DB = db
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Options are the go-redis options of the test's own clients (TLS and the user's
// password included).
func (s *Server) Options() *redis.Options {
	opt, _ := redis.ParseURL(s.URL)
	if s.tls != nil {
		t := s.tls.Clone()
		t.ServerName = "127.0.0.1"
		opt.TLSConfig = t
	}
	if s.pass != "" {
		opt.Password = s.pass
	}
	return opt
}

// Pid is the redis-server's process id (0 when it is not running).
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Flush empties every database.
func (s *Server) Flush(t testing.TB) {
	t.Helper()
	c := redis.NewClient(s.Options())
	defer func() { _ = c.Close() }()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("flush redis: %v", err)
	}
}

// Keys returns every key of a DB, found with SCAN (never KEYS).
func (s *Server) Keys(t testing.TB, db int) []string {
	t.Helper()
	c := s.Client(t, db)
	var out []string
	iter := c.Scan(context.Background(), 0, "*", 1000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// How a fault test takes the server down.
const (
	DownKill     = "kill"     // SIGKILL: what AOF with appendfsync always wrote survives
	DownShutdown = "shutdown" // SHUTDOWN NOSAVE: the server exits at once, saving nothing
)

// Down takes the server down (DownKill or DownShutdown) and waits for its exit. Up
// starts it again on the same port and directory.
func (s *Server) Down(how string) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redis-server is not running")
	}
	switch how {
	case DownKill:
		_ = s.cmd.Process.Kill()
	case DownShutdown:
		c := s.rawClient()
		_ = c.ShutdownNoSave(context.Background()).Err() // the connection closes: no answer
		_ = c.Close()
	default:
		return fmt.Errorf("redistest: unknown way down %q", how)
	}
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
	return nil
}

// Up starts a server taken down by Down again, on the same port and directory (with
// AOF on, it loads what it wrote), and waits until it accepts connections.
func (s *Server) Up() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	return s.start(bin)
}

// Pause stops the server's process (SIGSTOP): connections stay open, nothing
// answers. Resume continues it (SIGCONT).
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

func (s *Server) rawClient() *redis.Client { return redis.NewClient(s.Options()) }
