package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// asynqUser is the Redis user asynq logs in as: its own keys (asynq:…) and channels,
// every command, as each of this stack's services has a user of its own
// (lib/redisacl) and Redis checks every command's keys against it.
const asynqUser = "asynq"

// redisArgs are the settings both sides' redis-server runs with, as
// docker-compose.yml and scripts/local-stack.sh run it: ACL users from a file, an
// append-only file written to disk every second, sorted sets of more than 8 members
// as skiplists (zset-max-listpack-entries 8), DUMPs and RDB files uncompressed
// (rdbcompression no; asynq makes no DUMP), no TLS; RDB snapshots off (as the
// e2e harness's, tests/e2e/harness ACLRedisOptions: no fork at a random point of a
// run).
func redisArgs(port int, dir, aclFile string) []string {
	return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
		"--zset-max-listpack-entries", "8", "--rdbcompression", "no", "--aclfile", aclFile}
}

// redisServer is asynq's redis-server.
type redisServer struct {
	cmd                    *exec.Cmd
	dir, addr              string
	defaultPass, asynqPass string
}

// startRedis starts a redis-server with redisArgs and two users: "default" (every
// right, for the benchmark's own check of the ACL log) and asynqUser.
func startRedis(redisPath string) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "bench-peers-redis")
	if err != nil {
		return nil, err
	}
	rs := &redisServer{dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), defaultPass: password(), asynqPass: password()}
	acl := fmt.Sprintf("user default on #%s ~* &* +@all\nuser %s on #%s ~asynq:* resetchannels &asynq:* +@all\n",
		sha(rs.defaultPass), asynqUser, sha(rs.asynqPass))
	aclFile := filepath.Join(dir, "users.acl")
	if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	rs.cmd = exec.Command(redisPath, redisArgs(port, dir, aclFile)...)
	if err := rs.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := rs.ping(); err == nil {
			return rs, nil
		} else if time.Now().After(deadline) {
			rs.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", rs.addr, err)
		}
	}
}

func (rs *redisServer) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: rs.addr, Password: rs.defaultPass, DisableIdentity: true})
}

func (rs *redisServer) ping() error {
	c := rs.client()
	defer func() { _ = c.Close() }()
	ctx, cancel := ctxTimeout()
	defer cancel()
	return c.Ping(ctx).Err()
}

// checkACLLog fails when Redis refused asynq's user a command or key (its ACL log), as
// the e2e harness checks this stack's users (HERO_E2E_REDIS=secure or stack).
func (rs *redisServer) checkACLLog() error {
	c := rs.client()
	defer func() { _ = c.Close() }()
	ctx, cancel := ctxTimeout()
	defer cancel()
	entries, err := c.ACLLog(ctx, 16).Result()
	if err != nil {
		return fmt.Errorf("ACL LOG: %w", err)
	}
	for _, e := range entries {
		if e.Reason != "auth" {
			return fmt.Errorf("redis refused user %s: %s %q (%d times)", e.Username, e.Reason, e.Object, e.Count)
		}
	}
	return nil
}

// settings reports what make bench-peers holds equal on both sides (as this stack's
// BenchmarkPeers does): the append-only file (redis_aof 1: on), the ACL users and
// zset-max-listpack-entries (redis_zset_listpack), rdbcompression (redis_rdb_compression:
// 1 on, 0 off).
func (rs *redisServer) settings(out map[string]float64) error {
	c := rs.client()
	defer func() { _ = c.Close() }()
	ctx, cancel := ctxTimeout()
	defer cancel()
	aof, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		return err
	}
	users, err := c.Do(ctx, "ACL", "USERS").StringSlice()
	if err != nil {
		return err
	}
	zset, err := c.ConfigGet(ctx, "zset-max-listpack-entries").Result()
	if err != nil {
		return err
	}
	out["redis_zset_listpack"], _ = strconv.ParseFloat(zset["zset-max-listpack-entries"], 64)
	comp, err := c.ConfigGet(ctx, "rdbcompression").Result()
	if err != nil {
		return err
	}
	out["redis_rdb_compression"] = map[string]float64{"yes": 1}[comp["rdbcompression"]]
	out["redis_aof"] = map[string]float64{"yes": 1}[aof["appendonly"]]
	out["redis_users"] = float64(len(users))
	return nil
}

// aofSize is the size of the append-only file (-1 when Redis has none).
func (rs *redisServer) aofSize() int64 {
	c := rs.client()
	defer func() { _ = c.Close() }()
	ctx, cancel := ctxTimeout()
	defer cancel()
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "aof_current_size:"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

func (rs *redisServer) pid() int { return rs.cmd.Process.Pid }

func (rs *redisServer) stop() {
	_ = rs.cmd.Process.Kill()
	_ = rs.cmd.Wait()
	_ = os.RemoveAll(rs.dir)
}

// password is a random password.
func password() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (Go 1.24)
	return hex.EncodeToString(b)
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
