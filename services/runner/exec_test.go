package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Without --job-*-max the runner's defaults are ceilings: a job asking for more
// memory or processes than the default ends error, "limits refused", naming the
// limit, without running; one asking for less runs.
func TestJobAboveTheDefaultCeilingIsRefused(t *testing.T) {
	h := newHarness(t)
	h.start()
	for _, lim := range []*model.JobLimits{{MemoryBytes: 1 << 40}, {Pids: 100000}} {
		j := h.submitJob(&model.Job{Script: "echo ran", Limits: lim})
		got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError)
		if got.Status != model.JobError || !strings.HasPrefix(got.Error, "limits refused: ") || !strings.Contains(got.Error, "above this runner's maximum") ||
			got.Result["output"] != "" {
			t.Errorf("job asking %s: status %s error %q result %v", lim, got.Status, got.Error, got.Result)
		}
	}
	j := h.submitJob(&model.Job{Script: "echo ran", Limits: &model.JobLimits{MemoryBytes: 256 << 20, Pids: 64}})
	if got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError); got.Status != model.JobFinished {
		t.Errorf("job asking for less than the defaults: status %s error %q", got.Status, got.Error)
	}
}

// A result file the runner does not take — a symbolic link (to the runner's own
// environment), a FIFO, one over maxResultFile — ends its job error, naming why,
// without the runner reading through the link or waiting on the FIFO; the runner
// goes on serving: a job after them finishes with its result.
func TestResultFileTheRunnerDoesNotTake(t *testing.T) {
	h := newHarness(t)
	h.start()
	for _, tc := range []struct{ script, want string }{
		{`ln -sf /proc/self/environ "$HERO_RESULT_FILE"`, "result file: not a regular file (a symbolic link)"},
		{`mkfifo "$HERO_RESULT_FILE"`, "result file: not a regular file (a FIFO)"},
		{`head -c 2000000 /dev/zero | tr '\0' 'a' | fold -w 1000 | sed 's/^/K=/' > "$HERO_RESULT_FILE"`, "result file: larger than 1048576 bytes"},
	} {
		j := h.submit(tc.script, 0)
		got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError)
		if got.Status != model.JobError || got.Error != tc.want {
			t.Errorf("%s: status %s error %q, want error %q", tc.script, got.Status, got.Error, tc.want)
		}
		for k, v := range got.Result {
			if k != "output" || strings.Contains(v, "PATH=") {
				t.Errorf("%s: result %q=%q taken", tc.script, k, v)
			}
		}
	}
	j := h.submit(`echo OK=yes > "$HERO_RESULT_FILE"`, 0)
	if got := h.waitStatus(j.ID, time.Minute, model.JobFinished, model.JobError); got.Status != model.JobFinished || got.Result["OK"] != "yes" {
		t.Fatalf("a job after them: status %s error %q result %v", got.Status, got.Error, got.Result)
	}
}

// Issue 44: what a script's start reads from Redis — its flow's env_vars, its
// dependencies' results and its context's job limits — comes in one round trip (one
// pipeline: one SELECT), not one for the environment and another for the limits,
// and each read reaches the job: the flow's variable and the dependency's result in
// its environment, the context's default in its limits.
func TestScriptStartReadsInOneRoundTrip(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	rc := srv.Client(t, testCtx)
	const caller, dep, flow = 1, 7, 3
	if err := rc.HSet(ctx, keys.Context(testCtx), "job_defaults", model.EncodeField(&model.JobLimits{Pids: 77})).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.HSet(ctx, keys.Flow(flow), "env_vars", model.EncodeField(map[string]string{"FROM_FLOW": "f"})).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.HSet(ctx, keys.Job(caller, dep), "result", model.EncodeField(map[string]string{"answer": "42"})).Err(); err != nil {
		t.Fatal(err)
	}
	j := &model.Job{ID: 8, CallerID: caller, FlowID: flow, Dependends: []uint32{dep}}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reads, err := h.r.readForStart(ctx, h.db, &store.Claim{}, j)
	if err != nil {
		t.Fatal(err)
	}
	stats := rc.Info(ctx, "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_select:calls=1,") || !strings.Contains(stats, "cmdstat_hmget:calls=1,") || !strings.Contains(stats, "cmdstat_hget:calls=2,") {
		t.Errorf("the start's reads: want one pipeline (1 SELECT, 1 HMGET, 2 HGET); commandstats:\n%s", stats)
	}
	checkStartReads(t, h, j, reads, "FROM_FLOW=f", "HERO_DEP_7_answer=42", 77)
}

// Issue 44: a claim's reply that holds the start's reads (store.Claim's Reads: a claim
// of a few jobs, or a take) leaves the start nothing to read: no command reaches Redis,
// and each read reaches the job as a pipeline's would.
func TestScriptStartReadsFromTheClaim(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	rc := srv.Client(t, testCtx)
	cl := &store.Claim{Reads: &store.StartReads{
		JobDefaults: model.EncodeField(&model.JobLimits{Pids: 78}),
		FlowEnv:     model.EncodeField(map[string]string{"FROM_FLOW": "g"}),
		DepResults:  []string{model.EncodeField(map[string]string{"answer": "43"})},
	}}
	j := &model.Job{ID: 9, CallerID: 1, FlowID: 4, Dependends: []uint32{7}}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reads, err := h.r.readForStart(ctx, h.db, cl, j)
	if err != nil {
		t.Fatal(err)
	}
	if stats := rc.Info(ctx, "commandstats").Val(); strings.Contains(stats, "cmdstat_hget:") || strings.Contains(stats, "cmdstat_hmget:") {
		t.Errorf("the start read Redis although the claim returned its reads; commandstats:\n%s", stats)
	}
	checkStartReads(t, h, j, reads, "FROM_FLOW=g", "HERO_DEP_7_answer=43", 78)
}

// checkStartReads: the start's reads give job j an environment with flowVar and dep
// (the flow's variable, the dependency's result) and the context's default of pids
// processes.
func checkStartReads(t *testing.T, h *harness, j *model.Job, reads startReads, flowVar, dep string, pids int) {
	t.Helper()
	env := strings.Join(h.r.environment(h.db, j, reads, "/w/result", "/w"), "\n")
	if !strings.Contains(env, flowVar) || !strings.Contains(env, dep) {
		t.Errorf("environment without the flow's variable or the dependency's result:\n%s", env)
	}
	lim, refused := h.r.jobLimits(j, reads.limits)
	if refused != nil || lim.Pids != pids {
		t.Errorf("limits: %+v (refused %+v), want the context's default of %d processes", lim, refused, pids)
	}
}
