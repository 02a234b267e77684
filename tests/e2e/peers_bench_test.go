package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// BenchmarkPeers is this stack's half of `make bench-peers` (bench/peers runs asynq's
// half and alternates the two): the workloads of issue 23 through the public API as a
// producer uses it (signed requests, TLS to the API, mutual TLS between the services),
// no-op handler jobs of the Go example executor. It prints one "PEERS hero <figure>
// <value>" line per figure. HERO_PEERS_N (default 20000) and HERO_PEERS_C (32) size (a);
// HERO_PEERS_WORKERS (256) is the jobs the runner runs at once (--concurrency, and the
// executor pool's calls in flight), HERO_PEERS_WARMUP (1000) the jobs run through (a)'s
// path before it is measured (the executor pool starts on the first); HERO_PEERS_ONLY_A=1
// stops after (a); HERO_PEERS_ONLY_C=1 runs (c) and (d) alone, after the warm-up.
func BenchmarkPeers(b *testing.B) {
	if os.Getenv("HERO_BENCH_PEERS") == "" {
		b.Skip("set HERO_BENCH_PEERS=1 (make bench-peers)")
	}
	n, conc := envInt("HERO_PEERS_N", 20000), envInt("HERO_PEERS_C", 32)
	s, c := handlerBenchStackOf(b, envInt("HERO_PEERS_WORKERS", 256))
	// gRPC calls carry the connection's session signature; HERO_PEERS_SIGN_EACH_CALL=1
	// signs each call instead (to compare the two).
	c.SignEachCall = os.Getenv("HERO_PEERS_SIGN_EACH_CALL") == "1"
	api := c.API(b)
	rdb := redisSrv.Client(b, int(ctx1))
	report := func(figure string, v float64) { fmt.Printf("PEERS hero %s %.3f\n", figure, v) }
	reportRedisSettings(b, report)

	// HERO_BENCH_PROFILE=<dir>: 4 s, or HERO_BENCH_PROFILE_SECONDS, of each service's
	// CPU (HERO_BENCH_PROFILE_KIND=trace: its execution trace), over (a) or, with
	// HERO_BENCH_PROFILE_PHASE=c16 or c128, over (c)'s 16 or 128 clients
	phase := os.Getenv("HERO_BENCH_PROFILE_PHASE")
	if phase != "" && phase != "c16" && phase != "c128" {
		b.Fatalf("HERO_BENCH_PROFILE_PHASE=%q: want c16, c128 or nothing (workload (a))", phase)
	}
	submit := producer(b, c, api)
	// The warm-up: jobs through (a)'s path, until they ended (the executor pool's
	// processes start on the first job; the connections and caches fill).
	warm := 0
	if v := os.Getenv("HERO_PEERS_WARMUP"); v != "0" {
		warm = envInt("HERO_PEERS_WARMUP", 1000)
		runParallel(b, warm, conc, submit)
		waitCount(b, rdb, keys.StatusIndex(keys.JobIndex, "finished"), int64(warm))
	}
	onlyC := os.Getenv("HERO_PEERS_ONLY_C") == "1" // (c) and (d) alone: latency
	if !onlyC {
		peersIndependent(b, s, rdb, submit, n, conc, warm, phase == "", report)
	}
	if os.Getenv("HERO_PEERS_ONLY_A") == "1" { // (a) alone: the submission's cost
		return
	}

	// (b) one 10,000-job flow, its creation included.
	if !onlyC {
		peersFlow(b, c, api, report, func() {})
	}

	// (c) run-and-await: latency at 16 clients, throughput at 128. At 16 clients each
	// call's time is also split at its job's start and end (started_at_us,
	// finished_at_us; one clock): the call to the start (submission, queue, claim), the
	// run (the executor's call), and the end to the answer (finish, notice, load).
	// runJob makes the call; with rec, it records each call's three parts (ms) in rec[i].
	runJob := func(rec [][3]float64) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			t0 := time.Now().UnixMicro()
			r, err := api.RunJob(ctx, &herov1.RunJobRequest{ContextId: ctx1, Job: &herov1.Job{FunctionName: "go#noop"}})
			if err == nil && r.Job.Status != "finished" {
				return fmt.Errorf("job.run: %s", r.Job.Status)
			}
			if err == nil && rec != nil {
				t1, j := time.Now().UnixMicro(), r.Job
				rec[i] = [3]float64{float64(j.StartedAtUs-t0) / 1000, float64(j.FinishedAtUs-j.StartedAtUs) / 1000, float64(t1-j.FinishedAtUs) / 1000}
			}
			return err
		}
	}
	stages := make([][3]float64, 4000)
	profiled := func() {}
	if phase == "c16" {
		profiled = profileServices(b, s)
	}
	lat := runParallel(b, len(stages), 16, runJob(stages))
	profiled()
	report("c_run16_p50_ms", percentile(lat, 0.50))
	report("c_run16_p99_ms", percentile(lat, 0.99))
	for k, name := range []string{"to_start", "run", "back"} {
		part := make([]float64, len(stages))
		for i := range stages {
			part[i] = stages[i][k]
		}
		report("c_run16_p50_"+name+"_ms", percentile(part, 0.50))
	}
	start := time.Now()
	cpu0 := cpuByPart(s, redisSrv.Pid())
	if phase == "c128" {
		profiled = profileServices(b, s)
	}
	runParallel(b, 10000, 128, runJob(nil))
	profiled()
	report("c_run128_jobs_per_s", 10000/time.Since(start).Seconds())
	// each part's CPU per job.run call at 128 clients (as (a)'s)
	reportCPU(report, "c_run128_cpu_us_", cpu0, cpuByPart(s, redisSrv.Pid()), 10000, "redis", "client", "supervisor", "runner", "executor")

	// (d) the dependent hop of a 200-job chain flow: a job's start after its
	// dependency's end (started_at_us − the dependency's finished_at_us).
	ids := createHandlerJobsFrom(b, c, 2_000_001, 200, true)
	c.MustCall(b, "flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": 2, "jobs": ids}}, nil)
	c.MustCall(b, "flow.start", map[string]any{"context_id": ctx1, "id": 2}, nil)
	if f := c.WaitFlow(b, ctx1, 2, 10*time.Minute); f.Status != "finished" {
		b.Fatalf("flow 2: %+v", f)
	}
	// and its step, from one job's end to the next's (finished_at_us − the dependency's
	// finished_at_us): the hop, the call to the executor and the end's write, whatever
	// moment of the start started_at_us names
	var hops, steps []float64
	for i := 1; i < len(ids); i++ {
		prev, cur := jobTimes(b, rdb, ids[i-1]), jobTimes(b, rdb, ids[i])
		hops = append(hops, float64(cur.startUs-prev.finishUs))
		steps = append(steps, float64(cur.finishUs-prev.finishUs))
	}
	report("d_hop_p50_us", percentile(hops, 0.50))
	report("d_hop_p99_us", percentile(hops, 0.99))
	report("d_step_p50_us", percentile(steps, 0.50))
}

