package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hero-coordinator/hero/lib/testutil/freeport"
	"github.com/hero-coordinator/hero/lib/testutil/myceliumemu"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

var (
	redisSrv *redistest.Server
	// placedSrv is the second Redis server of HERO_E2E_REDIS=placed: the services'
	// placement map puts context ctx1 there (nil otherwise).
	placedSrv *redistest.Server
	binDir    string
)

// redisOf is the Redis server that holds a context: its DB <ctxID> and, in DB 0, its
// coordination entries (wake lists, coord:due, coord:expire, coord:flows:active).
func redisOf(ctxID uint32) *redistest.Server {
	if placedSrv != nil && ctxID == ctx1 {
		return placedSrv
	}
	return redisSrv
}

// longTest skips a heavy scale or soak test unless HERO_LONG is set: make test-long
// runs them (LONG_TESTS in the Makefile), make test does not (docs/testing.md).
func longTest(t *testing.T) {
	t.Helper()
	if os.Getenv("HERO_LONG") == "" {
		t.Skip("a heavy scale or soak test: make test-long runs it (HERO_LONG=1)")
	}
}

// flushRedis empties every Redis server of the run.
func flushRedis(t testing.TB) {
	t.Helper()
	redisSrv.Flush(t)
	if placedSrv != nil {
		placedSrv.Flush(t)
	}
}

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "hero-e2e-bin-")
		if err != nil {
			panic(err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		defer harness.RemovePKI()
		// Jobs and executors run as another uid: the binaries (the example executor)
		// must be readable to it.
		if err := os.Chmod(dir, 0o755); err != nil {
			panic(err)
		}
		if err := harness.Build(dir); err != nil {
			println(err.Error())
			return 1
		}
		binDir = dir
		// HERO_E2E_REDIS=secure: Redis serves TLS only with client certificates and
		// ACL users, and every service logs in as its own user (make test runs the
		// core suite so).
		// HERO_E2E_REDIS=stack: Redis as docker-compose.yml and local-stack.sh run it,
		// ACL users and an append-only file, without TLS (make bench-peers).
		var opt redistest.Options
		switch os.Getenv("HERO_E2E_REDIS") {
		case "secure":
			opt, err = harness.SecureRedisOptions()
		case "stack":
			opt, err = harness.ACLRedisOptions()
		}
		if err != nil {
			println(err.Error())
			return 1
		}
		srv, err := redistest.StartServer(opt)
		if err != nil {
			println(err.Error())
			return 1
		}
		defer srv.Stop()
		redisSrv = srv
		if opt.TLS != nil {
			harness.UseSecureRedis(srv.URL)
		} else if opt.ACLFile != "" {
			harness.UseACLRedis(srv.URL)
		}
		// HERO_E2E_REDIS=placed: a second Redis server, and a placement map that puts
		// context ctx1 on it (make test runs the core suite so): everything a context
		// does must work the same on any server of the map.
		if os.Getenv("HERO_E2E_REDIS") == "placed" {
			placed, err := redistest.StartServer(redistest.Options{})
			if err != nil {
				println(err.Error())
				return 1
			}
			defer placed.Stop()
			placedSrv = placed
			harness.UsePlacement(srv.URL, fmt.Sprintf("%d-%d=%s", ctx1, ctx1, placed.URL))
		}
		return m.Run()
	}())
}

var services = []string{"supervisor-daemon", "scheduler", "router", "runner", "mycelium-gateway"}

// Acceptance (foundation 4): --help lists every flag with its default and env twin.
func TestHelpListsFlagsWithEnvAndDefaults(t *testing.T) {
	for _, s := range services {
		out, err := exec.Command(filepath.Join(binDir, s), "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v\n%s", s, err, out)
		}
		text := string(out)
		for _, want := range []string{"--redis-url", "$REDIS_URL", "(default redis://127.0.0.1:6379/0)", "--grpc-addr", "$GRPC_ADDR", "--admin-addr", "$ADMIN_ADDR", "--log-level", "$LOG_LEVEL"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s --help lacks %q:\n%s", s, want, text)
			}
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") && (!strings.Contains(line, "$") || !strings.Contains(line, "(default ")) {
				t.Errorf("%s: flag line without env twin or default: %q", s, line)
			}
		}
	}
}

// Acceptance (foundation 4): each binary answers /healthz, /readyz, /metrics and the
// gRPC health check against a real Redis, and exits 0 on SIGTERM.
func TestServicesServeProbesAndStopOnSIGTERM(t *testing.T) {
	for _, s := range services {
		t.Run(s, func(t *testing.T) {
			var args []string
			if s == "mycelium-gateway" {
				// Ready means its Mycelium node answers: give it one (the emulator).
				net := myceliumemu.NewForTest(t, "n")
				args = []string{"--mycelium-url", net.Node("n").URL()}
			}
			p := harness.Start(t, binDir, s, redisSrv.URL, harness.Options{Args: args, Env: []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}})
			if s == "mycelium-gateway" {
				wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := p.WaitLog(wctx, "connected to the Mycelium node")
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "hero_grpc_server_handled_total"} {
				resp, err := http.Get("http://" + p.AdminAddr + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
					// Counters appear once a call was counted; health checks below count.
					if path != "/metrics" || !strings.Contains(string(body), "go_goroutines") {
						t.Fatalf("%s %s: %d %q", s, path, resp.StatusCode, body)
					}
				}
			}
			// The gRPC health check, over TLS: the public API's, or mutual TLS inside.
			var cc *grpc.ClientConn
			var err error
			if s == "supervisor-daemon" {
				cc, err = grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(harness.APICredentials()))
			} else {
				cc, err = harness.DialInternal(p.GRPCAddr, s, "operator")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cc.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			hr, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("%s grpc health: %v %v", s, hr, err)
			}
			// The healthcheck subcommand asks the same admin port.
			out, err := exec.Command(filepath.Join(binDir, s), "healthcheck", "--admin-addr", p.AdminAddr).CombinedOutput()
			if err != nil {
				t.Fatalf("%s healthcheck: %v %s", s, err, out)
			}
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code, err := p.Wait(time.Minute)
			if err != nil || code != 0 {
				t.Fatalf("%s after SIGTERM: exit %d, %v\n%s", s, code, err, p.Output())
			}
		})
	}
}

