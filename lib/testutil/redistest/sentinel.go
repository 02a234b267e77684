package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/testutil/freeport"
)

// MasterName is the name the Sentinels of a Group monitor their master under.
const MasterName = "hero"

// Group is a Sentinel-managed Redis: a master, one replica of it, and Sentinels
// (Debian's redis-sentinel) that watch them and promote the replica when the master
// is down for a second.
type Group struct {
	Master, Replica *Server
	Sentinels       []*Sentinel
	// URL reaches the master of the moment through the Sentinels (go-redis's failover
	// URL: the first Sentinel as host, master_name, the others as addr).
	URL string

	sentinelPassword string
}

// Sentinel is a running redis-sentinel.
type Sentinel struct {
	Addr string
	dir  string
	cmd  *exec.Cmd
	done chan error
}

// StartGroup starts a master, its replica (synchronised) and n Sentinels (quorum: a
// majority of them) that know both and each other; all stopped by t.Cleanup.
func StartGroup(t testing.TB, n int, opt ...Options) *Group {
	t.Helper()
	g, err := startGroup(t, n, opt...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func startGroup(t testing.TB, n int, opt ...Options) (*Group, error) {
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		return nil, errors.New("redis-sentinel not found on PATH: install it (apt-get install redis-sentinel) or run `make deps`")
	}
	var o Options
	if len(opt) > 0 {
		o = opt[0]
	}
	if o.ACLFile != "" {
		// With ACL users, a replica replicates (and a Sentinel watches) as the test's
		// user (User, UserPassword: one with every right, "operator").
		o.ExtraArgs = append(append([]string(nil), o.ExtraArgs...), "--masteruser", o.User, "--masterauth", o.UserPassword)
	}
	g := &Group{Master: Start(t, o), sentinelPassword: o.SentinelPassword}
	ro := o
	ro.ExtraArgs = append(append([]string(nil), o.ExtraArgs...), "--replicaof", "127.0.0.1", port(g.Master.Addr))
	g.Replica = Start(t, ro)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.WaitSynced(ctx); err != nil {
		return nil, err
	}
	quorum := n/2 + 1
	for i := 0; i < n; i++ {
		s, err := startSentinel(bin, g.Master.Addr, quorum, o)
		if err != nil {
			return nil, err
		}
		t.Cleanup(s.Stop)
		g.Sentinels = append(g.Sentinels, s)
	}
	// Every Sentinel knows the replica (it can promote it) and the other Sentinels
	// (they can elect a leader), before the test may kill the master.
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Password: o.SentinelPassword})
		err := until(ctx, func() bool {
			reps, err := sc.Replicas(ctx, MasterName).Result()
			if err != nil || len(reps) == 0 {
				return false
			}
			others, err := sc.Sentinels(ctx, MasterName).Result()
			return err == nil && len(others) == n-1
		})
		_ = sc.Close()
		if err != nil {
			return nil, fmt.Errorf("sentinel %s did not discover the replica and the other sentinels: %v", s.Addr, err)
		}
	}
	g.URL = "redis://" + g.Sentinels[0].Addr + "/0?master_name=" + MasterName
	for _, s := range g.Sentinels[1:] {
		g.URL += "&addr=" + s.Addr
	}
	return g, nil
}

// WaitSynced waits until the replica's link to the master is up and it has applied
// everything the master wrote so far (its offset is the master's): replication is
// asynchronous, so a master killed before that takes its last writes with it (a
// library just loaded, a key just set), which the promoted replica then lacks.
func (g *Group) WaitSynced(ctx context.Context) error {
	mc, rc := g.Master.rawClient(), g.Replica.rawClient()
	defer func() { _, _ = mc.Close(), rc.Close() }()
	var last string
	err := until(ctx, func() bool {
		mi, err := mc.Info(ctx, "replication").Result()
		if err != nil {
			last = err.Error()
			return false
		}
		ri, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			last = err.Error()
			return false
		}
		want, got := infoField(mi, "master_repl_offset"), infoField(ri, "slave_repl_offset")
		last = fmt.Sprintf("link %s, replica at offset %s of the master's %s", infoField(ri, "master_link_status"), got, want)
		return infoField(ri, "master_link_status") == "up" && want != "" && got == want
	})
	if err != nil {
		return fmt.Errorf("the replica did not sync with its master: %v (%s)", err, last)
	}
	return nil
}

