package store_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
)

// maxChunk is the most nodes (or jobs) one call of a large flow's start, cancel or
// retry may carry, as docs/architecture.md and docs/api.md say: a call of 250 took up
// to 13 ms of Redis (BenchmarkBigFlowLifecycle), past the 10 ms no command may take.
const maxChunk = 100

// logged runs fn with every Redis command logged (SLOWLOG, threshold 0) and returns
// the commands, each as its arguments (SLOWLOG keeps a command's first 32).
func logged(t *testing.T, fn func()) [][]string {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, 0)
	for _, kv := range [][2]string{{"slowlog-max-len", "1000000"}, {"slowlog-log-slower-than", "0"}} {
		if err := rc.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = rc.ConfigSet(ctx, "slowlog-log-slower-than", "10000").Err() }()
	if err := rc.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	fn()
	logs, err := rc.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]string, len(logs))
	for i, l := range logs {
		out[len(logs)-1-i] = l.Args // oldest first
	}
	return out
}

// chunkSizes are the sizes of the lists that the calls of the script file (lua/<file>.lua,
// the function hero_<file>_<hash>) carry at argument index at (FCALL, the function,
// the number of keys, the keys, then the script's ARGV as its header declares them).
func chunkSizes(t *testing.T, cmds [][]string, file string, at int) []int {
	t.Helper()
	var out []int
	for _, c := range cmds {
		if len(c) < 2 || !strings.EqualFold(c[0], "fcall") || !strings.HasPrefix(c[1], "hero_"+file+"_") {
			continue
		}
		if len(c) <= at {
			t.Fatalf("a call of %s: %v", file, c)
		}
		n, err := strconv.Atoi(c[at])
		if err != nil {
			t.Fatalf("a call of %s: argument %d is %q, not a count", file, at, c[at])
		}
		out = append(out, n)
	}
	return out
}

// checkChunks fails unless the calls carried every one of n items, none more than
// maxChunk.
func checkChunks(t *testing.T, what string, sizes []int, n int) {
	t.Helper()
	sum := 0
	for _, k := range sizes {
		if k > maxChunk {
			t.Errorf("%s: a call of %d, more than %d", what, k, maxChunk)
		}
		sum += k
	}
	if sum != n {
		t.Errorf("%s: the calls carried %d items in all (%v), want the flow's %d", what, sum, sizes, n)
	}
}

// A large flow's start, cancel and retry go in calls of at most maxChunk nodes each,
// all of the flow's nodes carried once, and none reads the flow's DAG hash whole.
func TestBigFlowCallsCarryAtMostAChunk(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 37)
	ctx := context.Background()
	f, _ := createLayers(t, s, 37, 300, 300, 300, 100)
	n := len(f.Jobs)
	// flow_start_chunk: FCALL, fn, 2, flow, dag, caller, now_s, now_ms, token, nodes
	cmds := logged(t, func() { storetest.StartFlow(t, db, f) })
	checkChunks(t, "start", chunkSizes(t, cmds, "flow_start_chunk", 9), n)
	// flow_cancel_chunk: FCALL, fn, 3, flow, dag, results, ctx, flow, now_s, now_ms,
	// retention_ms, from, last, ids
	all := cmds
	cmds = logged(t, func() {
		if _, _, err := db.CancelFlow(ctx, f.ID, "op", 0); err != nil {
			t.Fatal(err)
		}
	})
	checkChunks(t, "cancel", chunkSizes(t, cmds, "flow_cancel_chunk", 13), n)
	all = append(all, cmds...)
	// flow_retry_chunk: FCALL, fn, 3, flow, dag, results, now_s, now_ms, from, ids
	cmds = logged(t, func() {
		if _, err := db.RetryFlow(ctx, f.ID, "op"); err != nil {
			t.Fatal(err)
		}
	})
	checkChunks(t, "retry", chunkSizes(t, cmds, "flow_retry_chunk", 9), n)
	all = append(all, cmds...)
	for _, c := range all {
		if len(c) > 1 && c[1] == keys.DAG(f.ID) && strings.EqualFold(c[0], "hgetall") {
			t.Fatalf("%v: the DAG read whole", c)
		}
	}
}

// totalCalls is how many commands the server has run so far, scripts' own included
// (INFO commandstats, every command's calls).
func totalCalls(t *testing.T) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(srv.Client(t, 0).Info(context.Background(), "commandstats").Val(), "\r\n") {
		if _, rest, ok := strings.Cut(line, ":calls="); ok && strings.HasPrefix(line, "cmdstat_") {
			v, _, _ := strings.Cut(rest, ",")
			k, _ := strconv.Atoi(v)
			n += k
		}
	}
	return n
}

