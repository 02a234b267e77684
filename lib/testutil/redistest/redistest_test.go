package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
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
