package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/redisacl"
	"github.com/hero-coordinator/hero/lib/store"
)

// redisCPU is the CPU time Redis's main thread has used (user + system).
func redisCPU(b *testing.B) time.Duration {
	info := srv.Client(b, 0).Info(context.Background(), "cpu").Val()
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_user_main_thread:", "used_cpu_sys_main_thread:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// redisBusy is the time Redis has spent executing commands (commandstats), without
// its socket reads and writes; a script's inner commands are counted in the script.
func redisBusy(b *testing.B) time.Duration {
	info := srv.Client(b, 0).Info(context.Background(), "commandstats").Val()
	var usec float64
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		switch name {
		case "hset", "hget", "hmget", "hgetall", "hdel", "hincrby", "zadd", "zrem", "zscore", "xadd", "lrem", "lpush", "rpop", "lmove",
			"incr", "exists", "sadd", "publish", "append", "strlen", "select":
			// counted inside the scripts or transactions that called them, when they did
			// (plain calls of these are rare on this path: the transactions' are in exec)
			continue
		case "info":
			continue // the benchmark's own questions
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				usec += f
			}
		}
	}
	return time.Duration(usec * float64(time.Microsecond))
}

// callgrindDump asks a redis-server run under valgrind's callgrind to write the counts
// of what it did since the last dump, named after the stage (HERO_PATH_CALLGRIND=1:
// instruction counts are the same run after run, where this machine's timings vary by
// ±20%; docs/benchmarks.md tells how to run Redis so).
func callgrindDump(b *testing.B, stage string) {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, stage)
	// Only this test's server: callgrind_control without a pid dumps every process run
	// under callgrind on the machine (another run of this script included).
	var pid string
	for _, line := range strings.Split(srv.Client(b, 0).Info(context.Background(), "server").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid = v
		}
	}
	if pid == "" {
		b.Fatal("redis-server's process_id not found in INFO server")
	}
	out, err := exec.Command("callgrind_control", "--dump="+name, pid).CombinedOutput()
	if err != nil || strings.Contains(string(out), "No active callgrind") {
		b.Fatalf("HERO_PATH_CALLGRIND is set, but no redis-server runs under callgrind (callgrind_control: %v: %s)", err, out)
	}
}

// BenchmarkJobPathRedis drives 10,000 handler jobs of one flow through the Redis side
// of every step the services take — start, dispatch (256 per script, which routes the
// jobs onto their queue), the runner's claim-and-start (32) and finish (a group of
// 32, which applies the ends: the runner's default, --apply-ends; with
// HERO_PATH_VIA_SCHEDULER=1 the router's claim of the results (64) and their ack, and
// the scheduler's completion (a group of 64), follow instead) — one stage after the
// other, and prints what each stage costs Redis per job: its CPU (with the socket
// work) and its command time. It measures Redis's share of the end-to-end handler
// benchmark without the services' noise.
func BenchmarkJobPathRedis(b *testing.B) {
	s, n := pathBench(b)
	p := newJobPath(b, s, n)
	f := p.setup(s)
	if p.callgrind {
		callgrindDump(p.b, "setup")
	}
	b.ResetTimer()
	jobs, startedAt := p.start(f)
	p.measure("dispatch (256 a script)", func() {
		for i := 0; i < n; i += 256 {
			_, err := p.db.DispatchStarted(p.ctx, 1, 1, jobs[i:min(i+256, n)], "scheduler", startedAt) // as the scheduler's start does
			p.step(err)
		}
	})
	p.runJobs(keys.Queue("go"))
	if !p.apply {
		ends := p.claimResults()
		p.measure("scheduler: complete (64)", func() {
			for _, group := range ends {
				res, errs := p.db.CompleteNodes(p.ctx, group)
				for i := range res {
					p.step(errs[i])
					if !res[i].Applied {
						b.Fatalf("end %+v not applied", group[i])
					}
				}
			}
		})
	}
	b.StopTimer()
	fl, err := p.db.LoadFlow(p.ctx, 1)
	p.step(err)
	if fl.Status != model.FlowFinished {
		b.Fatalf("flow %s", fl.Status)
	}
	p.report("handler jobs of one flow")
}

