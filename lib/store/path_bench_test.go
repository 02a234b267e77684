package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
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
	out, err := exec.Command("callgrind_control", "--dump="+name).CombinedOutput()
	if err != nil || strings.Contains(string(out), "No active callgrind") {
		b.Fatalf("HERO_PATH_CALLGRIND is set, but no redis-server runs under callgrind (callgrind_control: %v: %s)", err, out)
	}
}

// BenchmarkJobPathRedis drives 10,000 handler jobs of one flow through the Redis side
// of every step the services take — start, dispatch (256 per script), the router's
// claim-and-route (64), the runner's claim-and-start (32) and finish (a group of 32),
// the router's claim of the results (64) and their ack, the scheduler's completion
// (a group of 64) — one stage after the other, and prints what each stage costs Redis
// per job: its CPU (with the socket work) and its command time. It measures Redis's
// share of the end-to-end handler benchmark without the services' noise.
func BenchmarkJobPathRedis(b *testing.B) {
	if os.Getenv("HERO_BENCH") == "" {
		b.Skip("set HERO_BENCH=1 (make bench)")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("HERO_PATH_JOBS")); err == nil && v > 0 {
		n = v
	}
	s := open(b)
	ctx := context.Background()
	db := mustCtx(b, s, 9)
	if _, _, err := s.CreateRunner(ctx, 9, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		b.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"go"}); err != nil {
		b.Fatal(err)
	}
	step := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	ids := make([]uint32, n)
	for i := range ids {
		// "noop" of script type go: a handler job that names no executor, which the
		// router's claim script routes itself ("go#noop" goes to exec:go through the
		// router's Go code).
		j, _, err := s.CreateJob(ctx, &model.Job{ID: uint32(i + 1), CallerID: 1, ContextID: 9, FunctionName: "noop", ScriptType: "go"}, "1")
		step(err)
		ids[i] = j.ID
	}
	f, _, err := s.CreateFlow(ctx, &model.Flow{ID: 1, CallerID: 1, ContextID: 9, Jobs: ids}, "1")
	step(err)

	type stage struct {
		name      string
		cpu, busy time.Duration
	}
	var stages []*stage
	callgrind := os.Getenv("HERO_PATH_CALLGRIND") != ""
	measure := func(name string, fn func()) { // adds to the stage of that name
		if callgrind { // the counts are callgrind's: no INFO in between
			fn()
			callgrindDump(b, name)
			return
		}
		c0, b0 := redisCPU(b), redisBusy(b)
		fn()
		c, bz := redisCPU(b)-c0, redisBusy(b)-b0
		for _, st := range stages {
			if st.name == name {
				st.cpu, st.busy = st.cpu+c, st.busy+bz
				return
			}
		}
		stages = append(stages, &stage{name, c, bz})
	}
	if callgrind {
		callgrindDump(b, "setup")
	}
	b.ResetTimer()
	var jobs []*model.Job
	var ready []uint32
	var startedAt time.Time
	measure("start (one script)", func() {
		startedAt = time.Now()
		jobs, err = db.LoadJobs(ctx, 1, f.Jobs)
		step(err)
		deps, err := store.PlanDAG(f, jobs)
		step(err)
		ready, _, _, err = db.StartFlow(ctx, f, jobs, deps, "1")
		step(err)
	})
	if len(ready) != n {
		b.Fatalf("%d ready", len(ready))
	}
	measure("dispatch (256 a script)", func() {
		for i := 0; i < n; i += 256 {
			_, err := db.DispatchStarted(ctx, 1, 1, jobs[i:min(i+256, n)], "scheduler", startedAt) // as the scheduler's start does
			step(err)
		}
	})
	wake := store.Wake{Key: keys.WakeMsgOut, Token: "9", Held: false}
	measure("router: route requests (64)", func() {
		for got := 0; got < n; {
			cms, routed, err := db.ClaimMessages(ctx, keys.MsgOut, "router", time.Minute, 64, wake, true)
			step(err)
			if len(cms) != 0 || len(routed) == 0 {
				b.Fatalf("claimed %d, routed %d", len(cms), len(routed))
			}
			got += len(routed)
		}
	})
	q := keys.Queue("go")
	qwake := store.Wake{Key: keys.WakeRunner(1, q), Token: "9"}
	// A runner holds at most a group of jobs at a time (its processing list stays short).
	for got := 0; got < n; {
		var group []store.Started
		measure("runner: claim and start (32)", func() {
			traces := make([]string, 32)
			for i := range traces {
				traces[i] = fmt.Sprintf("%032x", got+i+1)
			}
			group, err = db.ClaimStarts(ctx, q, "runner", time.Minute, traces, qwake)
			step(err)
		})
		if len(group) == 0 {
			b.Fatalf("queue empty after %d", got)
		}
		got += len(group)
		measure("runner: finish (32)", func() {
			fs := make([]store.Finish, len(group))
			for i, st := range group {
				if st.Job == nil {
					b.Fatalf("claimed %+v", st)
				}
				fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: store.JobOutcome{Status: model.JobFinished,
					Result: map[string]string{"ok": "true"}, Log: []byte("--- attempt 1: go#noop on runner (request 0123456789abcdef, trace 0123456789abcdef0123456789abcdef) ---\n")}}
			}
			oks, errs := store.FinishJobs(ctx, fs)
			for i := range oks {
				step(errs[i])
				if !oks[i] {
					b.Fatalf("finish %d refused", i)
				}
			}
		})
	}
	var ends [][]store.JobEnd
	measure("router: claim and ack results (64)", func() {
		for got := 0; got < n; {
			cms, _, err := db.ClaimMessages(ctx, keys.MsgOut, "router", time.Minute, 64, wake, true)
			step(err)
			if len(cms) == 0 {
				b.Fatalf("no results after %d", got)
			}
			var group []store.JobEnd
			for _, cm := range cms {
				var jobs []model.Job // the job JSON alone, as the router reads a result
				step(json.Unmarshal([]byte(cm.Msg["job"]), &jobs))
				for _, j := range jobs { // one message carries a finished group's jobs
					group = append(group, store.JobEnd{FlowID: j.FlowID, CallerID: j.CallerID, JobID: j.ID, Attempt: j.Attempt, Status: j.Status, Retries: -1, Actor: "scheduler"})
				}
			}
			ends = append(ends, group)
			_, err = db.TxPipelined(ctx, func(p redis.Pipeliner) error {
				for _, cm := range cms {
					p.HSet(ctx, cm.Item, "status", string(model.MessageProcessed), "updated_at", time.Now().Unix())
					store.AckOn(ctx, p, cm.Claim)
				}
				return nil
			})
			step(err)
			got += len(group)
		}
	})
	measure("scheduler: complete (64)", func() {
		for _, group := range ends {
			res, errs := db.CompleteNodes(ctx, group)
			for i := range res {
				step(errs[i])
				if !res[i].Applied {
					b.Fatalf("end %+v not applied", group[i])
				}
			}
		}
	})
	b.StopTimer()
	fl, err := db.LoadFlow(ctx, 1)
	step(err)
	if fl.Status != model.FlowFinished {
		b.Fatalf("flow %s", fl.Status)
	}
	var cpu, busy time.Duration
	fmt.Printf("Redis per job, %d handler jobs of one flow (CPU with socket work; command time):\n", n)
	for _, st := range stages {
		fmt.Printf("  %-36s %6.1f µs  %6.1f µs\n", st.name, float64(st.cpu.Microseconds())/float64(n), float64(st.busy.Microseconds())/float64(n))
		cpu += st.cpu
		busy += st.busy
	}
	fmt.Printf("  %-36s %6.1f µs  %6.1f µs\n", "all", float64(cpu.Microseconds())/float64(n), float64(busy.Microseconds())/float64(n))
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "redis-µs/job")
}