// reportRedisSettings reports what make bench-peers holds equal on both sides: Redis's
// append-only file (redis_aof 1: on, as HERO_E2E_REDIS=stack runs it), its ACL
// users (redis_users: besides "default", the services' own) and
// zset-max-listpack-entries (redis_zset_listpack: 8, lib/testutil/redistest's) and
// rdbcompression (redis_rdb_compression: 0, off, redistest's).
func reportRedisSettings(b *testing.B, report func(string, float64)) {
	rc := redisSrv.Client(b, 0)
	aof, err := rc.ConfigGet(context.Background(), "appendonly").Result()
	if err != nil {
		b.Fatal(err)
	}
	users, err := rc.Do(context.Background(), "ACL", "USERS").StringSlice()
	if err != nil {
		b.Fatal(err)
	}
	zset, err := rc.ConfigGet(context.Background(), "zset-max-listpack-entries").Result()
	if err != nil {
		b.Fatal(err)
	}
	zn, _ := strconv.ParseFloat(zset["zset-max-listpack-entries"], 64)
	report("redis_zset_listpack", zn)
	comp, err := rc.ConfigGet(context.Background(), "rdbcompression").Result()
	if err != nil {
		b.Fatal(err)
	}
	report("redis_rdb_compression", map[string]float64{"yes": 1}[comp["rdbcompression"]])
	report("redis_aof", map[string]float64{"yes": 1}[aof["appendonly"]])
	report("redis_users", float64(len(users)))
}