// jobPath is BenchmarkJobPathRedis's run: n jobs of flow 1 in context 9 (db), and
// what each stage cost Redis so far.
type jobPath struct {
	b         *testing.B
	ctx       context.Context
	db        *store.DB
	n         int
	callgrind bool // HERO_PATH_CALLGRIND: the counts are callgrind's
	// batch: the jobs a claim takes and a finish ends together (HERO_PATH_BATCH,
	// default 32): a runner's calls under load; smaller ones show each call's own cost
	batch int
	// apply: the runner's finish applies the successful ends itself (its default,
	// --apply-ends); HERO_PATH_VIA_SCHEDULER=1: the router claims the result messages
	// and the scheduler completes them, as with --apply-ends=false.
	apply  bool
	stages []*pathStage
	// ended, when set, follows each finish (BenchmarkStandalonePathRedis's job.run:
	// the read of the ended jobs)
	ended func(group []store.Started)
}

type pathStage struct {
	name      string
	cpu, busy time.Duration
	cmds      map[string]int // the commands Redis ran (scripts' and clients'; commandstats' calls)
}

// redisCalls is commandstats' calls by command (but INFO, the benchmark's own).
func redisCalls(b *testing.B) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(srv.Client(b, 0).Info(context.Background(), "commandstats").Val(), "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") || name == "info" {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		out[name], _ = strconv.Atoi(v)
	}
	return out
}

func (p *jobPath) step(err error) {
	p.b.Helper()
	if err != nil {
		p.b.Fatal(err)
	}
}

// measure runs fn and adds what it cost Redis to the stage of that name.
func (p *jobPath) measure(name string, fn func()) {
	if p.callgrind { // the counts are callgrind's: no INFO in between
		fn()
		callgrindDump(p.b, name)
		return
	}
	c0, b0, n0 := redisCPU(p.b), redisBusy(p.b), redisCalls(p.b)
	fn()
	c, bz := redisCPU(p.b)-c0, redisBusy(p.b)-b0
	var st *pathStage
	for _, s := range p.stages {
		if s.name == name {
			st = s
		}
	}
	if st == nil {
		st = &pathStage{name: name, cmds: map[string]int{}}
		p.stages = append(p.stages, st)
	}
	st.cpu, st.busy = st.cpu+c, st.busy+bz
	for cmd, k := range redisCalls(p.b) {
		st.cmds[cmd] += k - n0[cmd]
	}
}

// setup creates runner 1 (serving go), the n handler jobs and their flow.
func (p *jobPath) setup(s *store.Store) *model.Flow {
	if _, _, err := s.CreateRunner(p.ctx, 9, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		p.b.Fatal(err)
	}
	if err := p.db.AnnounceScriptTypes(p.ctx, 1, []model.ScriptType{"go"}); err != nil {
		p.b.Fatal(err)
	}
	ids := make([]uint32, p.n)
	for i := range ids {
		// "noop" of script type go: a handler job that names no executor, which the
		// router's claim script routes itself ("go#noop" goes to exec:go through the
		// router's Go code, which this benchmark does not drive).
		j, _, err := s.CreateJob(p.ctx, &model.Job{ID: uint32(i + 1), CallerID: 1, ContextID: 9, FunctionName: "noop", ScriptType: "go"}, "1")
		p.step(err)
		ids[i] = j.ID
	}
	f, _, err := s.CreateFlow(p.ctx, &model.Flow{ID: 1, CallerID: 1, ContextID: 9, Jobs: ids}, "1")
	p.step(err)
	return f
}

// start starts the flow (one script): every job is ready.
func (p *jobPath) start(f *model.Flow) (jobs []*model.Job, startedAt time.Time) {
	var ready []uint32
	p.measure("start (one script)", func() {
		startedAt = time.Now()
		var err error
		jobs, err = p.db.LoadStartJobs(p.ctx, 1, f.Jobs) // what the scheduler's start reads
		p.step(err)
		deps, err := store.PlanDAG(f, jobs)
		p.step(err)
		ready, _, _, err = p.db.StartFlow(p.ctx, f, jobs, deps, "1")
		p.step(err)
	})
	if len(ready) != p.n {
		p.b.Fatalf("%d ready", len(ready))
	}
	return jobs, startedAt
}

