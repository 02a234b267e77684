package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// flowRun is the part of a flow's schedule's run (a flow) the tests read.
type flowRun struct {
	ID             uint32   `json:"id"`
	Status         string   `json:"status"`
	Jobs           []uint32 `json:"jobs"`
	ScheduleID     string   `json:"schedule_id"`
	ScheduleTickMs int64    `json:"schedule_tick_ms"`
	CreatedAtMs    int64    `json:"created_at_ms"`
	StartedAtMs    int64    `json:"started_at_ms"`
	FinishedAtMs   int64    `json:"finished_at_ms"`
}

func (f flowRun) ended() bool { return f.Status == "finished" || f.Status == "error" }

// flowRunsOf lists the runs of a flow's schedule (the context's flows that name it), by tick.
func flowRunsOf(t *testing.T, c *harness.Client, id string) []flowRun {
	t.Helper()
	out := listAll(t, c, "flow.list", func(f flowRun) bool { return f.ScheduleID == id })
	slices.SortFunc(out, func(a, b flowRun) int { return int(a.ScheduleTickMs - b.ScheduleTickMs) })
	return out
}

// endedRuns counts the ended runs of a flow's schedule.
func endedRuns(t *testing.T, c *harness.Client, id string) int {
	n := 0
	for _, f := range flowRunsOf(t, c, id) {
		if f.ended() {
			n++
		}
	}
	return n
}

// Schedules of a whole flow from a flow file (heroctl schedule create --flow): a
// 1-second schedule (allow_all) makes a flow a tick, once each, whose jobs all finish
// with the file's env and --set, each flow naming its schedule and tick (flow.load,
// heroctl flow get); a schedule of a long flow (two jobs of 1.2 s) under skip never
// makes a flow before its last one ended, and skips ticks. Paused, across a kill -9 of
// every service, neither fires; resumed, the first fires again. Trigger makes a
// flow now, started; backfill makes a flow a tick, once.
func TestScheduleFlow(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--concurrency", "8"}})
	ctl := ctl{t: t, s: s}
	dir := t.TempDir()
	quick, long := filepath.Join(dir, "quick.yaml"), filepath.Join(dir, "long.yaml")
	writeFile(t, quick, `name: quick
env:
  GREETING: hello
jobs:
  - name: a
    type: sh
    script: echo "A=$GREETING" >> "$HERO_RESULT_FILE"
  - name: b
    type: sh
    depends: [a]
    script: echo "B=$WHO" >> "$HERO_RESULT_FILE"
`)
	writeFile(t, long, `jobs:
  - name: first
    type: sh
    script: sleep 1.2
  - name: second
    type: sh
    depends: [first]
    script: sleep 1.2
`)
	out := ctl.out(meEnv, "schedule", "create", "quick", "--every", "1s", "--overlap", "allow_all", "--flow", quick, "--set", "WHO=world")
	if !strings.Contains(out, "flow of 2 jobs") {
		t.Fatalf("schedule create --flow: %s", out)
	}
	ctl.fails(meEnv, 2, "--script is a job's flag", "schedule", "create", "x", "--every", "1s", "--flow", quick, "--script", "true")
	ctl.ok(meEnv, "schedule", "create", "long", "--every", "1s", "--overlap", "skip", "--flow", long)
	checkFlowScheduleBadInput(t, c)
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return endedRuns(t, c, "quick") >= 4 && endedRuns(t, c, "long") >= 3 }) {
		t.Fatalf("the flow schedules did not make 4 and 3 ended flows: %+v / %+v", flowRunsOf(t, c, "quick"), flowRunsOf(t, c, "long"))
	}
	for _, id := range []string{"quick", "long"} {
		c.MustCall(t, "schedule.pause", map[string]any{"context_id": ctx1, "id": id, "note": "checking"}, nil)
	}
	checkQuickRuns(t, c, ctl)
	checkLongRuns(t, c)
	checkFlowSchedulePausedAcrossKills(t, s, c)
	checkFlowTriggerBackfill(t, c)
	checkFlowScheduleGRPC(t, c)
}