// aofSize is the size of Redis's append-only file (-1 when it has none).
func aofSize(b *testing.B) int64 {
	info, err := redisSrv.Client(b, 0).Info(context.Background(), "persistence").Result()
	if err != nil {
		b.Fatal(err)
	}
	return aofSizeOf(info)
}

// aofSizeOf reads aof_current_size from INFO persistence (-1 when it is absent).
func aofSizeOf(info string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "aof_current_size:"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// peersIndependent is figure (a): n independent jobs, each submitted on its own by conc
// producers, until all ended (done: the jobs that ended before, the warm-up's). With
// profile, each service's CPU profile is taken over it (HERO_BENCH_PROFILE).
func peersIndependent(b *testing.B, s *harness.Stack, rdb *redis.Client, submit func(context.Context, int) error, n, conc, done int, profile bool, report func(string, float64)) {
	profiled := func() {}
	if profile {
		profiled = profileServices(b, s)
	}
	// HERO_BENCH_REDIS_STATS=1: every command of the submission alone in the slow log,
	// summed by script (what Redis ran while the submissions waited on it); the slow
	// log's own cost is in the figures then.
	slow := os.Getenv("HERO_BENCH_REDIS_STATS") != ""
	rc := redisSrv.Client(b, 0)
	stopLog := func() {}
	if slow {
		stopLog = logEveryCommand(b, rc)
	}
	cpu0, aof0 := cpuByPart(s, redisSrv.Pid()), aofSize(b)
	calls0, cmdCPU0 := redisCalls(b), cpuByCommand()
	sched0 := schedByPart(s, redisSrv.Pid())
	start := time.Now()
	runParallel(b, n, conc, submit)
	submitted := time.Since(start)
	sched1 := schedByPart(s, redisSrv.Pid())
	cpuSubmitted := cpuByPart(s, redisSrv.Pid())
	calls1, cmdCPU1 := redisCalls(b), cpuByCommand()
	if slow {
		stopLog() // (before the log is read: its read is not the submission's)
		fmt.Printf("Redis's commands over the submission alone (%v):\n", submitted.Round(time.Millisecond))
		printSlowlog(b, rc)
	}
	waitCount(b, rdb, keys.StatusIndex(keys.JobIndex, "finished"), int64(done+n))
	took := time.Since(start)
	cpu1, aof1 := cpuByPart(s, redisSrv.Pid()), aofSize(b)
	profiled()
	report("a_jobs_per_s", float64(n)/took.Seconds())
	if aof0 >= 0 && aof1 >= 0 {
		report("a_aof_bytes_per_job", float64(aof1-aof0)/float64(n))
	}
	report("a_submit_per_s", float64(n)/submitted.Seconds())
	// CPU per job of each part over (a) (the profiles, when taken, add a little).
	reportCPU(report, "a_cpu_us_", cpu0, cpu1, n, "redis", "client", "supervisor", "router", "runner", "executor", "scheduler")
	// of which in the kernel (system calls, wake-ups, page faults: what a guest whose
	// every kernel entry flushes the TLB makes dear)
	report("a_cpu_us_kernel", float64((cpu1["kernel"]-cpu0["kernel"]).Microseconds())/float64(n))
	// the same over the submission alone (until the last producer's answer; the runner
	// runs the jobs meanwhile, so its share and Redis's hold some of their runs)
	reportCPU(report, "a_submit_cpu_us_", cpu0, cpuSubmitted, n, "redis", "client", "supervisor", "runner", "executor")
	// where each process's threads were over the submission alone (the kernel's
	// schedstat and status): the share of its wall time on a core (_oncore) and
	// runnable, waiting for one (_waiting), that wait per job (_rqwait_us), and per job
	// the times put on a core (_slices), of which after blocking (_blocks) or after a
	// preemption (_preempted). Redis's one thread on a core or waiting for one nearly
	// all the time is a submission rate bound by Redis's work per job; on shared
	// cores each hop of a submission between processes may wait for a core too.
	for _, part := range []string{"redis", "client", "supervisor", "runner", "executor"} {
		report("a_submit_oncore_"+part, float64(sched1[part].run-sched0[part].run)/float64(submitted))
		report("a_submit_waiting_"+part, float64(sched1[part].wait-sched0[part].wait)/float64(submitted))
		d := sched1[part].wait - sched0[part].wait
		report("a_submit_rqwait_us_"+part, float64(d.Microseconds())/float64(n))
		report("a_submit_slices_per_job_"+part, float64(sched1[part].slices-sched0[part].slices)/float64(n))
		report("a_submit_blocks_per_job_"+part, float64(sched1[part].voluntary-sched0[part].voluntary)/float64(n))
		report("a_submit_preempted_per_job_"+part, float64(sched1[part].preem-sched0[part].preem)/float64(n))
	}
	// jobs per store call of supervisor-daemon's group commit (concurrent submissions)
	if calls := metric(b, s.API, "hero_api_submit_group_jobs_count"); calls > 0 {
		report("a_submit_group_jobs_avg", metric(b, s.API, "hero_api_submit_group_jobs_sum")/calls)
	}
	// jobs per claim call and runs per finish round trip of the runner (its script
	// calls' sizes: what their per-call work is shared by; warm-up included)
	for _, m := range []struct{ name, metric string }{{"a_claim_jobs_avg", "hero_runner_claim_jobs"}, {"a_finish_runs_avg", "hero_runner_finish_runs"}} {
		if calls := metric(b, s.Runner, m.metric+"_count"); calls > 0 {
			report(m.name, metric(b, s.Runner, m.metric+"_sum")/calls)
		}
	}
	if os.Getenv("HERO_BENCH_CMDSTATS") != "" {
		printSubmitCost(n, calls0, calls1, cmdCPU0, cmdCPU1)
	}
}

// producer is how (a)'s producers submit a job: the Go client's Submit (hero.Client,
// one client for all, as a program with many producing goroutines has it), which
// sends them over one SubmitJobStream; with HERO_PEERS_SUBMIT_CALLS=1 a SubmitJob call
// each (to compare the two). HERO_PEERS_SIGN_EACH_CALL=1 makes the client sign each
// call, which also makes its Submit a call. HERO_PEERS_SUBMIT_WINDOW sets the client's
// Config.SubmitWindow.
func producer(b *testing.B, c *harness.Client, api herov1.CoordinatorClient) func(ctx context.Context, i int) error {
	if os.Getenv("HERO_PEERS_SUBMIT_CALLS") == "1" {
		return func(ctx context.Context, i int) error {
			_, err := api.SubmitJob(ctx, &herov1.SubmitJobRequest{ContextId: ctx1, Job: &herov1.Job{FunctionName: "go#noop"}})
			return err
		}
	}
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, AdminSecret: c.Secret, Context: ctx1,
		TLS: harness.APITLS(), SignEachCall: c.SignEachCall, SubmitWindow: envInt("HERO_PEERS_SUBMIT_WINDOW", 0)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sc.Close() })
	return func(ctx context.Context, i int) error {
		_, err := sc.Submit(ctx, &model.Job{FunctionName: "go#noop"}, hero.SubmitOptions{})
		return err
	}
}