// runJobs: the runner claims and starts the jobs a group at a time, and finishes
// each group together. A runner holds at most a group of jobs at a time (its
// processing list stays short).
func (p *jobPath) runJobs(q string) {
	qwake := store.Wake{Key: keys.WakeRunner(1, q), Token: "9"}
	for got := 0; got < p.n; {
		var group []store.Started
		p.measure(fmt.Sprintf("runner: claim and start (%d)", p.batch), func() {
			var err error
			// as the runner claims: a fresh trace id for each job started
			group, err = p.db.ClaimStartsFresh(p.ctx, q, "runner", time.Minute, p.batch, qwake)
			p.step(err)
		})
		if len(group) == 0 {
			p.b.Fatalf("queue empty after %d", got)
		}
		got += len(group)
		p.measure(fmt.Sprintf("runner: finish (%d)", p.batch), func() { p.finish(group) })
		if p.ended != nil {
			p.ended(group)
		}
	}
}

func (p *jobPath) finish(group []store.Started) {
	fs := make([]store.Finish, len(group))
	for i, st := range group {
		if st.Job == nil {
			p.b.Fatalf("claimed %+v", st)
		}
		// a handler's first attempt that succeeds: no log header (the runner's runHandler)
		fs[i] = store.Finish{DB: p.db, Claim: st.Claim, Job: st.Job, Apply: p.apply, Outcome: store.JobOutcome{Status: model.JobFinished,
			Result: map[string]string{"ok": "true"}}}
	}
	oks, errs := store.FinishJobs(p.ctx, fs)
	for i := range oks {
		p.step(errs[i])
		if !oks[i] {
			p.b.Fatalf("finish %d refused", i)
		}
	}
}

// claimResults: the router claims the result messages and acks them; it returns
// the ends they carry, a group per claim, for the scheduler.
func (p *jobPath) claimResults() [][]store.JobEnd {
	wake := store.Wake{Key: keys.WakeMsgOut, Token: "9", Held: false}
	var ends [][]store.JobEnd
	p.measure("router: claim and ack results (64)", func() {
		for got := 0; got < p.n; {
			cms, _, err := p.db.ClaimMessages(p.ctx, keys.MsgOut, "router", time.Minute, 64, wake, true)
			p.step(err)
			if len(cms) == 0 {
				p.b.Fatalf("no results after %d", got)
			}
			group := p.endsOf(cms)
			ends = append(ends, group)
			_, err = p.db.TxPipelined(p.ctx, func(pl redis.Pipeliner) error {
				for _, cm := range cms {
					pl.HSet(p.ctx, cm.Item, "status", string(model.MessageProcessed), "updated_at", time.Now().Unix())
					store.AckOn(p.ctx, pl, cm.Claim)
				}
				return nil
			})
			p.step(err)
			got += len(group)
		}
	})
	return ends
}

// endsOf reads the ends the result messages carry (one message carries a finished
// group's jobs), from the job JSON alone, as the router reads a result.
func (p *jobPath) endsOf(cms []*store.ClaimedMessage) []store.JobEnd {
	var group []store.JobEnd
	for _, cm := range cms {
		var jobs []model.Job
		p.step(json.Unmarshal([]byte(cm.Msg["job"]), &jobs))
		for _, j := range jobs {
			group = append(group, store.JobEnd{FlowID: j.FlowID, CallerID: j.CallerID, JobID: j.ID, Attempt: j.Attempt, Status: j.Status, Retries: -1, Actor: "scheduler"})
		}
	}
	return group
}

