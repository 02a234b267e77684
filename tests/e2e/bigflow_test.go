package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// bigFlowJobs is the size of the flows of TestBigFlowCreatedAsAUnit: one past the old
// limit (MaxListLen, 10,000, met only at flow.create, after every job was stored).
const bigFlowJobs = 10001

// bigFlowFile writes a flow file of n jobs: a root that sleeps, and n-1 jobs that
// depend on it (the flows are cancelled once counted: only the root ever runs).
func bigFlowFile(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("jobs:\n  - {name: root, type: sh, script: 'sleep 120'}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  - {name: j%d, type: sh, script: 'true', depends: [root]}\n", i)
	}
	return writeTemp(t, "big.yaml", b.String())
}

// jobsOutsideFlows counts the jobs of context 1 that no stored flow lists (their
// flow_id names no flow, or none), and the flow creations left (coord:flowstage:*).
func jobsOutsideFlows(t *testing.T) (outside, total, stages int) {
	t.Helper()
	ctx := context.Background()
	rc := redisOf(ctx1).Client(t, ctx1)
	jobs, err := rc.Keys(ctx, keys.JobPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	flowOf := make([]*redis.StringCmd, len(jobs))
	if _, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range jobs {
			flowOf[i] = p.HGet(ctx, k, "flow_id")
		}
		return nil
	}); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	flows := map[string]bool{}
	for _, c := range flowOf {
		f := c.Val()
		if f == "" || f == "0" {
			outside++
			continue
		}
		ok, seen := flows[f]
		if !seen {
			ok = rc.Exists(ctx, keys.FlowPrefix+f).Val() == 1
			flows[f] = ok
		}
		if !ok {
			outside++
		}
	}
	st, err := rc.Keys(ctx, keys.FlowStagePrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return outside, len(jobs), len(st)
}

// waitFor waits, at most a minute (a safety net), until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitForEvery(t, 50*time.Millisecond, what, cond)
}