// checkFlowScheduleGRPC: a flow's schedule over gRPC (the Go SDK): created with a
// FlowSpec, shown with its template; triggered, its run is a flow (not a job) that
// finishes, whose gRPC Flow and Jobs carry the schedule and tick; a template with a
// cycle is InvalidArgument naming flow.jobs.
func checkFlowScheduleGRPC(t *testing.T, c *harness.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sc.Close() }()
	spec := &hero.FlowSpec{Env: map[string]string{"X": "1"}, Jobs: []hero.FlowJob{
		{Name: "one", Job: model.Job{ScriptType: "sh", Script: "echo ONE=$X >> \"$HERO_RESULT_FILE\""}},
		{Name: "two", Depends: []string{"one"}, Job: model.Job{ScriptType: "sh", Script: "true"}},
	}}
	got, err := sc.CreateSchedule(ctx, "grpc-flow", hero.ScheduleSettings{Spec: &model.ScheduleSpec{Every: "1h"}, Flow: spec, Paused: true, Note: "trigger only"})
	if err != nil || got.Flow == nil || len(got.Flow.Jobs) != 2 || !slices.Equal(got.Flow.Jobs[1].Depends, []string{"one"}) || got.Flow.EnvVars["X"] != "1" || len(got.Job) != 0 {
		t.Fatalf("CreateSchedule with a flow: %+v, %v", got, err)
	}
	sub, err := sc.TriggerSchedule(ctx, "grpc-flow")
	if err != nil || sub.Job != nil || sub.Flow == nil || sub.Flow.ScheduleID != "grpc-flow" || sub.Flow.ScheduleTickMs == 0 {
		t.Fatalf("TriggerSchedule of a flow's schedule: %+v, %v", sub, err)
	}
	f, err := sc.WaitFlow(ctx, sub.Flow.ID, time.Minute)
	if err != nil || f.Status != "finished" || f.ScheduleID != "grpc-flow" || f.ScheduleTickMs != sub.Flow.ScheduleTickMs {
		t.Fatalf("the triggered flow over gRPC: %+v, %v", f, err)
	}
	j, err := sc.GetJob(ctx, f.CallerID, f.Jobs[0])
	if err != nil || j.ScheduleID != "grpc-flow" || j.ScheduleTickMs != f.ScheduleTickMs || j.Result["ONE"] != "1" {
		t.Fatalf("the triggered flow's job over gRPC: %+v, %v", j, err)
	}
	cycle := &hero.FlowSpec{Jobs: []hero.FlowJob{{Name: "a", Depends: []string{"a"}, Job: model.Job{ScriptType: "sh", Script: "true"}}}}
	if _, err := sc.CreateSchedule(ctx, "cycle", hero.ScheduleSettings{Spec: &model.ScheduleSpec{Every: "1h"}, Flow: cycle}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("a flow's schedule with a cycle: %v (want InvalidArgument naming the cycle)", err)
	}
	if err := c.Call("schedule.load", map[string]any{"context_id": ctx1, "id": "cycle"}, nil); err == nil {
		t.Fatal("a refused schedule was stored")
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkQuickRuns: every run of the quick schedule finishes, one a tick (a second
// apart), its jobs finished with the env's values, and says its schedule and tick.
func checkQuickRuns(t *testing.T, c *harness.Client, ctl ctl) {
	t.Helper()
	runs := flowRunsOf(t, c, "quick")
	for i, r := range runs {
		if f := c.WaitFlow(t, ctx1, r.ID, time.Minute); f.Status != "finished" || len(f.Jobs) != 2 {
			t.Fatalf("run %d (flow %d): %+v", i, r.ID, f)
		}
		if i > 0 && r.ScheduleTickMs-runs[i-1].ScheduleTickMs != 1000 {
			t.Errorf("flows %d and %d: ticks %d and %d are not a second apart (a tick missed or fired twice)", runs[i-1].ID, r.ID, runs[i-1].ScheduleTickMs, r.ScheduleTickMs)
		}
	}
	last := runs[len(runs)-1]
	a, b := loadJob(t, c, last.Jobs[0]), loadJob(t, c, last.Jobs[1])
	if a.Result["A"] != "hello" || b.Result["B"] != "world" {
		t.Errorf("the last run's jobs' results: %v %v (want the file's env and --set)", a.Result, b.Result)
	}
	var sv struct {
		Fired    int64  `json:"fired"`
		LastFlow uint32 `json:"last_flow"`
		Flow     struct {
			Jobs []struct {
				Name string `json:"name"`
			} `json:"jobs"`
		} `json:"flow"`
	}
	c.MustCall(t, "schedule.load", map[string]any{"context_id": ctx1, "id": "quick"}, &sv)
	if sv.Fired != int64(len(runs)) || sv.LastFlow != last.ID || len(sv.Flow.Jobs) != 2 {
		t.Errorf("schedule.load: %+v; want %d fired, last flow %d", sv, len(runs), last.ID)
	}
	show := ctl.out(meEnv, "flow", "get", strconv.Itoa(int(last.ID)))
	if want := "quick (tick " + time.UnixMilli(last.ScheduleTickMs).UTC().Format(time.RFC3339Nano) + ")"; !strings.Contains(show, want) {
		t.Errorf("heroctl flow get: %s (want %q)", show, want)
	}
}

// checkLongRuns: under skip, no run of the long flow is made before the last one
// ended, and ticks were skipped.
func checkLongRuns(t *testing.T, c *harness.Client) {
	t.Helper()
	runs := flowRunsOf(t, c, "long")
	for _, r := range runs {
		c.WaitFlow(t, ctx1, r.ID, time.Minute)
	}
	runs = flowRunsOf(t, c, "long")
	for i := 1; i < len(runs); i++ {
		if runs[i].CreatedAtMs < runs[i-1].FinishedAtMs {
			t.Errorf("skip: flow %d made at %d, before flow %d ended at %d", runs[i].ID, runs[i].CreatedAtMs, runs[i-1].ID, runs[i-1].FinishedAtMs)
		}
	}
	if sv := loadSchedule(t, c, "long"); sv.Skipped == 0 || sv.Fired != int64(len(runs)) {
		t.Errorf("skip with a flow longer than the interval: %+v, %d runs (want skipped ticks)", sv, len(runs))
	}
}

// checkFlowSchedulePausedAcrossKills: a paused schedule stays paused across a kill -9
// of every service and fires nothing (2.5 s of a delayed job's wait show time went
// by); resumed, it fires a flow that finishes.
func checkFlowSchedulePausedAcrossKills(t *testing.T, s *harness.Stack, c *harness.Client) {
	t.Helper()
	before := len(flowRunsOf(t, c, "quick"))
	killAllServices(s, c)
	var sub struct {
		Job delayedJob `json:"job"`
	}
	c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"script": "true", "script_type": "sh"}, "delay": "2500ms"}, &sub)
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadDelayed(t, c, sub.Job.ID).Status == "finished" }) {
		t.Fatal("the delayed job did not run")
	}
	if n := len(flowRunsOf(t, c, "quick")); n != before {
		t.Fatalf("a paused flow schedule fired across the restarts: %d runs, %d before", n, before)
	}
	if sv := loadSchedule(t, c, "quick"); !sv.Paused || sv.Note != "checking" {
		t.Fatalf("after the restarts: %+v (want paused, its note)", sv)
	}
	c.MustCall(t, "schedule.resume", map[string]any{"context_id": ctx1, "id": "quick"}, nil)
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return endedRuns(t, c, "quick") > before }) {
		t.Fatal("the resumed flow schedule made no flow that ended")
	}
	c.MustCall(t, "schedule.pause", map[string]any{"context_id": ctx1, "id": "quick"}, nil)
	for _, r := range flowRunsOf(t, c, "quick") {
		if f := c.WaitFlow(t, ctx1, r.ID, time.Minute); f.Status != "finished" {
			t.Fatalf("flow %d after the resume: %+v", r.ID, f)
		}
	}
}

