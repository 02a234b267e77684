package redisacl

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// users is a redis-server started with the ACL file Init writes, and a client per user.
type users struct {
	t   *testing.T
	dir string
	srv *redistest.Server
}

func startUsers(t *testing.T, extra ...string) *users {
	t.Helper()
	dir := t.TempDir()
	if _, err := Init(dir); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t, redistest.Options{ExtraArgs: append([]string{"--aclfile", filepath.Join(dir, ACLFile)}, extra...)})
	return &users{t, dir, srv}
}

func (u *users) password(user string) string {
	p, err := os.ReadFile(filepath.Join(u.dir, PasswordFile(user)))
	if err != nil {
		u.t.Fatal(err)
	}
	return strings.TrimSpace(string(p))
}

// as is a client logged in as user, in database db.
func (u *users) as(user string, db int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: u.srv.Addr, Username: user, Password: u.password(user), DB: db, MaxRetries: -1})
	u.t.Cleanup(func() { _ = c.Close() })
	return c
}

// dryRun asks Redis whether user may run a command (ACL DRYRUN, as the operator):
// "" when it may, else Redis's reason.
func (u *users) dryRun(user string, args ...any) string {
	res, err := u.as("operator", 0).Do(context.Background(), append([]any{"ACL", "DRYRUN", user}, args...)...).Text()
	if err != nil {
		u.t.Fatalf("ACL DRYRUN %s %v: %v", user, args, err)
	}
	if res == "OK" {
		return ""
	}
	return res
}

// subscribe subscribes c to a channel and returns Redis's answer.
func subscribe(ctx context.Context, c *redis.Client, channel string) error {
	sub := c.Subscribe(ctx)
	defer func() { _ = sub.Close() }()
	if err := sub.Subscribe(ctx, channel); err != nil {
		return err
	}
	_, err := sub.Receive(ctx)
	return err
}

// refused: Redis refused a command for the user's rights (NOPERM; inside a script, the
// script's error names the key it may not access).
func refused(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't access") ||
		strings.Contains(err.Error(), "no permissions"))
}

// sampleKeys are a key of each kind lib/keys names (a constant of keys.go; a prefix
// gets an id), found by parsing keys.go: a key added there is checked here at once.
func sampleKeys(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "keys", "keys.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		v, err := strconv.Unquote(lit.Value)
		if err != nil || strings.ContainsAny(v, " %\"") || !isKey(v) {
			return true
		}
		if strings.HasSuffix(v, ":") {
			v += "1"
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
		return true
	})
	for _, want := range []string{"actor:1", "coord:operator_secrets", "coord:nonce:1", "job:1", "coord:wake:msg_out"} {
		if !slices.Contains(out, want) {
			t.Fatalf("keys.go gave no %s: %v", want, out)
		}
	}
	// The keys made of several parts.
	return append(out, "hero:job:1", keys.WakeRunner(1, "queue:sh"), keys.ExecUnhealthy("python"), keys.WakeStop("x"),
		keys.RunnerContexts(1), keys.RunnerProcsOf(1), keys.GatewayLease("pk"), keys.Owner("runner", "r1"),
		keys.Inbound("pk", "message:1:1"), keys.Processing("w"), keys.StopList("w"), keys.DAG(1), keys.FlowResults(1),
		keys.JobLog(1, 1), keys.JobLogWatch(1, 1), keys.RunnerProcs(1), keys.JobMessages(1, 1), keys.FlowMessages(1), keys.StatusIndex(keys.JobIndex, "started"),
		keys.StatusIndex(keys.FlowIndex, "started"), keys.PinnedQueue(1, "sh"), keys.JobSeq(1), keys.Unique("u"), keys.Nonce(1, "n"))
}

