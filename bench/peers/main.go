// Command peers is `make bench-peers`: the workloads of issue 23 run by asynq
// (github.com/hibiken/asynq, in this module only) and by this stack (tests/e2e's
// BenchmarkPeers, through the public API), with the same settings on both sides: the
// same worker count, the same redis-server build and settings (ACL users, an
// append-only file), a warm-up, the same GOMAXPROCS for the processes that run the
// jobs. asynq runs twice per round, with its defaults and tuned (its polls at 10 ms).
// Each round runs the three in turn (asynq, hero, asynq tuned; the next round the
// other way round), then each figure's median and the ratios of this stack to each
// asynq (for latencies asynq/hero: above 1 means this stack is ahead), and the machine.
//
//	cd bench/peers && go run . -rounds 3
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// params are a run's settings, the same for every side.
type params struct {
	n, producers, workers, warmup int
	procs                         string
}

// side is one of the three: this stack, or asynq with a poll (0: its defaults).
type side struct {
	name, title string
	poll        time.Duration
}

func main() {
	rounds := flag.Int("rounds", 3, "rounds (each runs asynq, this stack and tuned asynq once)")
	var p params
	flag.IntVar(&p.n, "n", 20000, "(a): jobs")
	flag.IntVar(&p.producers, "c", 32, "(a): concurrent producers")
	flag.IntVar(&p.workers, "workers", 32, "jobs run at once on each side: asynq's Concurrency; the runner's --concurrency and its executor pool's calls in flight")
	flag.IntVar(&p.warmup, "warmup", 1000, "jobs each side runs through (a)'s path before (a) is measured")
	flag.StringVar(&p.procs, "gomaxprocs", "1", `GOMAXPROCS of the processes that run the jobs: asynq's worker process, each of this stack's services (as docker-compose.yml runs them on one machine); "default": Go's own`)
	poll := flag.Duration("poll", 10*time.Millisecond, "tuned asynq's TaskCheckInterval and DelayedTaskCheckInterval")
	only := flag.String("sides", "asynq,hero,asynq10", "the sides to run, of asynq (defaults), hero (this stack) and asynq10 (tuned)")
	worker := flag.Bool("asynq-worker", false, "(internal) be asynq's worker process")
	flag.Parse()
	var err error
	if *worker {
		err = runWorker()
	} else {
		err = run(*rounds, p, *poll, strings.Split(*only, ","))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-peers:", err)
		os.Exit(1)
	}
}

func run(rounds int, p params, poll time.Duration, only []string) error {
	if rounds < 1 || p.n < 1 || p.producers < 1 || p.workers < 1 || p.warmup < 0 || poll <= 0 {
		return fmt.Errorf("-rounds, -n, -c, -workers and -poll must be positive, -warmup at least 0")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	redisPath, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	m := describeMachine(root, redisPath)
	m.print()
	var sides []side
	for _, s := range []side{
		{"asynq", "asynq v0.26 (defaults)", 0},
		{"hero", "this stack", 0},
		{"asynq10", fmt.Sprintf("asynq v0.26 (%s polls)", poll), poll},
	} {
		if slices.Contains(only, s.name) {
			sides = append(sides, s)
		}
	}
	if len(sides) == 0 {
		return fmt.Errorf("-sides %q: none of asynq, hero, asynq10", strings.Join(only, ","))
	}
	runs := map[string][]map[string]float64{}
	for r := 0; r < rounds; r++ {
		for k := range sides {
			s := sides[k]
			if r%2 == 1 {
				s = sides[len(sides)-1-k]
			}
			t0 := time.Now()
			f, err := runSide(s, root, redisPath, p)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", s.name, r+1, err)
			}
			runs[s.name] = append(runs[s.name], f)
			printRun(r+1, s.name, time.Since(t0), f)
		}
	}
	m.loadAfter = loadAvg()
	printTable(sides, runs, rounds, p)
	fmt.Printf("\nload average before %s, after %s\n", m.loadBefore, m.loadAfter)
	return nil
}

func runSide(s side, root, redisPath string, p params) (map[string]float64, error) {
	if s.name == "hero" {
		return heroRun(root, p)
	}
	return asynqRun(redisPath, p, s.poll)
}

func printRun(round int, name string, took time.Duration, f map[string]float64) {
	fmt.Printf("round %d %s (%.0f s):", round, name, took.Seconds())
	for _, k := range []string{"redis_aof", "redis_users", "redis_zset_listpack", "redis_rdb_compression"} {
		fmt.Printf(" %s=%.0f", k, f[k])
	}
	for _, fg := range figures {
		if v, ok := f[fg.name]; ok {
			fmt.Printf(" %s=%.1f", fg.name, v)
		}
	}
	fmt.Println()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