// BenchmarkStandalonePathRedis is BenchmarkJobPathRedis for standalone no-op handler
// jobs (go#noop), every step with the submission: job.submit one job a call (which
// routes the job onto its queue), the runner's claim-and-start (32) and finish (32: a
// result message each; the finish applies the ends, with the default retention of 7
// days; HERO_PATH_VIA_SCHEDULER=1: the router's claim of the results, 64, and their
// ack, and the scheduler's completion, CompleteStandalones, 64, instead). It also
// prints the memory a finished job holds in Redis (finishedJobMemory).
func BenchmarkStandalonePathRedis(b *testing.B) {
	s, n := pathBench(b)
	p := newJobPath(b, s, n)
	if _, _, err := s.CreateRunner(p.ctx, 9, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		b.Fatal(err)
	}
	p.step(p.db.AnnounceExecutors(p.ctx, 1, []string{"go"}))
	// HERO_PATH_RUN=told: job.run's jobs (awaited: the finish tells each end with the
	// job's hash); =read: job.run's jobs read once ended, as the calls did before (a
	// pipeline of the finish's jobs). Either way a subscriber follows coord:jobdone, as
	// supervisor-daemon does while job.run calls wait.
	run := os.Getenv("HERO_PATH_RUN")
	if run != "" {
		sub := srv.Client(b, 0).Subscribe(p.ctx, keys.JobDone)
		if _, err := sub.Receive(p.ctx); err != nil {
			b.Fatal(err)
		}
		go func() {
			for range sub.Channel() {
			}
		}()
		defer func() { _ = sub.Close() }()
	}
	if run == "read" {
		p.ended = func(group []store.Started) {
			p.measure("job.run: read the ended jobs", func() {
				refs := make([]model.JobRef, len(group))
				for i, st := range group {
					refs[i] = st.Job.Ref()
				}
				_, errs := p.db.LoadJobRefs(p.ctx, refs)
				for _, err := range errs {
					p.step(err)
				}
			})
		}
	}
	before := contextMemory(b, 9)
	if p.callgrind {
		callgrindDump(p.b, "setup")
	}
	b.ResetTimer()
	// HERO_PATH_SUBMIT_GROUP=k submits k jobs a call, as supervisor-daemon's group commit
	// stores concurrent single submissions (BenchmarkPeers (a) reports its average,
	// a_submit_group_jobs_avg); default one a call.
	group := 1
	if g, err := strconv.Atoi(os.Getenv("HERO_PATH_SUBMIT_GROUP")); err == nil && g > 1 {
		group = g
	}
	stage := "submit one a call"
	if group > 1 {
		stage = fmt.Sprintf("submit %d a call", group)
	}
	p.measure(stage, func() {
		for done := 0; done < n; done += group {
			subs := make([]store.Submission, min(group, n-done))
			for i := range subs {
				subs[i] = store.Submission{Job: &model.Job{CallerID: 1, ContextID: 9, FunctionName: "go#noop", Awaited: run == "told"}}
			}
			_, err := s.SubmitJobs(p.ctx, 9, subs, "1")
			p.step(err)
		}
	})
	p.runJobs(keys.Queue((&model.Job{FunctionName: "go#noop"}).QueueSuffix()))
	if !p.apply {
		ends := p.claimResults()
		p.measure("scheduler: complete standalone (64)", func() {
			for _, group := range ends {
				for i := range group {
					group[i].Backoff, group[i].Retention = time.Second, 7*24*time.Hour
				}
				res, errs := p.db.CompleteStandalones(p.ctx, group)
				for i := range res {
					p.step(errs[i])
					if !res[i].Applied {
						b.Fatalf("end %+v not applied", group[i])
					}
				}
			}
		})
	}
	b.StopTimer()
	if n := srv.Client(b, 9).ZCard(p.ctx, keys.StatusIndex(keys.JobIndex, "finished")).Val(); n != int64(p.n) {
		b.Fatalf("%d jobs finished, want %d", n, p.n)
	}
	if !p.callgrind {
		p.report("standalone handler jobs, each submitted on its own")
	}
	perJob, shared := finishedJobMemory(b, 9, before, n)
	fmt.Printf("Redis memory per finished standalone job: %d B in its own keys, %d B in shared ones (indexes, events): %d B\n", perJob, shared, perJob+shared)
	b.ReportMetric(float64(perJob+shared), "B/job")
}