// isKey: s starts like a key of lib/keys.
func isKey(s string) bool {
	for _, p := range []string{"coord:", "hero:", keys.MsgOut, keys.MsgIn, keys.ActorPrefix, keys.ContextPrefix, keys.FlowPrefix,
		keys.MessagePrefix, keys.RunnerPrefix, keys.JobPrefix, keys.QueuePrefix} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// isAuth: the key is authentication material (AuthKeys).
func isAuth(key string) bool {
	for _, p := range AuthKeys {
		if key == p || strings.HasSuffix(p, "*") && strings.HasPrefix(key, strings.TrimSuffix(p, "*")) {
			return true
		}
	}
	return false
}

// Every key of lib/keys, for each user: supervisor-daemon and the operator reach all;
// scheduler, router and runner write every key but the authentication material (none)
// and the contexts' records (read only), and Hero Dispatcher keys only the runner;
// mycelium-gateway its lease, the messages (the acknowledgement), the schema and
// functions records, and reads jobs and contexts; Hero Dispatcher clients only hero:*.
func TestKeyPatterns(t *testing.T) {
	u := startUsers(t)
	gateway := []string{keys.SchemaVersion, keys.Functions}
	for _, key := range sampleKeys(t) {
		for _, user := range []string{"supervisor-daemon", "scheduler", "router", "runner", "mycelium-gateway", "dispatcher", "operator"} {
			write, read := true, true
			switch {
			case user == "supervisor-daemon" || user == "operator":
			case user == "dispatcher":
				write = strings.HasPrefix(key, "hero:")
				read = write
			case user == "mycelium-gateway":
				write = slices.Contains(gateway, key) || strings.HasPrefix(key, "coord:gateway:") || strings.HasPrefix(key, keys.MessagePrefix)
				read = write || strings.HasPrefix(key, keys.JobPrefix) || strings.HasPrefix(key, keys.ContextPrefix)
			case isAuth(key) || key == keys.AuthChanged:
				// keys.AuthChanged is supervisor-daemon's own pub/sub channel: as a key
				// name it falls among the coord:a… names kept from the services.
				write, read = false, false
			case strings.HasPrefix(key, keys.ContextPrefix):
				write = false
			case strings.HasPrefix(key, "hero:"):
				write, read = user == "runner", user == "runner"
			}
			if got := u.dryRun(user, "HSET", key, "f", "v") == ""; got != write {
				t.Errorf("%s HSET %s: allowed %v, want %v", user, key, got, write)
			}
			if got := u.dryRun(user, "HGET", key, "f") == ""; got != read {
				t.Errorf("%s HGET %s: allowed %v, want %v", user, key, got, read)
			}
		}
	}
}

// supervisor-daemon may run every command another service may (a function it loaded
// runs with the caller's rights: a part of its own), on every key and channel.
func TestSupervisorDaemonHasEveryServicesRights(t *testing.T) {
	rules := map[string][]string{}
	for _, u := range Users() {
		rules[u.Name] = strings.Fields(u.Rules)
	}
	sd := rules["supervisor-daemon"]
	if !slices.Contains(sd, "~*") || !slices.Contains(sd, "&*") {
		t.Fatalf("supervisor-daemon's keys and channels: %v", sd)
	}
	for _, s := range services {
		for _, r := range rules[s.name] {
			if strings.HasPrefix(r, "+") && !slices.Contains(sd, r) {
				t.Errorf("%s may %s, supervisor-daemon may not", s.name, r)
			}
		}
	}
}

// With each service's password: what it may do, and what it is refused — above all,
// with the runner's: reading the operator secrets' HMAC key or verifiers, adding a
// verifier, rewriting an actor's key, writing a context's roles, replacing or deleting
// the store's functions (scripts every service runs), reconfiguring Redis.
func TestWhatEachServiceMayDo(t *testing.T) {
	u := startUsers(t)
	ctx := context.Background()
	op := u.as("operator", 0)
	op.Set(ctx, keys.OperatorSecretKey, "00112233445566778899aabbccddeeff", 0)
	op.HSet(ctx, keys.OperatorSecrets, "op_1", `{"verifier":"x"}`)
	op.HSet(ctx, "actor:1", "id", 1, "pubkey", "aa")
	lib := func(name string) string {
		return "#!lua name=" + name + "\nredis.register_function('" + name + "', function() return 1 end)"
	}
	if err := op.FunctionLoad(ctx, lib("hero_claim_start_000000000000")).Err(); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"scheduler", "router", "runner", "mycelium-gateway"} {
		c := u.as(svc, 0)
		for name, err := range map[string]error{
			"read the HMAC key":          c.Get(ctx, keys.OperatorSecretKey).Err(),
			"read the verifiers":         c.HGetAll(ctx, keys.OperatorSecrets).Err(),
			"add a verifier":             c.HSet(ctx, keys.OperatorSecrets, "op_2", `{"verifier":"y"}`).Err(),
			"read an actor":              c.HGetAll(ctx, "actor:1").Err(),
			"rewrite an actor's key":     c.HSet(ctx, "actor:1", "pubkey", "bb").Err(),
			"record a nonce":             c.SetNX(ctx, keys.Nonce(1, "n"), 1, time.Minute).Err(),
			"write a context's roles":    u.as(svc, 1).HSet(ctx, "context:1", "admins", "[666]").Err(),
			"replace a store's function": c.FunctionLoadReplace(ctx, lib("hero_claim_start_000000000000")).Err(),
			"load a function":            c.FunctionLoad(ctx, lib("hero_evil_000000000000")).Err(),
			"delete a function":          c.FunctionDelete(ctx, "hero_claim_start_000000000000").Err(),
			"flush the functions":        c.FunctionFlush(ctx).Err(),
			"read the configuration":     c.ConfigGet(ctx, "*").Err(),
			"flush a database":           c.FlushDB(ctx).Err(),
			"flush everything":           c.FlushAll(ctx).Err(),
			"list every key":             c.Keys(ctx, "*").Err(),
			"change the users":           c.Do(ctx, "ACL", "SETUSER", svc, "+@all").Err(),
			"stop Redis":                 c.Do(ctx, "SHUTDOWN", "NOSAVE").Err(),
			"evaluate on actors":         c.Eval(ctx, "return redis.call('HSET', KEYS[1], 'pubkey', 'cc')", []string{"actor:1"}).Err(),
			"evaluate with a hidden key": c.Eval(ctx, "return redis.call('HGETALL', 'coord:operator_secrets')", nil).Err(),
		} {
			if !refused(err) {
				t.Errorf("%s could %s: %v", svc, name, err)
			}
		}
	}
	if v := op.HGet(ctx, "actor:1", "pubkey").Val(); v != "aa" {
		t.Fatalf("actor:1's key became %q", v)
	}
	if n := op.HLen(ctx, keys.OperatorSecrets).Val(); n != 1 {
		t.Fatalf("%d verifiers", n)
	}
	// What they may: their functions (FCALL), their keys and channels.
	runner, sched, gw := u.as("runner", 2), u.as("scheduler", 2), u.as("mycelium-gateway", 2)
	for name, err := range map[string]error{
		"runner: call a function":           runner.FCall(ctx, "hero_claim_start_000000000000", nil).Err(),
		"runner: list the functions":        runner.FunctionList(ctx, redis.FunctionListQuery{}).Err(),
		"runner: write a job":               runner.HSet(ctx, "job:1:1", "status", "started").Err(),
		"runner: read a context":            runner.HGetAll(ctx, "context:2").Err(),
		"runner: the dispatcher protocol":   runner.LPush(ctx, "hero:work_queue:w", "1").Err(),
		"runner: the control channel":       subscribe(ctx, runner, keys.Control),
		"runner: a tailed log's append":     runner.Publish(ctx, keys.LogAppended, "2:1:1").Err(),
		"scheduler: publish a flow's end":   sched.Publish(ctx, keys.FlowDone, "2:1").Err(),
		"scheduler: the due queue":          sched.ZAdd(ctx, keys.Due, redis.Z{Score: 1, Member: "x"}).Err(),
		"mycelium-gateway: acknowledge":     gw.HSet(ctx, "message:1:1", "status", "acknowledged").Err(),
		"mycelium-gateway: its lease":       gw.Set(ctx, keys.GatewayLease("pk"), "me", time.Second).Err(),
		"mycelium-gateway: read a job":      gw.HGetAll(ctx, "job:1:1").Err(),
		"supervisor-daemon: replace":        u.as("supervisor-daemon", 0).FunctionLoadReplace(ctx, lib("hero_claim_start_000000000000")).Err(),
		"supervisor-daemon: flush database": u.as("supervisor-daemon", 3).FlushDB(ctx).Err(),
		"supervisor-daemon: an actor":       u.as("supervisor-daemon", 0).HSet(ctx, "actor:1", "pubkey", "aa").Err(),
	} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, err := range map[string]error{
		"scheduler: the dispatcher protocol":  sched.LPush(ctx, "hero:work_queue:w", "1").Err(),
		"mycelium-gateway: write a job":       gw.HSet(ctx, "job:1:1", "status", "finished").Err(),
		"router: publish a job's end":         u.as("router", 2).Publish(ctx, keys.JobDone, "2:1:1").Err(),
		"dispatcher: a store's key":           u.as("dispatcher", 2).HSet(ctx, "job:1:1", "x", 1).Err(),
		"dispatcher: replace a function":      u.as("dispatcher", 0).FunctionLoadReplace(ctx, lib("hero_x_000000000000")).Err(),
		"dispatcher: publish on coord:":       u.as("dispatcher", 0).Publish(ctx, keys.Control, "x").Err(),
		"router: listen to job ends":          subscribe(ctx, u.as("router", 0), keys.JobDone),
		"dispatcher: read the configuration":  u.as("dispatcher", 0).ConfigGet(ctx, "*").Err(),
		"scheduler: unblock another's client": sched.Do(ctx, "CLIENT", "UNBLOCK", 1).Err(),
	} {
		if !refused(err) {
			t.Errorf("%s: %v, want NOPERM", name, err)
		}
	}
	anon := redis.NewClient(&redis.Options{Addr: u.srv.Addr, MaxRetries: -1})
	defer func() { _ = anon.Close() }()
	if err := anon.Set(ctx, "job:1:1", 1, 0).Err(); err == nil {
		t.Fatal("a client that did not log in can write")
	}
}

