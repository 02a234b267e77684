package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// schedRun is the part of a schedule's run (a job) the tests read.
type schedRun struct {
	ID             uint32 `json:"id"`
	Status         string `json:"status"`
	Error          string `json:"error"`
	ScheduleID     string `json:"schedule_id"`
	ScheduleTickMs int64  `json:"schedule_tick_ms"`
	StartedAtMs    int64  `json:"started_at_ms"`
	FinishedAtMs   int64  `json:"finished_at_ms"`
}

type schedView struct {
	ID         string `json:"id"`
	Paused     bool   `json:"paused"`
	Note       string `json:"note"`
	NextTickMs int64  `json:"next_tick_ms"`
	Fired      int64  `json:"fired"`
	Skipped    int64  `json:"skipped"`
	Missed     int64  `json:"missed"`
	LastError  string `json:"last_error"`
}

// listAll reads every page of a context's list method (job.list, flow.list) and keeps
// the items keep accepts.
func listAll[T any](t *testing.T, c *harness.Client, method string, keep func(T) bool) []T {
	t.Helper()
	var out []T
	cursor := ""
	for {
		var page struct {
			Items      []T    `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		p := map[string]any{"context_id": ctx1, "limit": 1000}
		if cursor != "" {
			p["cursor"] = cursor
		}
		c.MustCall(t, method, p, &page)
		for _, it := range page.Items {
			if keep(it) {
				out = append(out, it)
			}
		}
		if page.NextCursor == "" {
			return out
		}
		cursor = page.NextCursor
	}
}

// runsOf lists the runs of a schedule (the context's jobs that name it), by tick.
func runsOf(t *testing.T, c *harness.Client, id string) []schedRun {
	t.Helper()
	out := listAll(t, c, "job.list", func(j schedRun) bool { return j.ScheduleID == id })
	slices.SortFunc(out, func(a, b schedRun) int { return int(a.ScheduleTickMs - b.ScheduleTickMs) })
	return out
}

func createSchedule(t *testing.T, c *harness.Client, params map[string]any) schedView {
	t.Helper()
	params["context_id"] = ctx1
	var s schedView
	c.MustCall(t, "schedule.create", params, &s)
	return s
}

func loadSchedule(t *testing.T, c *harness.Client, id string) schedView {
	t.Helper()
	var s schedView
	c.MustCall(t, "schedule.load", map[string]any{"context_id": ctx1, "id": id}, &s)
	return s
}

// checkEachTickOnce: the runs' ticks are distinct and one interval apart (none
// missing, none twice), and every run ended finished.
func checkEachTickOnce(t *testing.T, runs []schedRun, every time.Duration) {
	t.Helper()
	for i, r := range runs {
		if i > 0 && r.ScheduleTickMs-runs[i-1].ScheduleTickMs != every.Milliseconds() {
			t.Errorf("runs %d and %d: ticks %d and %d are not one interval apart (a tick missed or fired twice)", runs[i-1].ID, r.ID, runs[i-1].ScheduleTickMs, r.ScheduleTickMs)
		}
	}
}

// A 1-second schedule over at least 10 ticks with two schedulers, one killed midway
// (kill -9): each tick runs exactly once; paused, it fires nothing (a delayed job
// that runs 2.5 s later shows the time passed); resumed, it fires again.
func TestScheduleTicksOnceAcrossReplicas(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	second := harness.Start(t, binDir, "scheduler", redisSrv.URL, harness.Options{
		Args: []string{"--retry-base", "100ms", "--retry-cap", "1s"}, Env: []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}})
	_ = s
	createSchedule(t, c, map[string]any{"id": "every-second", "spec": map[string]any{"every": "1s"}, "overlap": "allow_all",
		"job": map[string]any{"script": "echo tick", "script_type": "sh"}})
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return len(runsOf(t, c, "every-second")) >= 5 }) {
		t.Fatalf("5 runs did not come: %+v", runsOf(t, c, "every-second"))
	}
	second.Kill()
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return len(runsOf(t, c, "every-second")) >= 11 }) {
		t.Fatalf("11 runs did not come after a scheduler was killed: %+v", runsOf(t, c, "every-second"))
	}
	var paused schedView
	c.MustCall(t, "schedule.pause", map[string]any{"context_id": ctx1, "id": "every-second", "note": "maintenance"}, &paused)
	if !paused.Paused || paused.Note != "maintenance" {
		t.Fatalf("paused schedule: %+v", paused)
	}
	before := len(runsOf(t, c, "every-second"))
	// 2.5 s of pause: a delayed job's run shows that much time went by.
	var sub struct {
		Job delayedJob `json:"job"`
	}
	c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"script": "true", "script_type": "sh"}, "delay": "2500ms"}, &sub)
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadDelayed(t, c, sub.Job.ID).Status == "finished" }) {
		t.Fatal("the delayed job did not run")
	}
	runs := runsOf(t, c, "every-second")
	if len(runs) != before {
		t.Errorf("a paused schedule fired: %d runs before, %d after 2.5 s", before, len(runs))
	}
	checkEachTickOnce(t, runs, time.Second)
	if sv := loadSchedule(t, c, "every-second"); sv.Fired != int64(len(runs)) {
		t.Errorf("the schedule counts %d fired ticks for %d runs", sv.Fired, len(runs))
	}
	c.MustCall(t, "schedule.resume", map[string]any{"context_id": ctx1, "id": "every-second", "note": "done"}, &paused)
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return len(runsOf(t, c, "every-second")) > before }) {
		t.Fatal("a resumed schedule did not fire")
	}
	for _, r := range runsOf(t, c, "every-second") {
		if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, r.ID).Status == "finished" }) {
			t.Errorf("run %d did not finish: %+v", r.ID, loadJob(t, c, r.ID))
		}
	}
}

// The catch-up window across a 5 s outage of the scheduler: a schedule whose window
// (1 min) covers the outage runs each of its ticks once when the scheduler is back;
// one whose window (1 s) does not counts them missed and runs none of them.
func TestScheduleCatchupAcrossOutage(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	job := map[string]any{"script": "true", "script_type": "sh"}
	createSchedule(t, c, map[string]any{"id": "wide", "spec": map[string]any{"every": "1s"}, "overlap": "allow_all", "catchup_window": "1m", "job": job})
	createSchedule(t, c, map[string]any{"id": "narrow", "spec": map[string]any{"every": "1s"}, "overlap": "allow_all", "catchup_window": "1s", "job": job})
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return len(runsOf(t, c, "wide")) >= 2 && len(runsOf(t, c, "narrow")) >= 2 }) {
		t.Fatal("the schedules did not fire")
	}
	s.Scheduler.Kill()
	down := time.Now()
	time.Sleep(5 * time.Second) // the outage itself (nothing is awaited)
	up := time.Now()
	s.Scheduler = s.Start("scheduler")
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool {
		r := runsOf(t, c, "wide")
		return len(r) > 0 && r[len(r)-1].ScheduleTickMs > up.UnixMilli()
	}) {
		t.Fatal("the schedule did not fire after the outage")
	}
	wide := runsOf(t, c, "wide")
	checkEachTickOnce(t, wide, time.Second)
	inOutage := 0
	for _, r := range wide {
		if r.ScheduleTickMs > down.UnixMilli() && r.ScheduleTickMs < up.UnixMilli() {
			inOutage++
		}
	}
	if inOutage < 4 {
		t.Errorf("%d runs of the outage's ticks within the catch-up window, want 4 or 5", inOutage)
	}
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool {
		r := runsOf(t, c, "narrow")
		return len(r) > 0 && r[len(r)-1].ScheduleTickMs > up.UnixMilli()
	}) {
		t.Fatal("the narrow schedule did not fire after the outage")
	}
	narrow, sv := runsOf(t, c, "narrow"), loadSchedule(t, c, "narrow")
	late := 0
	for _, r := range narrow {
		if r.ScheduleTickMs > down.UnixMilli()+1000 && r.ScheduleTickMs < up.UnixMilli()-1500 {
			late++
		}
	}
	if late != 0 || sv.Missed < 3 {
		t.Errorf("a 1 s catch-up window: %d runs of ticks older than it, %d missed (want 0 and 3 or more)", late, sv.Missed)
	}
}

// Backfill of one hour of a per-minute schedule makes 60 runs, each of its tick; the
// same backfill again makes none (each tick runs once).
func TestScheduleBackfill(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{})
	createSchedule(t, c, map[string]any{"id": "per-minute", "spec": map[string]any{"cron": "* * * * *", "timezone": "Europe/Brussels"}, "paused": true, "note": "backfill only",
		"job": map[string]any{"script": "true", "script_type": "sh"}})
	from := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	var res struct {
		Runs     int `json:"runs"`
		Existing int `json:"existing"`
	}
	params := map[string]any{"context_id": ctx1, "id": "per-minute", "from": from.Format(time.RFC3339), "to": from.Add(time.Hour).Format(time.RFC3339)}
	c.MustCall(t, "schedule.backfill", params, &res)
	if res.Runs != 60 || res.Existing != 0 {
		t.Fatalf("backfill of an hour: %+v, want 60 runs", res)
	}
	c.MustCall(t, "schedule.backfill", params, &res)
	if res.Runs != 0 || res.Existing != 60 {
		t.Fatalf("the same backfill again: %+v, want 60 existing", res)
	}
	runs := runsOf(t, c, "per-minute")
	if len(runs) != 60 || runs[0].ScheduleTickMs != from.UnixMilli() {
		t.Fatalf("%d runs, first tick %d (want 60 from %d)", len(runs), runs[0].ScheduleTickMs, from.UnixMilli())
	}
	checkEachTickOnce(t, runs, time.Minute)
	// Bad input: named.
	for field, p := range map[string]map[string]any{
		"from": {"context_id": ctx1, "id": "per-minute", "from": "yesterday", "to": from.Format(time.RFC3339)},
		"to":   {"context_id": ctx1, "id": "per-minute", "from": from.Add(-30 * 24 * time.Hour).Format(time.RFC3339), "to": from.Format(time.RFC3339)},
	} {
		err := c.Call("schedule.backfill", p, nil)
		re, ok := err.(*harness.RPCError)
		if !ok || re.Code != -32602 || re.Data["field"] != field {
			t.Errorf("backfill with a bad %s: %v", field, err)
		}
	}
	for _, bad := range []map[string]any{
		{"id": "x", "spec": map[string]any{"cron": "61 * * * *"}},
		{"id": "x", "spec": map[string]any{"every": "1s", "timezone": "Mars/Olympus"}},
		{"id": "x", "spec": map[string]any{"every": "1s"}, "overlap": "sometimes"},
		{"id": "bad id!", "spec": map[string]any{"every": "1s"}},
	} {
		bad["context_id"] = ctx1
		bad["job"] = map[string]any{"script": "true", "script_type": "sh"}
		if err := c.Call("schedule.create", bad, nil); err == nil || !strings.Contains(err.Error(), "-32602") {
			t.Errorf("schedule.create %v: %v (want invalid params)", bad, err)
		}
	}
}

// Each overlap policy with runs (1.6 s) longer than the interval (1 s): skip never
// overlaps and skips; allow_all overlaps; buffer_one never overlaps and runs a
// buffered tick right after a run; cancel_previous stops the previous run.
func TestScheduleOverlapPolicies(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{RunnerArgs: []string{"--concurrency", "8"}})
	for _, p := range []string{"skip", "allow_all", "buffer_one", "cancel_previous"} {
		createSchedule(t, c, map[string]any{"id": "ov-" + p, "spec": map[string]any{"every": "1s"}, "overlap": p,
			"job": map[string]any{"script": "sleep 1.6", "script_type": "sh"}})
	}
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool {
		for _, p := range []string{"skip", "allow_all", "buffer_one", "cancel_previous"} {
			n := 0
			for _, r := range runsOf(t, c, "ov-"+p) {
				if r.Status == "finished" || r.Status == "error" {
					n++
				}
			}
			if n < 4 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the schedules did not make 4 ended runs each")
	}
	for _, p := range []string{"skip", "allow_all", "buffer_one", "cancel_previous"} {
		c.MustCall(t, "schedule.pause", map[string]any{"context_id": ctx1, "id": "ov-" + p}, nil)
	}
	checkOverlapPolicies(t, c)
}

// checkOverlapPolicies checks the ended runs of the four schedules of
// TestScheduleOverlapPolicies.
func checkOverlapPolicies(t *testing.T, c *harness.Client) {
	t.Helper()
	overlaps := func(runs []schedRun) int {
		n := 0
		for i := 1; i < len(runs); i++ {
			if runs[i].StartedAtMs != 0 && runs[i-1].FinishedAtMs != 0 && runs[i].StartedAtMs < runs[i-1].FinishedAtMs {
				n++
			}
		}
		return n
	}
	ended := func(runs []schedRun) []schedRun {
		var out []schedRun
		for _, r := range runs {
			if r.Status == "finished" || r.Status == "error" {
				out = append(out, r)
			}
		}
		return out
	}
	skip := ended(runsOf(t, c, "ov-skip"))
	if n := overlaps(skip); n != 0 || loadSchedule(t, c, "ov-skip").Skipped == 0 {
		t.Errorf("skip: %d overlapping runs, %d skipped ticks (want 0 and some)", n, loadSchedule(t, c, "ov-skip").Skipped)
	}
	all := ended(runsOf(t, c, "ov-allow_all"))
	if n := overlaps(all); n == 0 {
		t.Errorf("allow_all: no run overlapped the one before: %+v", all)
	}
	buf := ended(runsOf(t, c, "ov-buffer_one"))
	if n := overlaps(buf); n != 0 {
		t.Errorf("buffer_one: %d overlapping runs", n)
	}
	follows := 0
	for i := 1; i < len(buf); i++ {
		if buf[i].StartedAtMs-buf[i-1].FinishedAtMs < 1000 && buf[i].ScheduleTickMs < buf[i-1].FinishedAtMs {
			follows++ // a tick that came during the run before, run right after it
		}
	}
	if follows == 0 {
		t.Errorf("buffer_one: no buffered tick ran after the run it waited for: %s", fmt.Sprint(buf))
	}
	cancel := ended(runsOf(t, c, "ov-cancel_previous"))
	stopped := 0
	for _, r := range cancel {
		if r.Status == "error" {
			stopped++
		}
	}
	if stopped == 0 {
		t.Errorf("cancel_previous: no run was stopped: %+v", cancel)
	}
}