// BenchmarkPeersFlow runs figure (b) of BenchmarkPeers alone (HERO_PEERS_WORKERS as
// there), with per-phase timings
// (HERO_BENCH_PROFILE=<dir>: 4 s, or HERO_BENCH_PROFILE_SECONDS, of each service's CPU from the flow's creation on;
// HERO_BENCH_PROFILE_RUN=1: from its start on).
func BenchmarkPeersFlow(b *testing.B) {
	if os.Getenv("HERO_BENCH_PEERS") == "" {
		b.Skip("set HERO_BENCH_PEERS=1")
	}
	s, c := handlerBenchStackOf(b, envInt("HERO_PEERS_WORKERS", 256))
	api := c.API(b)
	report := func(figure string, v float64) { fmt.Printf("PEERS hero %s %.3f\n", figure, v) }
	profiled, profileRun := func() {}, os.Getenv("HERO_BENCH_PROFILE_RUN") != ""
	if !profileRun {
		profiled = profileServices(b, s)
	}
	cpu0 := stackCPU(b, s)
	var cpu1 map[string]time.Duration
	rc := redisSrv.Client(b, 0)
	atStart := func() {
		if os.Getenv("HERO_BENCH_CMDSTATS") != "" {
			rc.ConfigResetStat(context.Background())
		}
		if os.Getenv("HERO_BENCH_REDIS_STATS") != "" { // every command in the slow log
			rc.ConfigSet(context.Background(), "slowlog-log-slower-than", "0")
			rc.ConfigSet(context.Background(), "slowlog-max-len", "2000000")
			rc.SlowLogReset(context.Background())
		}
		cpu1 = stackCPU(b, s)
		if profileRun {
			profiled = profileServices(b, s)
		}
	}
	peersFlow(b, c, api, report, atStart)
	cpu2 := stackCPU(b, s)
	profiled()
	if os.Getenv("HERO_BENCH_CMDSTATS") != "" { // Redis's commands of the start and run
		fmt.Println(rc.Info(context.Background(), "commandstats").Val())
	}
	if os.Getenv("HERO_BENCH_REDIS_STATS") != "" {
		printSlowlog(b, rc)
	}
	// CPU per job of each process (this stack's own, not the machine's other load).
	for _, phase := range []struct {
		name     string
		from, to map[string]time.Duration
	}{{"create", cpu0, cpu1}, {"run", cpu1, cpu2}} {
		for _, name := range []string{"redis", "supervisor-daemon", "scheduler", "router", "runner", "executors"} {
			report(fmt.Sprintf("b_%s_cpu_us_per_job_%s", phase.name, name), float64((phase.to[name]-phase.from[name]).Microseconds())/peersFlowJobs)
		}
	}
}