// checkFlowTriggerBackfill: schedule.trigger of a paused flow schedule makes a flow
// now, started, that finishes; a backfill of 5 ticks makes 5 flows, again none.
func checkFlowTriggerBackfill(t *testing.T, c *harness.Client) {
	t.Helper()
	var trig struct {
		Job      any     `json:"job"`
		Flow     flowRun `json:"flow"`
		Existing bool    `json:"existing"`
	}
	c.MustCall(t, "schedule.trigger", map[string]any{"context_id": ctx1, "id": "quick"}, &trig)
	if trig.Job != nil || trig.Flow.ID == 0 || trig.Flow.ScheduleID != "quick" || trig.Existing || trig.Flow.Status == "dispatched" {
		t.Fatalf("trigger: %+v", trig)
	}
	if f := c.WaitFlow(t, ctx1, trig.Flow.ID, time.Minute); f.Status != "finished" {
		t.Fatalf("the triggered flow: %+v", f)
	}
	from := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	params := map[string]any{"context_id": ctx1, "id": "quick", "from": from.Format(time.RFC3339), "to": from.Add(5 * time.Second).Format(time.RFC3339)}
	var res struct {
		Runs     int `json:"runs"`
		Existing int `json:"existing"`
	}
	c.MustCall(t, "schedule.backfill", params, &res)
	if res.Runs != 5 || res.Existing != 0 {
		t.Fatalf("backfill of 5 ticks: %+v", res)
	}
	c.MustCall(t, "schedule.backfill", params, &res)
	if res.Runs != 0 || res.Existing != 5 {
		t.Fatalf("the same backfill again: %+v", res)
	}
	n := 0
	for _, r := range flowRunsOf(t, c, "quick") {
		if r.ScheduleTickMs >= from.UnixMilli() && r.ScheduleTickMs < from.Add(5*time.Second).UnixMilli() {
			n++
			if f := c.WaitFlow(t, ctx1, r.ID, time.Minute); f.Status != "finished" {
				t.Fatalf("backfilled flow %d: %+v", r.ID, f)
			}
		}
	}
	if n != 5 {
		t.Fatalf("%d flows of the backfilled ticks, want 5", n)
	}
}

