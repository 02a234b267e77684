package harness

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Replicas is two (or more) replicas of each of the four single-node services against
// one Redis: the schedulers are reached by the routers and the APIs through the list
// of their addresses (round robin over the healthy ones), the routers and runners have
// ids of their own.
type Replicas struct {
	*Stack              // the first replica of each; its API serves Setup and Client
	Schedulers, Routers []*Proc
	Runners, APIs       []*Proc
	SchedulerTarget     string // the --scheduler-addr every router and API is given
}

// StartReplicas starts n replicas of scheduler, router, runner and supervisor-daemon
// against redisURL, with the stack's usual test flags plus opt's.
func StartReplicas(t testing.TB, binDir, redisURL string, n int, opt StackOptions) *Replicas {
	t.Helper()
	r := &Replicas{Stack: &Stack{t: t, BinDir: binDir, RedisURL: redisURL, Args: map[string][]string{}}}
	env := []string{"HERO_ADMIN_SECRET=" + AdminSecret}
	start := func(name string, args ...string) *Proc {
		return Start(t, binDir, name, redisURL, Options{Args: args, Env: env})
	}
	var addrs []string
	for i := 0; i < n; i++ {
		p := start("scheduler", append([]string{"--retry-base", "100ms", "--retry-cap", "1s"}, opt.SchedulerArgs...)...)
		r.Schedulers = append(r.Schedulers, p)
		addrs = append(addrs, p.GRPCAddr)
	}
	r.SchedulerTarget = strings.Join(addrs, ",")
	for i := 0; i < n; i++ {
		r.Routers = append(r.Routers, start("router", append([]string{"--lease", "3s", "--scheduler-addr", r.SchedulerTarget,
			"--router-id", fmt.Sprintf("router-r%d", i+1)}, opt.RouterArgs...)...))
		r.Runners = append(r.Runners, start("runner", append([]string{"--lease", "3s", "--heartbeat", "1s", "--kill-grace", "200ms",
			"--state-dir", t.TempDir(), "--worker-id", fmt.Sprintf("runner-r%d", i+1)}, opt.RunnerArgs...)...))
		r.APIs = append(r.APIs, start("supervisor-daemon", append([]string{"--scheduler-addr", r.SchedulerTarget}, opt.APIArgs...)...))
	}
	r.Scheduler, r.Router, r.Runner, r.API = r.Schedulers[0], r.Routers[0], r.Runners[0], r.APIs[0]
	return r
}

// ClientOf returns a client of one API replica acting as an actor.
func (r *Replicas) ClientOf(api *Proc, actor uint32) *Client {
	c := &Client{URL: APIURL(api), GRPCAddr: api.GRPCAddr, Actor: actor}
	if actor != 0 {
		c.Key = ActorKey(actor)
	}
	return c
}

// All returns every replica of every service.
func (r *Replicas) All() []*Proc {
	var out []*Proc
	for _, ps := range [][]*Proc{r.Schedulers, r.Routers, r.Runners, r.APIs} {
		out = append(out, ps...)
	}
	return out
}

// Metric sums the samples of a metric (every label set whose text contains each of
// match) on a process's /metrics.
func Metric(p *Proc, name string, match ...string) (float64, error) {
	resp, err := http.Get("http://" + p.AdminAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		if !containsAll(line, match) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %v", p.Name, line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}