// contextMemory is MEMORY USAGE (every element counted) of each key of context db.
func contextMemory(tb testing.TB, db int) map[string]int64 {
	tb.Helper()
	ctx := context.Background()
	c := srv.Client(tb, db)
	out := map[string]int64{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		n, err := c.MemoryUsage(ctx, k, 0).Result()
		if err != nil && err != redis.Nil {
			tb.Fatalf("memory usage %s: %v", k, err)
		}
		out[k] = n
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// finishedJobMemory is what n finished standalone jobs added to context db since
// before (contextMemory), per job: in keys of their own (job:, message:, coord:jobmsgs:,
// coord:log:) and in the keys they share (indexes, the event stream, sequences).
func finishedJobMemory(tb testing.TB, db int, before map[string]int64, n int) (perJob, shared int64) {
	tb.Helper()
	for k, v := range contextMemory(tb, db) {
		d := v - before[k]
		if strings.HasPrefix(k, "job:") || strings.HasPrefix(k, "message:") || strings.HasPrefix(k, keys.JobMessagesPrefix) || strings.HasPrefix(k, "coord:log:") {
			perJob += d
		} else {
			shared += d
		}
	}
	return perJob / int64(n), shared / int64(n)
}

// report prints what each stage cost Redis per job for the n jobs of what (the
// benchmark's jobs), and reports the total CPU.
func (p *jobPath) report(what string) {
	n := p.n
	var cpu, busy time.Duration
	fmt.Printf("Redis per job, %d %s (CPU with socket work; command time):\n", n, what)
	for _, st := range p.stages {
		fmt.Printf("  %-36s %6.1f µs  %6.1f µs\n", st.name, float64(st.cpu.Microseconds())/float64(n), float64(st.busy.Microseconds())/float64(n))
		cpu += st.cpu
		busy += st.busy
	}
	fmt.Printf("  %-36s %6.1f µs  %6.1f µs\n", "all", float64(cpu.Microseconds())/float64(n), float64(busy.Microseconds())/float64(n))
	p.b.ReportMetric(float64(cpu.Microseconds())/float64(n), "redis-µs/job")
	fmt.Printf("Redis commands per job (commandstats: the scripts' and the clients'; FCALL, SELECT and HELLO aside):\n")
	for _, st := range p.stages {
		fmt.Printf("  %-36s %s\n", st.name, commandsPerJob(st.cmds, n))
	}
}

// commandsPerJob spells the commands of cmds per job of n: their total, then each one's.
func commandsPerJob(cmds map[string]int, n int) string {
	var names []string
	total := 0
	for cmd, k := range cmds {
		if k > 0 && cmd != "fcall" && cmd != "select" && cmd != "hello" {
			names = append(names, cmd)
			total += k
		}
	}
	slices.Sort(names)
	out := fmt.Sprintf("%5.2f:", float64(total)/float64(n))
	for _, cmd := range names {
		out += fmt.Sprintf(" %s %.2f", cmd, float64(cmds[cmd])/float64(n))
	}
	return out
}

// newJobPath makes the run of n jobs in context 9, with the scheduler's settings
// recorded (its default retention, 7 days, and sweep, 30 s) when the finishes apply
// the ends.
func newJobPath(b *testing.B, s *store.Store, n int) *jobPath {
	p := &jobPath{b: b, ctx: context.Background(), db: mustCtx(b, s, 9), n: n, callgrind: os.Getenv("HERO_PATH_CALLGRIND") != "",
		apply: os.Getenv("HERO_PATH_VIA_SCHEDULER") == "", batch: 32}
	if v, err := strconv.Atoi(os.Getenv("HERO_PATH_BATCH")); err == nil && v > 0 {
		p.batch = v
	}
	if p.apply {
		p.step(s.SetSchedulerSettings(p.ctx, 7*24*time.Hour, 30*time.Second))
	}
	return p
}

// pathBench skips unless HERO_BENCH is set, and returns a store on the test Redis and
// the number of jobs to push along the path (HERO_PATH_JOBS, default 10,000).
func pathBench(b *testing.B) (*store.Store, int) {
	b.Helper()
	if os.Getenv("HERO_BENCH") == "" {
		b.Skip("set HERO_BENCH=1 (make bench)")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("HERO_PATH_JOBS")); err == nil && v > 0 {
		n = v
	}
	s := open(b)
	if os.Getenv("HERO_PATH_ACL") == "" {
		return s, n
	}
	// HERO_PATH_ACL=1: every stage as a Redis user with the key patterns of the runner's
	// user (the scheduler's and router's, and hero:*; lib/redisacl), contexts writable for
	// the setup, every command: what checking each key of each command against them costs
	// Redis (the submission, supervisor-daemon's, has every key and no such cost).
	var rules []any
	for _, u := range redisacl.Users() {
		if u.Name != "runner" {
			continue
		}
		for _, r := range strings.Fields(u.Rules) {
			if strings.HasPrefix(r, "~") || strings.HasPrefix(r, "%R~") {
				rules = append(rules, strings.Replace(r, "%R~", "~", 1))
			}
		}
	}
	// and "" (submit's KEYS hold it for a job without a chosen id or uniqueness key;
	// supervisor-daemon's user, which submits, has every key)
	rules = append(rules, "~")
	ctx := context.Background()
	if err := srv.Client(b, 0).Do(ctx, append([]any{"ACL", "SETUSER", "bench", "reset", "on", ">bench", "+@all", "&*"}, rules...)...).Err(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Client(b, 0).Do(ctx, "ACL", "DELUSER", "bench") })
	s.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	u.User = url.UserPassword("bench", "bench")
	as, err := store.Open(ctx, store.Options{URL: u.String(), ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(as.Close)
	return as, n
}