// waitForEvery is waitFor checking cond every interval.
func waitForEvery(t *testing.T, every time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// readInPieces reads a started big flow's DAG page by page (flow.dag with limit,
// following next_offset: every node once, the root's dependents all there) and its
// counts (flow.counts: from counters, no node read).
func readInPieces(t *testing.T, c *harness.Client, id uint64) {
	t.Helper()
	var counts map[string]any
	c.MustCall(t, "flow.counts", map[string]any{"context_id": ctx1, "id": id}, &counts)
	if counts["started"] != true || counts["total"] != float64(bigFlowJobs) || counts["ended"] != float64(0) || counts["not_ended"] != float64(bigFlowJobs) {
		t.Errorf("counts of the started flow: %v", counts)
	}
	seen := map[uint32]bool{}
	pages, offset := 0, uint32(0)
	for {
		var page struct {
			Flow  map[string]any `json:"flow"`
			Nodes []struct {
				ID         uint32   `json:"id"`
				Depends    []uint32 `json:"depends"`
				Dependents []uint32 `json:"dependents"`
				NodeStatus string   `json:"node_status"`
			} `json:"nodes"`
			NextOffset uint32         `json:"next_offset"`
			Counts     map[string]any `json:"counts"`
		}
		c.MustCall(t, "flow.dag", map[string]any{"context_id": ctx1, "id": id, "offset": offset, "limit": 3000}, &page)
		pages++
		if len(page.Nodes) > 3000 || page.Flow["jobs"] != nil || page.Counts["total"] != float64(bigFlowJobs) {
			t.Fatalf("page %d: %d nodes, the flow's job list %v, counts %v", pages, len(page.Nodes), page.Flow["jobs"] != nil, page.Counts)
		}
		for _, n := range page.Nodes {
			if seen[n.ID] {
				t.Fatalf("node %d on two pages", n.ID)
			}
			seen[n.ID] = true
			if len(n.Depends) == 0 && len(n.Dependents) != bigFlowJobs-1 {
				t.Fatalf("the root lists %d dependents", len(n.Dependents))
			}
			if len(n.Depends) == 1 && n.NodeStatus != "pending" {
				t.Fatalf("node %d: %s before its root ended", n.ID, n.NodeStatus)
			}
		}
		if page.NextOffset == 0 {
			break
		}
		offset = page.NextOffset
	}
	if len(seen) != bigFlowJobs || pages != 4 {
		t.Fatalf("%d nodes in %d pages, want %d in 4", len(seen), pages, bigFlowJobs)
	}
}

// cancelAndCount cancels a submitted big flow and checks that it lists every job and
// that no job of the context is outside a flow.
func cancelAndCount(t *testing.T, c *harness.Client, id uint64, wantTotal int) {
	t.Helper()
	var f harness.Flow
	c.MustCall(t, "flow.load", map[string]any{"context_id": ctx1, "id": id}, &f)
	if len(f.Jobs) != bigFlowJobs {
		t.Fatalf("flow %d lists %d jobs, want %d", id, len(f.Jobs), bigFlowJobs)
	}
	c.MustCall(t, "flow.cancel", map[string]any{"context_id": ctx1, "id": id}, nil)
	if outside, total, stages := jobsOutsideFlows(t); outside != 0 || total != wantTotal || stages != 0 {
		t.Fatalf("after flow %d: %d of %d jobs outside a flow (want 0 of %d), %d creations left", id, outside, total, wantTotal, stages)
	}
}

// Acceptance (issue 49, 2): a 10,001-job flow through heroctl, the Go SDK and the
// Python SDK is created whole (the old limit refused it at flow.create and left its
// 10,001 jobs outside any flow); a flow over the server's --max-flow-jobs is refused
// before anything is stored; and a heroctl killed (SIGKILL) midway through a creation
// leaves nothing outside a flow once its creation's ttl has passed (the scheduler's
// retention deletes its jobs). Counted in Redis: every job key's flow exists.
func TestBigFlowCreatedAsAUnit(t *testing.T) {
	flushRedis(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{
		SchedulerArgs: []string{"--safety-sweep", "2s"},
		APIArgs:       []string{"--max-flow-jobs", "20000"},
	})
	c := s.Setup(t, ctx1)
	file := bigFlowFile(t, bigFlowJobs)

	// heroctl, with its progress lines
	out, errOut, code := s.Heroctl(t, meEnv, "flow", "submit", file)
	if code != 0 {
		t.Fatalf("heroctl flow submit: exit %d\n%s", code, errOut)
	}
	if !strings.Contains(errOut, fmt.Sprintf("created %d of %d jobs (100%%)", bigFlowJobs, bigFlowJobs)) {
		t.Errorf("no progress line for the last jobs on stderr:\n%s", errOut)
	}
	id, _ := strconv.ParseUint(flowID(t, out), 10, 32)
	readInPieces(t, c, id)
	cancelAndCount(t, c, id, bigFlowJobs)
	c.MustCall(t, "flow.wait", map[string]any{"context_id": ctx1, "id": id, "timeout": 60}, nil)
	var counts map[string]any
	c.MustCall(t, "flow.counts", map[string]any{"context_id": ctx1, "id": id}, &counts)
	if counts["ended"] != float64(bigFlowJobs) || counts["cancelled"] != float64(bigFlowJobs) || counts["not_ended"] != float64(0) {
		t.Errorf("counts of the cancelled flow: %v", counts)
	}

	// the Go SDK
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sc.Close() }()
	spec := hero.FlowSpec{Jobs: []hero.FlowJob{{Name: "root", Job: model.Job{ScriptType: "sh", Script: "sleep 120"}}}}
	for i := 1; i < bigFlowJobs; i++ {
		spec.Jobs = append(spec.Jobs, hero.FlowJob{Name: fmt.Sprintf("j%d", i), Depends: []string{"root"}, Job: model.Job{ScriptType: "sh", Script: "true"}})
	}
	sub, err := sc.SubmitFlow(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	cancelAndCount(t, c, uint64(sub.Flow.ID), 2*bigFlowJobs)

	// the Python SDK
	py := pythonWithCryptography(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "actor-1.pem")
	if err := auth.WritePrivateKey(key, harness.ActorKey(1), false); err != nil {
		t.Fatal(err)
	}
	pki, err := harness.PKI()
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
import sys
sys.path.insert(0, %q)
import hero_client as hc
c = hc.Client.from_env()
jobs = [{"name": "root", "type": "sh", "script": "sleep 120"}]
jobs += [{"name": "j%%d" %% i, "type": "sh", "script": "true", "depends": ["root"]} for i in range(1, %d)]
print("flow", c.submit_flow(jobs)["id"])
try:
    c.begin_flow(20001)
except hc.InvalidParams as e:
    print("refused:", e)
`, filepath.Join(root, "sdk", "python"), bigFlowJobs)
	cmd := exec.CommandContext(ctx, py, "-c", script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "HERO_API_URL=" + harness.APIURL(s.API), "HERO_TLS_CA=" + pki.Files("api").CA,
		"HERO_ACTOR=1", "HERO_CONTEXT=1", "HERO_KEY=" + key}
	pyOut, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, pyOut)
	}
	var pyFlow uint64
	if _, err := fmt.Sscanf(string(pyOut), "flow %d", &pyFlow); err != nil {
		t.Fatalf("python output: %s", pyOut)
	}
	if !strings.Contains(string(pyOut), "a flow of 20001 jobs is more than this server's limit of 20000 (--max-flow-jobs)") {
		t.Errorf("a flow over the limit, python output:\n%s", pyOut)
	}
	cancelAndCount(t, c, pyFlow, 3*bigFlowJobs)

	// over the limit: refused by heroctl's submission before anything is stored
	over := bigFlowFile(t, 20001)
	if _, errOut, code := s.Heroctl(t, meEnv, "flow", "submit", over); code != 1 || !strings.Contains(errOut, "more than this server's limit of 20000") {
		t.Fatalf("a flow over the limit: exit %d, stderr %s", code, errOut)
	}
	if _, total, stages := jobsOutsideFlows(t); total != 3*bigFlowJobs || stages != 0 {
		t.Fatalf("a refused flow stored %d jobs, %d creations", total-3*bigFlowJobs, stages)
	}

	// heroctl killed midway (a flow of 20,000 jobs, once 1,000 are stored): its jobs
	// go once its creation's ttl (5 s) passes
	kill := s.HeroctlCmd(t, meEnv, "flow", "submit", bigFlowFile(t, 20000), "--creation-ttl", "5")
	if err := kill.Start(); err != nil {
		t.Fatal(err)
	}
	rc := redisOf(ctx1).Client(t, ctx1)
	waitForEvery(t, time.Millisecond, "the killed creation's first jobs", func() bool {
		return rc.ZCard(context.Background(), keys.JobIndex).Val() > 3*bigFlowJobs+1000
	})
	if err := kill.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = kill.Wait()
	outside, total, stages := jobsOutsideFlows(t)
	t.Logf("heroctl killed with %d jobs created (%d creations open)", total-3*bigFlowJobs, stages)
	if outside == 0 || stages != 1 {
		t.Fatalf("the killed creation: %d jobs outside a flow, %d creations; want some under one open creation", outside, stages)
	}
	waitFor(t, "the killed creation's jobs deleted", func() bool {
		outside, total, stages := jobsOutsideFlows(t)
		return outside == 0 && total == 3*bigFlowJobs && stages == 0
	})
}