// reportCPU reports each part's CPU from cpu0 to cpu1 per job of n (<prefix><part>),
// and their sum (<prefix>per_job).
func reportCPU(report func(string, float64), prefix string, cpu0, cpu1 map[string]time.Duration, n int, parts ...string) {
	var all time.Duration
	for _, part := range parts {
		d := cpu1[part] - cpu0[part]
		all += d
		report(prefix+part, float64(d.Microseconds())/float64(n))
	}
	report(prefix+"per_job", float64(all.Microseconds())/float64(n))
}

// stackCPU is the CPU time each service of the stack (the runner's executor processes
// as "executors") and its Redis server have used so far.
func stackCPU(b *testing.B, s *harness.Stack) map[string]time.Duration {
	b.Helper()
	type proc struct {
		ppid int
		cpu  time.Duration
	}
	procs := map[int]proc{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		st := string(raw)
		f := strings.Fields(st[strings.LastIndexByte(st, ')')+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		procs[pid] = proc{ppid, time.Duration(ut+stime) * 10 * time.Millisecond}
	}
	out := map[string]time.Duration{}
	for _, p := range []*harness.Proc{s.API, s.Scheduler, s.Router, s.Runner} {
		pid := p.Cmd.Process.Pid
		out[p.Name] = procs[pid].cpu
		for child, c := range procs {
			for up := c.ppid; up > 1 && child != pid; up = procs[up].ppid {
				if up == pid {
					out["executors"] += c.cpu
					break
				}
			}
		}
	}
	info := redisSrv.Client(b, 0).Info(context.Background(), "cpu").Val()
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				secs, _ := strconv.ParseFloat(v, 64)
				out["redis"] += time.Duration(secs * float64(time.Second))
			}
		}
	}
	return out
}

