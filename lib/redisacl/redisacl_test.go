package redisacl

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// On a real redis-server with the ACL file: a client that does not log in is refused; each service's
// user runs what the stack needs (scripts, pub/sub, other databases; the store
// opens with it) and is refused the dangerous commands; only supervisor-daemon may
// FLUSHDB; Hero Dispatcher clients reach only hero:* keys. A second Init keeps the
// passwords.
func TestUsersOnARealRedis(t *testing.T) {
	dir := t.TempDir()
	made, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(made) != len(Users())+1 { // and the default user
		t.Fatalf("made %v", made)
	}
	pw, _ := os.ReadFile(filepath.Join(dir, PasswordFile("scheduler")))
	if again, err := Init(dir); err != nil || len(again) != 0 {
		t.Fatalf("a second Init made %v (%v)", again, err)
	}
	if pw2, _ := os.ReadFile(filepath.Join(dir, PasswordFile("scheduler"))); string(pw2) != string(pw) {
		t.Fatal("a second Init changed a password")
	}
	acl, _ := os.ReadFile(filepath.Join(dir, ACLFile))
	if strings.Contains(string(acl), strings.TrimSpace(string(pw))) {
		t.Fatal("the ACL file holds a password in clear")
	}
	srv := redistest.Start(t, redistest.Options{ExtraArgs: []string{"--aclfile", filepath.Join(dir, ACLFile)}})
	ctx := context.Background()
	as := func(user string) *redis.Client {
		p, _ := os.ReadFile(filepath.Join(dir, PasswordFile(user)))
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: strings.TrimSpace(string(p)), MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	anon := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer func() { _ = anon.Close() }()
	if err := anon.Set(ctx, "x", 1, 0).Err(); err == nil {
		t.Fatal("the default user can write")
	}
	sched := as("scheduler")
	for name, err := range map[string]error{
		"set":      sched.Set(ctx, "job:1:1", "v", 0).Err(),
		"eval":     sched.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"job:1:1"}).Err(),
		"publish":  sched.Publish(ctx, "coord:control", "x").Err(),
		"script":   sched.ScriptLoad(ctx, "return 1").Err(),
		"function": sched.FunctionLoadReplace(ctx, "#!lua name=hero_y\nredis.register_function('hero_y', function() return 1 end)").Err(),
	} {
		if err != nil {
			t.Errorf("scheduler %s: %v", name, err)
		}
	}
	db3 := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "scheduler", Password: strings.TrimSpace(string(pw)), DB: 3})
	defer func() { _ = db3.Close() }()
	if err := db3.Set(ctx, "flow:1", "x", 0).Err(); err != nil {
		t.Errorf("scheduler in database 3: %v", err)
	}
	for name, err := range map[string]error{
		"config get": sched.ConfigGet(ctx, "requirepass").Err(),
		"flushall":   sched.FlushAll(ctx).Err(),
		"flushdb":    sched.FlushDB(ctx).Err(),
		"keys":       sched.Keys(ctx, "*").Err(),
		"module":     sched.Do(ctx, "MODULE", "LIST").Err(),
		"shutdown":   sched.Do(ctx, "SHUTDOWN", "NOSAVE").Err(),
		"acl":        sched.Do(ctx, "ACL", "LIST").Err(),
	} {
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("scheduler %s: %v, want NOPERM", name, err)
		}
	}
	if err := as("supervisor-daemon").FlushDB(ctx).Err(); err != nil {
		t.Errorf("supervisor-daemon FLUSHDB: %v", err)
	}
	disp := as("dispatcher")
	if err := disp.Set(ctx, "hero:job:1", "x", 0).Err(); err != nil {
		t.Errorf("dispatcher on hero:*: %v", err)
	}
	if err := disp.Set(ctx, "job:1:1", "x", 0).Err(); err == nil {
		t.Error("a dispatcher client wrote outside hero:*")
	}
	// The store's scripts are functions the services call by name: a dispatcher
	// client may not replace or delete one.
	for name, err := range map[string]error{
		"function load":   disp.FunctionLoadReplace(ctx, "#!lua name=hero_x\nredis.register_function('hero_x', function() return 1 end)").Err(),
		"function delete": disp.FunctionDelete(ctx, "hero_x").Err(),
		"function flush":  disp.FunctionFlush(ctx).Err(),
	} {
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("dispatcher %s: %v, want NOPERM", name, err)
		}
	}
	if err := as("operator").ConfigGet(ctx, "databases").Err(); err != nil {
		t.Errorf("operator CONFIG GET: %v", err)
	}
	// The store opens as a service user (it reads no CONFIG).
	st, err := store.Open(ctx, store.Options{URL: "redis://scheduler@" + srv.Addr + "/0", Password: strings.TrimSpace(string(pw)),
		ConnectTimeout: 5 * time.Second, Log: zerolog.Nop()})
	if err != nil {
		t.Fatalf("store.Open as scheduler: %v", err)
	}
	st.Close()
}

// Redis replays its append-only file as the default user: with the users on, a
// restart keeps the transactions a service wrote (MULTI/EXEC).
func TestAOFSurvivesARestartWithUsers(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(dir); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t, redistest.Options{ExtraArgs: []string{"--aclfile", filepath.Join(dir, ACLFile), "--appendonly", "yes", "--appendfsync", "always"}})
	ctx := context.Background()
	login := func(user string) *redis.Client {
		p, _ := os.ReadFile(filepath.Join(dir, PasswordFile(user)))
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: strings.TrimSpace(string(p)), MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	if _, err := login("scheduler").TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "a", "1", 0)
		p.Set(ctx, "b", "2", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Down(redistest.DownKill); err != nil {
		t.Fatal(err)
	}
	if err := srv.Up(); err != nil {
		t.Fatal(err)
	}
	vals, err := login("operator").MGet(ctx, "a", "b").Result()
	if err != nil || vals[0] != "1" || vals[1] != "2" {
		t.Fatalf("after the restart: %v %v", vals, err)
	}
}