// maxCreateCommands bounds the Redis commands one create call of a flow's jobs runs
// (each with two dependencies, as BenchmarkBigFlowLifecycle's): ~6 a job and ~60 a call, so that a
// call stays well under the 10 ms no Redis command may take (issue 49: a call of 64,
// 449 commands, reached 12.4 ms once in the 100,000-job flow's 1,600).
const maxCreateCommands = 300

// The jobs of a big flow are created in script calls of at most CreateBatch jobs, each
// running a bounded number of Redis commands (counted: machine-independent).
func TestFlowJobsCreatedInBoundedCalls(t *testing.T) {
	s := open(t)
	mustCtx(t, s, 38)
	c0, f0 := totalCalls(t), fcalls(t)
	createLayers(t, s, 38, 200, 200) // two calls of CreateJobs and one of CreateFlow
	calls, cmds := fcalls(t)-f0, totalCalls(t)-c0
	creates := 2 * ((200 + store.CreateBatch - 1) / store.CreateBatch)
	// the flow's: its jobs claimed (checked and linked, its id reserved and held: one
	// call for 400 jobs, store.FlowJobsPart), its hash created, the hold dropped
	if calls != creates+3 {
		t.Fatalf("%d script calls created 400 jobs and their flow, want %d of at most %d jobs and the flow's 3", calls, creates+3, store.CreateBatch)
	}
	// the commands less the FCALLs, the INFOs, the flow's calls' few and its jobs' claim
	// (an HMGET and an HSET a job), per create call
	if per := (cmds - calls - 4 - 20 - 2*400) / creates; per > maxCreateCommands {
		t.Errorf("a create call of %d jobs ran %d Redis commands, more than %d", store.CreateBatch, per, maxCreateCommands)
	} else {
		t.Logf("a create call of %d jobs: %d Redis commands", store.CreateBatch, per)
	}
}

// maxFinishCommands bounds the Redis commands of one finish call that applies the ends
// of runs of a flow whose nodes each release two dependents (BenchmarkBigFlowLifecycle's
// shape): ~29 a run, ~700 a call of 24 (~930 at 32, 1,870 at 64), so that a call stays well
// under the 10 ms no Redis command may take (issue 49: calls of up to 64 such runs
// took up to 11.1 ms idle, of 32 up to 10.1 ms).
const maxFinishCommands = 800

// A runner's finish of many runs of one flow applies their ends in calls of at most
// FinishApplyRuns runs (one round trip), each running a bounded number of Redis
// commands (counted: machine-independent); every node completes and every dependent is
// dispatched all the same.
func TestFlowFinishesAppliedInBoundedCalls(t *testing.T) {
	s, db, rc := applyContext(t, 39)
	const n = 2 * store.FinishApplyRuns // two full calls
	deps := map[int][]int{}
	for i := range n {
		deps[n+i] = []int{i, (i + 1) % n}
	}
	f, jobs := dagFlow(t, s, db, 2*n, deps)
	runs := claimSh(t, db, n)
	c0, f0 := totalCalls(t), fcalls(t)
	applied := finishApplied(t, db, runs)
	calls, cmds := fcalls(t)-f0, totalCalls(t)-c0
	want := (n + store.FinishApplyRuns - 1) / store.FinishApplyRuns
	if calls != want {
		t.Fatalf("%d finish calls applied %d runs, want %d of at most %d", calls, n, want, store.FinishApplyRuns)
	}
	if per := (cmds - calls - 2) / calls; per > maxFinishCommands {
		t.Errorf("a finish call of %d runs ran %d Redis commands, more than %d", store.FinishApplyRuns, per, maxFinishCommands)
	} else {
		t.Logf("a finish call of at most %d runs: %d Redis commands", store.FinishApplyRuns, per)
	}
	if applied.Ends != n || applied.Dispatched != n {
		t.Fatalf("applied %+v, want %d ends and %d dispatched", applied, n, n)
	}
	for _, j := range jobs[n:] {
		if st := rc.HGet(context.Background(), keys.DAG(f.ID), "s:"+strconv.Itoa(int(j.ID))).Val(); st != string(model.NodeDispatched) {
			t.Fatalf("dependent %d: node %q, want dispatched", j.ID, st)
		}
	}
}