// The store opens as each service's user: supervisor-daemon loads the store's
// functions, every other service waits for them (it may not load them) and then runs
// them on its keys.
func TestStoreOpensAsEachUser(t *testing.T) {
	u := startUsers(t)
	ctx := context.Background()
	open := func(user string, wait bool) *store.Store {
		s, err := store.Open(ctx, store.Options{URL: "redis://" + user + "@" + u.srv.Addr + "/0", Password: u.password(user),
			ConnectTimeout: time.Minute, Log: zerolog.Nop(), WaitScripts: wait})
		if err != nil {
			t.Fatalf("store.Open as %s: %v", user, err)
		}
		t.Cleanup(s.Close)
		return s
	}
	if _, err := store.Open(ctx, store.Options{URL: "redis://runner@" + u.srv.Addr + "/0", Password: u.password("runner"),
		ConnectTimeout: time.Minute, Log: zerolog.Nop()}); !refused(err) {
		t.Fatalf("the runner's user loaded the store's functions: %v", err)
	}
	runner := open("runner", true)
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := runner.WaitScripts(wctx, func(string) {}); err == nil {
		t.Fatal("the runner found functions no one loaded")
	}
	open("supervisor-daemon", false)
	wctx, cancel = context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := runner.WaitScripts(wctx, func(string) {}); err != nil {
		t.Fatal(err)
	}
	db, err := runner.Ctx(3)
	if err != nil {
		t.Fatal(err)
	}
	// The number of databases is known without CONFIG GET (which no service may run).
	if _, err := runner.Ctx(redistest.Databases); err == nil || !strings.Contains(err.Error(), "beyond the databases") {
		t.Fatalf("context %d on a server of %d databases: %v", redistest.Databases, redistest.Databases, err)
	}
	if _, err := db.ClaimStarts(ctx, keys.Queue("sh"), "w", time.Minute, []string{""}, store.Wake{}); err != nil {
		t.Fatalf("the runner's claim: %v", err)
	}
	for _, svc := range []string{"scheduler", "router", "mycelium-gateway"} {
		if err := open(svc, true).WaitScripts(wctx, func(string) {}); err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
	}
	if n := len(u.as("operator", 0).ACLLog(ctx, 100).Val()); n != 1 {
		t.Fatalf("ACL LOG holds %d entries, want 1 (the runner's refused FUNCTION LOAD): %v", n, u.as("operator", 0).ACLLog(ctx, 100).Val())
	}
}

