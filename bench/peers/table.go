package main

import (
	"fmt"
	"sort"
	"strconv"
)

// figures in the order printed; lower is better for the latencies and CPU times.
var figures = []struct {
	name, what string
	lower      bool
}{
	{"a_jobs_per_s", "(a) independent jobs submitted one by one, until all ended (jobs/s)", false},
	{"a_submit_per_s", "(a) of which submission alone (jobs/s)", false},
	{"a_cpu_us_per_job", "(a) CPU of every process per job (µs)", true},
	{"a_cpu_us_redis", "(a) of which redis-server (µs)", true},
	{"a_cpu_us_client", "(a) of which the producers' process (µs)", true},
	{"a_cpu_us_worker", "(a) of which asynq's worker process (µs)", true},
	{"a_cpu_us_supervisor", "(a) of which supervisor-daemon (µs)", true},
	{"a_cpu_us_runner", "(a) of which runner (µs)", true},
	{"a_cpu_us_executor", "(a) of which the executor processes (µs)", true},
	{"a_cpu_us_router", "(a) of which router (µs)", true},
	{"a_cpu_us_scheduler", "(a) of which scheduler (µs)", true},
	{"a_cpu_us_kernel", "(a) of all of it, in the kernel (µs)", true},
	{"a_aof_bytes_per_job", "(a) bytes Redis appended to its append-only file per job", true},
	{"b_jobs_per_s", "(b) one 10,000-job flow, creation included (jobs/s; asynq: its (a))", false},
	{"b_create_s", "(b) of which creation (s)", true},
	{"c_run16_p50_ms", "(c) run-and-await at 16 clients, p50 (ms)", true},
	{"c_run16_p99_ms", "(c) run-and-await at 16 clients, p99 (ms)", true},
	{"c_run128_jobs_per_s", "(c) run-and-await at 128 clients (jobs/s)", false},
	{"c_run128_cpu_us_per_job", "(c) CPU of every process per call at 128 clients (µs)", true},
	{"d_hop_p50_us", "(d) dependent hop, p50 (µs)", true},
	{"d_hop_p99_us", "(d) dependent hop, p99 (µs)", true},
}

// printTable prints each figure's median per side and this stack's ratio to each
// asynq side, as a Markdown table (docs/benchmarks.md takes it as printed).
func printTable(ran []side, runs map[string][]map[string]float64, rounds int, p params) {
	// the columns: asynq's two, then this stack
	var sides []side
	for _, name := range []string{"asynq", "asynq10", "hero"} {
		for _, s := range ran {
			if s.name == name {
				sides = append(sides, s)
			}
		}
	}
	fmt.Printf("\nmedians of %d runs each: (a) %d jobs from %d producers after %d to warm up; %d workers a side; GOMAXPROCS %s\n\n",
		rounds, p.n, p.producers, p.warmup, p.workers, p.procs)
	fmt.Print("| figure |")
	for _, s := range sides {
		fmt.Printf(" %s |", s.title)
	}
	fmt.Print(" ratio to asynq | ratio to tuned asynq |\n|---|")
	for range sides {
		fmt.Print("---:|")
	}
	fmt.Println("---:|---:|")
	for _, fg := range figures {
		med := map[string]float64{}
		for _, s := range sides {
			med[s.name] = median(runs[s.name], fg.name)
		}
		if med["hero"] == 0 && med["asynq"] == 0 && med["asynq10"] == 0 {
			continue
		}
		fmt.Printf("| %s |", fg.what)
		for _, s := range sides {
			fmt.Printf(" %s |", num(med[s.name]))
		}
		for _, peer := range []string{"asynq", "asynq10"} {
			fmt.Printf(" %s |", ratio(fg.name, fg.lower, med["hero"], med[peer], median(runs[peer], "a_jobs_per_s")))
		}
		fmt.Println()
	}
	fmt.Println("\nratio: this stack/asynq for rates, asynq/this stack for times (above 1: this stack is ahead); (b) against asynq's (a)")
}

// ratio is this stack's figure h against a peer's a (aa: the peer's (a), which (b)
// is compared with).
func ratio(name string, lower bool, h, a, aa float64) string {
	switch {
	case name == "b_jobs_per_s" && aa > 0 && h > 0:
		return fmt.Sprintf("%.2f", h/aa)
	case a <= 0 || h <= 0:
		return "–"
	case lower:
		return fmt.Sprintf("%.2f", a/h)
	default:
		return fmt.Sprintf("%.2f", h/a)
	}
}

func num(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
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