// peersFlow is figure (b): one 10,000-job flow, its creation included (gRPC CreateJobs
// of 500 jobs each, then flow.create), reported as jobs/s with the phases. atStart is
// called just before flow.start.
func peersFlow(b *testing.B, c *harness.Client, api herov1.CoordinatorClient, report func(string, float64), atStart func()) {
	start := time.Now()
	ids := createHandlerJobsGRPC(b, api, 1_000_001, peersFlowJobs, peersFlowCreators)
	c.MustCall(b, "flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": 1, "jobs": ids}}, nil)
	created := time.Since(start)
	atStart()
	c.MustCall(b, "flow.start", map[string]any{"context_id": ctx1, "id": 1}, nil)
	started := time.Since(start)
	if f := c.WaitFlow(b, ctx1, 1, 10*time.Minute); f.Status != "finished" {
		b.Fatalf("flow 1: %+v", f)
	}
	took := time.Since(start)
	report("b_jobs_per_s", peersFlowJobs/took.Seconds())
	report("b_create_s", created.Seconds())
	report("b_start_s", (started - created).Seconds())
	report("b_run_s", (took - started).Seconds())
}

// peersFlowJobs is the size of figure (b)'s flow.
const peersFlowJobs = 10000

// peersFlowCreators is how many of (b)'s creation batches are in flight at once.
const peersFlowCreators = 4

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// runParallel makes n calls from conc goroutines and returns each call's latency (ms).
func runParallel(b *testing.B, n, conc int, call func(ctx context.Context, i int) error) []float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lat := make([]float64, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				if err := call(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				lat[i] = float64(time.Since(t0).Microseconds()) / 1000
			}
		}()
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
	return lat
}

// waitCount waits until the sorted set holds n members of standalone jobs that end:
// it follows the notices of their ends (coord:jobdone, one a finish call, naming its
// jobs) and reads the count again once they name as many jobs as were missing, or a
// second after the last read (a safety net), never before (a read each millisecond
// cost the producers' process ~10 µs of CPU per job of (a) while its jobs ran after
// their submission, which counted as the producers' CPU).
func waitCount(b *testing.B, rdb *redis.Client, key string, n int64) {
	b.Helper()
	ctx := context.Background()
	sub := rdb.Subscribe(ctx, keys.JobDone)
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil { // subscribed before the first read
		b.Fatal(err)
	}
	notices := sub.Channel()
	deadline := time.NewTimer(10 * time.Minute)
	defer deadline.Stop()
	for {
		got := rdb.ZCard(ctx, key).Val()
		if got >= n {
			return
		}
		safety := time.NewTimer(time.Second)
		for named := int64(0); named < n-got; {
			select {
			case m := <-notices:
				named += int64(len(strings.Fields(m.Payload)))
				continue
			case <-safety.C:
			case <-deadline.C:
				b.Fatalf("%s did not reach %d members", key, n)
			}
			break
		}
		safety.Stop()
	}
}

type times struct{ startUs, finishUs int64 }