// Init makes a password per user (the default user's too) and keeps them; the ACL file
// holds no password in clear; a client that does not log in is refused.
func TestInitKeepsPasswords(t *testing.T) {
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
}

// Redis replays its append-only file as the default user: with the users on, a
// restart keeps the transactions a service wrote (MULTI/EXEC).
func TestAOFSurvivesARestartWithUsers(t *testing.T) {
	u := startUsers(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := context.Background()
	if _, err := u.as("scheduler", 0).TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "job:1:1", "1", 0)
		p.Set(ctx, "job:1:2", "2", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := u.srv.Down(redistest.DownKill); err != nil {
		t.Fatal(err)
	}
	if err := u.srv.Up(); err != nil {
		t.Fatal(err)
	}
	vals, err := u.as("operator", 0).MGet(ctx, "job:1:1", "job:1:2").Result()
	if err != nil || vals[0] != "1" || vals[1] != "2" {
		t.Fatalf("after the restart: %v %v", vals, err)
	}
}

// The users exist on every server: over a placement map (context 2 on a second server)
// and a Sentinel group, supervisor-daemon loads the store's functions into every server,
// the runner waits for them and runs on each; after a failover the promoted replica
// has the users and the functions (they replicate) and the runner's claims go on.
func TestUsersOnEveryServerOfPlacementAndSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make test-quick): this test starts a Sentinel group and a placed server; make test runs it")
	}
	dir := t.TempDir()
	if _, err := Init(dir); err != nil {
		t.Fatal(err)
	}
	u := &users{t: t, dir: dir}
	opt := redistest.Options{ACLFile: filepath.Join(dir, ACLFile), User: "operator", UserPassword: u.password("operator")}
	g := redistest.StartGroup(t, 1, opt)
	placed := redistest.Start(t, opt)
	ctx := context.Background()
	open := func(user string, wait bool) *store.Store {
		su := strings.Replace(g.URL, "redis://", "redis://"+user+"@", 1)
		s, err := store.Open(ctx, store.Options{URL: su, Placement: "2-2=redis://" + user + "@" + placed.Addr + "/0", Password: u.password(user),
			ConnectTimeout: time.Minute, Log: zerolog.Nop(), WaitScripts: wait})
		if err != nil {
			t.Fatalf("store.Open as %s: %v", user, err)
		}
		t.Cleanup(s.Close)
		return s
	}
	open("supervisor-daemon", false)
	runner := open("runner", true)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := runner.WaitScripts(wctx, func(string) {}); err != nil {
		t.Fatal(err)
	}
	claim := func(ctxID uint32) error {
		db, err := runner.Ctx(ctxID)
		if err != nil {
			return err
		}
		_, err = db.ClaimStarts(ctx, keys.Queue("sh"), "w", time.Minute, []string{""}, store.Wake{})
		return err
	}
	for _, c := range []uint32{2, 3} {
		if err := claim(c); err != nil {
			t.Fatalf("the runner's claim in context %d: %v", c, err)
		}
	}
	if err := g.Master.Down(redistest.DownKill); err != nil {
		t.Fatal(err)
	}
	if err := g.WaitPromoted(wctx); err != nil {
		t.Fatal(err)
	}
	// Replication is asynchronous: a replica promoted before it had applied the
	// libraries loaded just before its master died lacks them (the library text is
	// over a megabyte, compiled by the replica as it applies it). Make that certain:
	// the runner's claim meets "Function not found", a passing fault, and goes on once
	// supervisor-daemon's check has loaded them into the new master.
	if err := g.Replica.Client(t, 0).FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		err := claim(3)
		if err == nil {
			break
		}
		if !fault.Transient(err) || time.Now().After(deadline) {
			t.Fatalf("the runner's claim after the failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if now, err := g.MasterAddr(ctx); err != nil || now != g.Replica.Addr {
		t.Fatalf("the master after the failover: %s %v, want the replica %s", now, err, g.Replica.Addr)
	}
}
