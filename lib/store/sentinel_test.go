package store_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// Issue 20: a store opened on a Sentinel URL follows a failover. The master is killed
// (kill -9); the store's writes meet passing faults (refused, broken connections)
// until the Sentinel promotes the replica, then land on it — the contexts' databases
// and DB 0 alike, through both pools. What a server that became a replica answers to
// a write (READONLY, also from inside a script) and to a blocked pop it cut short
// (UNBLOCKED) is a passing fault too, so that a service retries it.
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make test-quick): this test waits for a Sentinel failover; make test runs it")
	}
	g := redistest.StartGroup(t, 1)
	ctx := context.Background()
	s, err := store.Open(ctx, store.Options{URL: g.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := mustCtx(t, s, 3)
	before, err := g.MasterAddr(ctx)
	if err != nil || before != g.Master.Addr {
		t.Fatalf("master before the failover: %q %v, want %s", before, err, g.Master.Addr)
	}

	if err := g.Master.Down(redistest.DownKill); err != nil {
		t.Fatal(err)
	}
	// Write as a service does: a passing fault is retried with backoff, anything else
	// fails the test.
	write := func(what string, f func(context.Context) error) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		var b fault.Backoff
		for {
			err := f(wctx)
			if err == nil {
				return
			}
			if !fault.Transient(err) {
				t.Fatalf("%s: %v is not a passing fault", what, err)
			}
			if !b.Sleep(wctx) {
				t.Fatalf("%s: no success within a minute after the master died: %v", what, err)
			}
		}
	}
	write("create context 4", func(c context.Context) error {
		_, _, err := s.CreateContext(c, &model.Context{ID: 4, Admins: []uint32{1}}, "operator")
		return err
	})
	write("create a job in context 3", func(c context.Context) error {
		_, _, err := s.CreateJob(c, &model.Job{ID: 7, CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "sh"}, "1")
		return err
	})
	after, err := g.MasterAddr(ctx)
	if err != nil || after != g.Replica.Addr {
		t.Fatalf("master after the failover: %q %v, want the replica %s", after, err, g.Replica.Addr)
	}
	// The writes are on the promoted replica.
	if n := g.Replica.Client(t, 3).Exists(ctx, "job:1:7").Val(); n != 1 {
		t.Errorf("job:1:7 on the promoted replica: %d", n)
	}
	if n := g.Replica.Client(t, 4).Exists(ctx, "context:4").Val(); n != 1 {
		t.Errorf("context:4 on the promoted replica: %d", n)
	}
	if _, err := db.LoadJob(ctx, 1, 7); err != nil {
		t.Errorf("load the job through the store: %v", err)
	}

	// The killed master comes back; the Sentinel makes it a replica of the new master.
	// What a client still pointed at it gets is a passing fault.
	// A Sentinel makes it a replica in one MULTI … EXEC that ends by killing the
	// clients (CLIENT KILL): the MONITOR feed shows SLAVEOF or is cut by that kill —
	// or the change was done before the feed started.
	waitSentinelsName(t, g, g.Replica.Addr)
	if err := g.Master.Up(); err != nil {
		t.Fatal(err)
	}
	seen := monitor(t, g.Master.Options())
	roleOf := func() string {
		c := redis.NewClient(g.Master.Options())
		defer func() { _ = c.Close() }()
		return fmt.Sprint(c.Do(ctx, "ROLE").Val())
	}
	waitDemoted(t, g, seen, roleOf)
	old := redis.NewClient(g.Master.Options())
	defer func() { _ = old.Close() }()
	readonly := []error{
		old.Set(ctx, "k", "v", 0).Err(),
		redis.NewScript("redis.call('SELECT', 0); return redis.call('LPUSH', KEYS[1], 'x')").Run(ctx, old, []string{"l"}).Err(),
	}
	for _, err := range readonly {
		if err == nil || !fault.Transient(err) {
			t.Errorf("a write on a demoted master: %v, want a passing fault", err)
		}
	}

	// A pop blocked on a master that is turned into a replica is cut short (UNBLOCKED).
	blocked := make(chan error, 1)
	nm := redis.NewClient(g.Replica.Options())
	defer func() { _ = nm.Close() }()
	seenOnNew := monitor(t, g.Replica.Options())
	go func() { blocked <- nm.BLPop(ctx, 30*time.Second, "nothing").Err() }()
	if err := seenOnNew("blpop"); err != nil {
		t.Fatal(err)
	}
	if err := redis.NewClient(g.Replica.Options()).SlaveOf(ctx, "127.0.0.1", strings.Split(g.Master.Addr, ":")[1]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err == nil || !fault.Transient(err) {
		t.Errorf("a blocked pop on a master turned replica: %v, want a passing fault", err)
	}
}

// monitor watches a server's commands (MONITOR, on a connection of its own, once
// the server said +OK); the func it returns waits until the server has run one of
// cmds — a blocking pop has then blocked, a transaction is done (one thread: any
// client's next command runs after).
func monitor(t *testing.T, opt *redis.Options) func(cmds ...string) error {
	t.Helper()
	conn, err := net.DialTimeout("tcp", opt.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	return func(cmds ...string) error {
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return fmt.Errorf("the server did not run %v: %v", cmds, err)
			}
			for _, cmd := range cmds {
				if strings.Contains(strings.ToLower(l), `"`+cmd+`"`) {
					return nil
				}
			}
		}
	}
}