// jobTimes reads a job's start and end in microseconds (the _us fields; the _ms ones
// times 1000 when the _us ones are missing).
func jobTimes(b *testing.B, rdb *redis.Client, id uint32) times {
	b.Helper()
	v := rdb.HMGet(context.Background(), keys.Job(1, id), "started_at_us", "finished_at_us", "started_at_ms", "finished_at_ms").Val()
	num := func(x any, scale int64) int64 {
		s, _ := x.(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n * scale
	}
	t := times{num(v[0], 1), num(v[1], 1)}
	if t.startUs == 0 || t.finishUs == 0 {
		t = times{num(v[2], 1000), num(v[3], 1000)}
	}
	return t
}

// createHandlerJobsFrom creates n no-op handler jobs with ids from first on, in JSON-RPC
// batches of 500 (a chain: each depends on the one before), one batch at a time.
func createHandlerJobsFrom(b *testing.B, c *harness.Client, first uint32, n int, chain bool) []uint32 {
	ids := make([]uint32, n)
	for start := 0; start < n; start += 500 {
		var batch []map[string]any
		for i := start; i < start+500 && i < n; i++ {
			id := first + uint32(i)
			job := map[string]any{"id": id, "function_name": "go#noop"}
			if chain && i > 0 {
				job["depends"] = []uint32{id - 1}
			}
			batch = append(batch, map[string]any{"jsonrpc": "2.0", "id": i, "method": "job.create", "params": map[string]any{"context_id": ctx1, "job": job}})
			ids[i] = id
		}
		body, _ := json.Marshal(batch)
		if resp, err := c.Raw(string(body)); err == nil {
			b.Fatalf("batch answer should be a list, got %v", resp)
		}
	}
	return ids
}

// createHandlerJobsGRPC creates n no-op handler jobs (ids first…) with gRPC CreateJobs
// calls of 500 jobs each, inflight calls at once (as a producer that creates a large
// flow does: the calls are independent, each job names its id), and returns their ids.
func createHandlerJobsGRPC(b *testing.B, api herov1.CoordinatorClient, first uint32, n, inflight int) []uint32 {
	ids := make([]uint32, n)
	var reqs []*herov1.CreateJobsRequest
	for start := 0; start < n; start += 500 {
		r := &herov1.CreateJobsRequest{ContextId: ctx1}
		for i := start; i < start+500 && i < n; i++ {
			ids[i] = first + uint32(i)
			r.Jobs = append(r.Jobs, &herov1.Job{Id: ids[i], FunctionName: "go#noop"})
		}
		reqs = append(reqs, r)
	}
	runParallel(b, len(reqs), inflight, func(ctx context.Context, k int) error {
		out, err := api.CreateJobs(ctx, reqs[k])
		if err != nil {
			return err
		}
		for _, it := range out.Items {
			if it.Error != nil {
				return fmt.Errorf("create job: %s", it.Error.Message)
			}
		}
		return nil
	})
	return ids
}

// redisCalls reads Redis's calls by command (INFO commandstats; a script's commands
// count as well as the FCALL that ran them), each command's time ("usec:<command>":
// an FCALL's includes its script's commands), "usec" the time of them all, and its
// socket reads and writes (INFO stats: "reads", "writes").
func redisCalls(b *testing.B) map[string]int64 {
	b.Helper()
	info, err := redisSrv.Client(b, 0).Info(context.Background(), "commandstats", "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	num := func(s string) int64 {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			out["reads"] = num(v)
		}
		if v, ok := strings.CutPrefix(line, "total_writes_processed:"); ok {
			out["writes"] = num(v)
		}
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, rest, _ := strings.Cut(rest, ",usec=")
		usec, _, _ := strings.Cut(rest, ",")
		out[strings.TrimPrefix(name, "cmdstat_")] = num(n)
		out["usec:"+strings.TrimPrefix(name, "cmdstat_")] = num(usec)
		out["usec"] += num(usec)
	}
	return out
}

// printSubmitCost prints, for the submission phase of (a) (make bench-peers
// HERO_BENCH_CMDSTATS=1), per submitted job: Redis's calls by command with their time
// (FCALL's includes its scripts' commands: what it has beyond the commands called only
// from scripts is Lua's own work), its command time and socket reads/writes (every
// service's: the runner, router and scheduler work meanwhile), and supervisor-daemon's
// CPU.
func printSubmitCost(n int, calls0, calls1 map[string]int64, cpu0, cpu1 map[string]procCPU) {
	var names []string
	for name := range calls1 {
		if calls1[name] > calls0[name] && !strings.HasPrefix(name, "usec:") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		per := func(k string) float64 { return float64(calls1[k]-calls0[k]) / float64(n) }
		if _, timed := calls1["usec:"+name]; timed {
			fmt.Printf("PEERS-REDIS a_submit %s %.3f per job, %.2f µs per job\n", name, per(name), per("usec:"+name))
			continue
		}
		fmt.Printf("PEERS-REDIS a_submit %s %.3f per job\n", name, per(name))
	}
	var sup time.Duration
	for pid, a := range cpu1 {
		if a.name == "supervisor-daem" || a.name == "supervisor-daemon" {
			sup += a.cpu - cpu0[pid].cpu
		}
	}
	fmt.Printf("PEERS-CPU a_submit supervisor-daemon %.1f us/job\n", float64(sup.Microseconds())/float64(n))
}
