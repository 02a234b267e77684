// Command peers is `make bench-peers`: the workloads of issue 23 run by asynq
// (github.com/hibiken/asynq, in this module only) and by this stack (tests/e2e's
// BenchmarkPeers, through the public API), against the same redis-server build, in
// alternating runs (asynq, hero, hero, asynq, …), then each figure's median and the
// ratio hero/asynq (for latencies asynq/hero: above 1 means this stack is ahead).
//
//	cd bench/peers && go run . -rounds 4
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// figures in the order printed; lower is better for the latencies.
var figures = []struct {
	name, what string
	lower      bool
}{
	{"a_jobs_per_s", "(a) independent jobs submitted one by one, until all ended (jobs/s)", false},
	{"a_submit_per_s", "    of which submission alone (jobs/s)", false},
	{"a_cpu_us_per_job", "    CPU of every process per job (µs)", true},
	{"a_cpu_us_redis", "      of which redis-server (µs)", true},
	{"a_cpu_us_client", "      of which the producers' process (µs)", true},
	{"a_cpu_us_supervisor", "      of which supervisor-daemon (µs)", true},
	{"a_cpu_us_router", "      of which router (µs)", true},
	{"a_cpu_us_runner", "      of which runner (µs)", true},
	{"a_cpu_us_executor", "      of which the executor processes (µs)", true},
	{"a_cpu_us_scheduler", "      of which scheduler (µs)", true},
	{"b_jobs_per_s", "(b) one 10,000-job flow, creation included (jobs/s)", false},
	{"b_create_s", "    of which creation (s)", true},
	{"c_run16_p50_ms", "(c) run-and-await at 16 clients, p50 (ms)", true},
	{"c_run16_p99_ms", "    p99 (ms)", true},
	{"c_run128_jobs_per_s", "    run-and-await at 128 clients (jobs/s)", false},
	{"d_hop_p50_us", "(d) dependent hop, p50 (µs)", true},
	{"d_hop_p99_us", "    p99 (µs)", true},
}

func main() {
	rounds := flag.Int("rounds", 3, "alternating rounds (each runs asynq and this stack once)")
	n := flag.Int("n", 20000, "(a): jobs")
	producers := flag.Int("c", 32, "(a): concurrent producers")
	workers := flag.Int("workers", 32, "asynq's concurrency")
	procs := flag.String("gomaxprocs", "1", `Go scheduler threads (GOMAXPROCS) of each of this stack's services, as docker-compose.yml runs them on one machine; "default": Go's own, a thread per core in each process`)
	flag.Parse()
	if err := run(*rounds, *n, *producers, *workers, *procs); err != nil {
		fmt.Fprintln(os.Stderr, "bench-peers:", err)
		os.Exit(1)
	}
}

func run(rounds, n, producers, workers int, procs string) error {
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	redisPath, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	ver, _ := exec.Command(redisPath, "--version").Output()
	fmt.Printf("redis-server: %s (%s)\n", strings.TrimSpace(string(ver)), redisPath)
	runs := map[string][]map[string]float64{}
	for r := 0; r < rounds; r++ {
		order := []string{"asynq", "hero"}
		if r%2 == 1 {
			order = []string{"hero", "asynq"}
		}
		for _, who := range order {
			t0 := time.Now()
			var f map[string]float64
			if who == "asynq" {
				f, err = asynqRun(redisPath, n, producers, workers)
			} else {
				f, err = heroRun(root, n, producers, procs)
			}
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", who, r+1, err)
			}
			runs[who] = append(runs[who], f)
			fmt.Printf("round %d %s (%.0f s):", r+1, who, time.Since(t0).Seconds())
			for _, fg := range figures {
				if v, ok := f[fg.name]; ok {
					fmt.Printf(" %s=%.1f", fg.name, v)
				}
			}
			fmt.Println()
		}
	}
	fmt.Printf("\nmedians of %d alternating runs each (n=%d, producers=%d, asynq concurrency %d, the services' GOMAXPROCS %s)\n", rounds, n, producers, workers, procs)
	fmt.Printf("%-72s %12s %12s %8s\n", "figure", "asynq", "hero", "ratio")
	aa := median(runs["asynq"], "a_jobs_per_s")
	for _, fg := range figures {
		a, h := median(runs["asynq"], fg.name), median(runs["hero"], fg.name)
		ratio := "-"
		switch {
		case fg.name == "b_jobs_per_s" && aa > 0:
			ratio = fmt.Sprintf("%.2f", h/aa) + " (vs asynq's (a))"
		case a > 0 && h > 0 && fg.lower:
			ratio = fmt.Sprintf("%.2f", a/h)
		case a > 0 && h > 0:
			ratio = fmt.Sprintf("%.2f", h/a)
		}
		fmt.Printf("%-72s %12s %12.1f %8s\n", fg.what, num(a), h, ratio)
	}
	fmt.Println("ratio: hero/asynq for rates, asynq/hero for times (above 1: this stack is ahead)")
	return nil
}

func num(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func median(runs []map[string]float64, name string) float64 {
	var v []float64
	for _, r := range runs {
		if x, ok := r[name]; ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// asynqRun starts a redis-server of its own (no persistence, as the e2e harness
// starts it) and runs asynq's workloads against it.
func asynqRun(redisPath string, n, producers, workers int) (map[string]float64, error) {
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
	defer func() { _ = os.RemoveAll(dir) }()
	srv := exec.Command(redisPath, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := srv.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return asynqFigures(addr, n, producers, workers, func() (time.Duration, time.Duration) { return selfCPU(), procCPU(srv.Process.Pid) })
}

// heroRun runs tests/e2e's BenchmarkPeers (the e2e harness builds and starts the
// binaries against a redis-server from PATH) and reads its "PEERS hero" lines. procs
// is the services' GOMAXPROCS ("default": not set).
func heroRun(root string, n, producers int, procs string) (map[string]float64, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkPeers$", "-benchtime", "1x", "-timeout", "30m", "./")
	cmd.Dir = filepath.Join(root, "tests", "e2e")
	cmd.Env = append(os.Environ(), "HERO_BENCH=1", "HERO_BENCH_PEERS=1",
		"HERO_PEERS_N="+strconv.Itoa(n), "HERO_PEERS_C="+strconv.Itoa(producers),
		// 128 run-and-await calls of one actor at once: above the default cap of 100.
		"HERO_BENCH_API_ARGS=--max-waits-per-caller 0",
		"GOWORK=") // this module runs with GOWORK=off; tests/e2e is a workspace module
	if procs != "default" {
		cmd.Env = append(cmd.Env, "HERO_TEST_GOMAXPROCS="+procs)
	}

	var outBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, tail(outBuf.String(), 40))
	}
	f := map[string]float64{}
	sc := bufio.NewScanner(&outBuf)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 4 && fields[0] == "PEERS" && fields[1] == "hero" {
			if v, err := strconv.ParseFloat(fields[3], 64); err == nil {
				f[fields[2]] = v
			}
		}
	}
	if len(f) == 0 {
		return nil, fmt.Errorf("no PEERS lines in the benchmark's output:\n%s", tail(outBuf.String(), 40))
	}
	return f, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
