package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/testutil/proctest"
)

// TestZsetListpackEntries: the tests' redis-server keeps a sorted set of up to 8
// members a listpack and makes one of 9 a skiplist (Redis's default keeps 128 in a
// listpack), as this stack's deployments run Redis: the figures of lib/store's
// benchmarks are those of that setting.
func TestZsetListpackEntries(t *testing.T) {
	s := Start(t)
	rc := s.Client(t, 0)
	ctx := context.Background()
	wantConfig(t, rc, "zset-max-listpack-entries", ZsetMaxListpackEntries)
	for members, want := range map[int]string{8: "listpack", 9: "skiplist"} {
		key := "z" + strconv.Itoa(members)
		for i := 0; i < members; i++ {
			if err := rc.ZAdd(ctx, key, redis.Z{Score: float64(i), Member: i}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if enc := rc.ObjectEncoding(ctx, key).Val(); enc != want {
			t.Errorf("a sorted set of %d members is a %q, want a %s", members, enc, want)
		}
	}
}

// TestDumpsUncompressed: the tests' redis-server DUMPs a hash's listpack as it is (a
// value of 200 bytes of one letter appears whole in the payload), as this stack's
// deployments run Redis (rdbcompression no); with Redis's default the payload holds
// it compressed with LZF (a few bytes).
func TestDumpsUncompressed(t *testing.T) {
	s := Start(t)
	rc := s.Client(t, 0)
	ctx := context.Background()
	wantConfig(t, rc, "rdbcompression", RDBCompression)
	value := strings.Repeat("a", 200)
	if err := rc.HSet(ctx, "h", "status", "started", "result", value).Err(); err != nil {
		t.Fatal(err)
	}
	dump, err := rc.Dump(ctx, "h").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dump, value) {
		t.Errorf("the DUMP of a hash (%d bytes) does not hold its 200-byte value as it is: compressed", len(dump))
	}
}

// wantConfig fails the test unless the server's setting name is want.
func wantConfig(t *testing.T, rc *redis.Client, name, want string) {
	t.Helper()
	got, err := rc.ConfigGet(context.Background(), name).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got[name] != want {
		t.Fatalf("%s %q, want %q", name, got[name], want)
	}
}

// TestServerEndsWithItsTest: the redis-server of a test process that is killed (kill
// -9, as a go test timeout ends one) ends with it, instead of running on with its port.
func TestServerEndsWithItsTest(t *testing.T) {
	if os.Getenv("REDISTEST_CHILD") == "1" {
		s := Start(t)
		fmt.Printf("pid %d\n", s.Pid())
		_, _ = io.Copy(io.Discard, os.Stdin) // until the parent kills this process
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestServerEndsWithItsTest$", "-test.v")
	// (its server's directory, which its kill leaves, in this test's)
	cmd.Env = append(os.Environ(), "REDISTEST_CHILD=1", "TMPDIR="+t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close() }()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var pid int
			if _, err := fmt.Sscanf(sc.Text(), "pid %d", &pid); err == nil {
				pids <- pid
			}
		}
		close(pids)
	}()
	deadline := time.NewTimer(time.Minute) // a safety net
	defer deadline.Stop()
	var pid int
	select {
	case pid = <-pids:
	case <-deadline.C:
		t.Fatal("the child test never started its server")
	}
	if _, state, _, ok := proctest.Stat(pid); pid == 0 || !ok || state == "Z" {
		t.Fatalf("the child's server (pid %d) is not running", pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// Its server gets SIGKILL as the child dies.
	if left, err := proctest.WaitExit([]int{pid}, time.Minute); err != nil || len(left) > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("redis-server %d still ran after its test process was killed (%v)", pid, err)
	}
}