// WaitPromoted waits until the Sentinels have made the replica the master (after the
// master went down): the first Sentinel names it and it says it is the master.
func (g *Group) WaitPromoted(ctx context.Context) error {
	rc := g.Replica.rawClient()
	defer func() { _ = rc.Close() }()
	var last string
	err := until(ctx, func() bool {
		addr, err := g.MasterAddr(ctx)
		if err != nil {
			last = err.Error()
			return false
		}
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("the Sentinel names %s, the replica's role is %s", addr, infoField(info, "role"))
		return addr == g.Replica.Addr && infoField(info, "role") == "master"
	})
	if err != nil {
		return fmt.Errorf("the replica was not promoted: %v (%s)", err, last)
	}
	return nil
}

// infoField is the value of field in an INFO answer ("" when absent).
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// MasterAddr asks the first Sentinel which server is the master now.
func (g *Group) MasterAddr(ctx context.Context) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[0].Addr, Password: g.sentinelPassword})
	defer func() { _ = sc.Close() }()
	hp, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return "", err
	}
	return hp[0] + ":" + hp[1], nil
}

func startSentinel(bin, master string, quorum int, o Options) (*Sentinel, error) {
	password := o.SentinelPassword
	dir, err := os.MkdirTemp("", "redistest-sentinel-")
	if err != nil {
		return nil, err
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		p, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		s := &Sentinel{Addr: "127.0.0.1:" + strconv.Itoa(p), dir: dir}
		// down-after 3 s: at 1 s a loaded machine saw a just-promoted master "down"
		// and a second failover back to the old one.
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile \"\"\n"+
			"sentinel monitor %s 127.0.0.1 %s %d\n"+
			"sentinel down-after-milliseconds %s 3000\n"+
			"sentinel failover-timeout %s 10000\n"+
			"sentinel parallel-syncs %s 1\n",
			p, dir, MasterName, port(master), quorum, MasterName, MasterName, MasterName)
		if password != "" {
			conf += fmt.Sprintf("requirepass %q\nsentinel sentinel-pass %q\n", password, password)
		}
		if o.ACLFile != "" {
			conf += fmt.Sprintf("sentinel auth-user %s %s\nsentinel auth-pass %s %q\n", MasterName, o.User, MasterName, o.UserPassword)
		}
		path := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites it: its own file
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		if last = s.start(bin, path); last == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("start redis-sentinel: %v", last)
}

// start runs the Sentinel and waits for its "+monitor master" line: the event that
// says it listens and watches the master.
func (s *Sentinel) start(bin, conf string) error {
	s.cmd = exec.Command(bin, conf)
	s.cmd.SysProcAttr = diesWithTest()
	s.done = make(chan error, 1)
	if err := runUntilLine(s.cmd, s.done, filepath.Join(s.dir, "sentinel.log"), "+monitor master"); err != nil {
		return fmt.Errorf("redis-sentinel on %s: %v: %s", s.Addr, err, s.Log())
	}
	return nil
}

// Log returns what the Sentinel logged (its view of a failover).
func (s *Sentinel) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "sentinel.log"))
	return string(b)
}

// Stop kills the Sentinel and removes its directory.
func (s *Sentinel) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = os.RemoveAll(s.dir)
}

func port(addr string) string {
	return addr[strings.LastIndex(addr, ":")+1:]
}

// until checks cond every 20 ms until it holds or ctx ends: the state it waits for
// (a replica's link, a Sentinel's view) is only seen by asking.
func until(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