// checkFlowScheduleBadInput: a flow's schedule with bad input is refused naming the
// field, and nothing is stored.
func checkFlowScheduleBadInput(t *testing.T, c *harness.Client) {
	t.Helper()
	ok := map[string]any{"name": "a", "job": map[string]any{"script": "true", "script_type": "sh"}}
	for field, flow := range map[string]any{
		"flow.jobs[1].depends":     []any{ok, map[string]any{"name": "b", "depends": []string{"nope"}, "job": map[string]any{"script": "true", "script_type": "sh"}}},
		"flow.jobs[1].script_type": []any{ok, map[string]any{"name": "b", "job": map[string]any{"script": "true"}}},
		"flow.jobs[1].name":        []any{ok, ok},
		"flow.jobs[0].depends":     []any{map[string]any{"name": "a", "job": map[string]any{"script": "true", "script_type": "sh", "depends": []int{1}}}},
		"flow.jobs":                []any{},
	} {
		err := c.Call("schedule.create", map[string]any{"context_id": ctx1, "id": "bad", "spec": map[string]any{"every": "1s"}, "flow": map[string]any{"jobs": flow}}, nil)
		if re, isRPC := err.(*harness.RPCError); !isRPC || re.Code != -32602 || re.Data["field"] != field {
			t.Errorf("schedule.create of a flow with a bad %s: %v (%+v)", field, err, err)
		}
	}
	both := map[string]any{"context_id": ctx1, "id": "bad", "spec": map[string]any{"every": "1s"}, "job": map[string]any{"script": "true", "script_type": "sh"},
		"flow": map[string]any{"jobs": []any{ok}}}
	if err := c.Call("schedule.create", both, nil); err == nil || !strings.Contains(err.Error(), "-32602") {
		t.Errorf("schedule.create with a job and a flow: %v", err)
	}
	if err := c.Call("schedule.load", map[string]any{"context_id": ctx1, "id": "bad"}, nil); err == nil {
		t.Error("a refused flow schedule was stored")
	}
}