// Only supervisor-daemon loads the store's Redis functions (its Redis user alone may):
// a runner started first, on a Redis without them, waits — its /readyz says for what,
// its log too — and starts once supervisor-daemon has loaded them.
func TestServicesWaitForTheLoader(t *testing.T) {
	rs := redistest.Start(t)
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf("127.0.0.1:%d", port)
	started := make(chan *harness.Proc, 1)
	failed := make(chan error, 1)
	go func() {
		p, err := harness.StartProc(binDir, "runner", rs.URL, harness.Options{NoScripts: true,
			Args: []string{"--admin-addr", admin, "--state-dir", t.TempDir()}})
		if err != nil {
			failed <- err
			return
		}
		started <- p
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		body, code := httpGet(admin + "/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for") && strings.Contains(body, "Redis functions of this version") {
			break
		}
		select {
		case err := <-failed:
			t.Fatal(err)
		case p := <-started:
			p.Kill()
			t.Fatal("the runner started without the store's functions")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner's /readyz does not say it waits: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	harness.Start(t, binDir, "supervisor-daemon", rs.URL, harness.Options{Env: []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}})
	select {
	case err := <-failed:
		t.Fatal(err)
	case p := <-started:
		defer p.Kill()
		if !strings.Contains(p.Output(), "supervisor-daemon of this version loads them") {
			t.Errorf("the runner's log does not say what it waited for:\n%s", p.Output())
		}
		if body, code := httpGet(admin + "/readyz"); code != http.StatusOK {
			t.Fatalf("the runner once started: %d %q", code, body)
		}
	case <-time.After(time.Minute):
		t.Fatal("the runner did not start once supervisor-daemon had loaded the functions")
	}
}

// httpGet answers an admin port's path (code 0 when it does not answer).
func httpGet(url string) (string, int) {
	resp, err := http.Get("http://" + url)
	if err != nil {
		return err.Error(), 0
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

// Acceptance (foundation 5): bad configuration gives one clear line and a non-zero exit.
func TestBadConfiguration(t *testing.T) {
	busy := harness.Start(t, binDir, "scheduler", redisSrv.URL, harness.Options{})
	cases := []struct {
		name string
		args []string
		env  []string
		want string
		code int
	}{
		{"unreachable redis", []string{"--redis-connect-timeout", "500ms"}, []string{"REDIS_URL=redis://127.0.0.1:1/0"}, "redis at redis://127.0.0.1:1/0: dial tcp 127.0.0.1:1", 1},
		{"malformed redis url", nil, []string{"REDIS_URL=localhost:6379"}, `--redis-url: "localhost:6379" is not a redis://`, 2},
		{"port in use", []string{"--grpc-addr", busy.GRPCAddr}, []string{"REDIS_URL=" + redisSrv.URL}, "address already in use", 1},
		{"unknown flag", []string{"--no-such-flag"}, nil, "flag provided but not defined: -no-such-flag", 2},
		{"bad env value", nil, []string{"SHUTDOWN_TIMEOUT=soon"}, "environment variable SHUTDOWN_TIMEOUT=\"soon\"", 2},
		{"bad log level", []string{"--log-level", "loud"}, nil, `--log-level: "loud"`, 2},
	}
	for _, s := range services {
		for _, c := range cases {
			args := append([]string{"--admin-addr", "127.0.0.1:0"}, c.args...)
			if c.name != "port in use" {
				args = append(args, "--grpc-addr", "127.0.0.1:0")
			}
			if s == "supervisor-daemon" {
				args = append(args, "--http-addr", "127.0.0.1:0")
			}
			cmd := exec.Command(filepath.Join(binDir, s), args...)
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, c.env...)
			out, err := cmd.CombinedOutput()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != c.code {
				t.Errorf("%s/%s: want exit %d, got %v\n%s", s, c.name, c.code, err, out)
				continue
			}
			text := strings.TrimSpace(string(out))
			lines := strings.Split(text, "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, s+": ") || !strings.Contains(last, c.want) {
				t.Errorf("%s/%s: last line %q does not say %q", s, c.name, last, c.want)
			}
			if strings.Contains(text, "goroutine ") || strings.Contains(text, "panic") {
				t.Errorf("%s/%s: stack trace in output:\n%s", s, c.name, text)
			}
			for _, l := range lines[:len(lines)-1] {
				if !strings.HasPrefix(l, "{") {
					t.Errorf("%s/%s: stray non-log line %q", s, c.name, l)
				}
			}
		}
	}
}