// A Sentinel URL names its master and takes no other parameter.
func TestSentinelURLRefused(t *testing.T) {
	for _, u := range []string{
		"redis://127.0.0.1:26379/0?master_name=",
		"redis://127.0.0.1:26379/0?master_name=m&db=3",
		"redis://127.0.0.1:26379/0?master_name=m&addr=nohostport",
		"redis://127.0.0.1:26379/5?master_name=m",
	} {
		_, err := store.Open(context.Background(), store.Options{URL: u, ConnectTimeout: time.Second, Log: zerolog.Nop()})
		if err == nil {
			t.Errorf("%s: opened", u)
		}
	}
}

// Sentinels that require a password: a store opened without it is refused at once
// with what to do about it (not after the whole connect timeout, as a Sentinel that
// does not answer would be), with a wrong one likewise, and with the right one it
// works on the master the Sentinels name; the Sentinels' password is theirs alone
// (the master here has none).
func TestSentinelPassword(t *testing.T) {
	g := redistest.StartGroup(t, 1, redistest.Options{SentinelPassword: "sentinel-secret"})
	ctx := context.Background()
	for _, c := range []struct{ password, want string }{
		{"", "--redis-sentinel-password-file"},
		{"wrong", "refused"},
	} {
		start := time.Now()
		_, err := store.Open(ctx, store.Options{URL: g.URL, SentinelPassword: c.password, ConnectTimeout: 2 * time.Minute, Log: zerolog.Nop()})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("password %q: Open: %v, want an error naming %q", c.password, err, c.want)
		}
		if strings.Contains(err.Error(), "sentinel-secret") {
			t.Fatalf("the error shows the password: %v", err)
		}
		t.Logf("password %q: %v", c.password, err)
		if took := time.Since(start); took > time.Minute {
			t.Errorf("password %q: refused after %v, retried towards the 2-minute ConnectTimeout: a refused login is no passing fault", c.password, took)
		}
	}
	s, err := store.Open(ctx, store.Options{URL: g.URL, SentinelPassword: "sentinel-secret", ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := mustCtx(t, s, 4)
	if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Set(ctx, "k", "v", 0).Err() }); err != nil {
		t.Fatal(err)
	}
	if v := g.Master.Client(t, 4).Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("the write did not land on the master: %q", v)
	}
}

// waitSentinelsName waits until every Sentinel of g names addr as the master: one that
// still believed in the old master when it came back would make the new master its
// replica (seen under load). Each Sentinel's +switch-master message wakes the wait.
func waitSentinelsName(t *testing.T, g *redistest.Group, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sn := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		sub := sc.Subscribe(ctx, "+switch-master")
		if _, err := sub.Receive(ctx); err != nil { // subscribed: no switch is missed from here
			t.Fatalf("subscribe to sentinel %s: %v", sn.Addr, err)
		}
		for {
			hp, err := sc.GetMasterAddrByName(ctx, redistest.MasterName).Result()
			if err == nil && len(hp) == 2 && hp[0]+":"+hp[1] == addr {
				break
			}
			if _, err := sub.ReceiveMessage(ctx); err != nil {
				t.Fatalf("sentinel %s does not name the new master within a minute: %v %v\n%s", sn.Addr, hp, err, sn.Log())
			}
		}
		_ = sub.Close()
		_ = sc.Close()
	}
}

// waitDemoted waits until the returned old master's ROLE says it is a replica: its
// MONITOR feed wakes the wait (a feed cut short by the Sentinel's CLIENT KILL is
// opened again), ROLE decides, within a deadline.
func waitDemoted(t *testing.T, g *redistest.Group, seen func(...string) error, roleOf func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for r := roleOf(); !strings.Contains(r, "slave"); r = roleOf() {
		if time.Now().After(deadline) {
			t.Fatalf("the old master is not a replica within 60 s of its return: %s\n%s", r, g.Sentinels[0].Log())
		}
		if err := seen("slaveof", "replicaof"); err != nil {
			seen = monitor(t, g.Master.Options()) // cut: watch again, then look
		}
	}
}
