package store_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
)

// The finish script with Apply (a runner's --apply-ends): what the router's delivery
// and the scheduler's completion would do, in the script that records a run's end.

// applyContext makes context id with runner 1 serving sh (a waker of queue:sh) and the
// scheduler's settings recorded (retention 1 h, sweep 30 s).
func applyContext(t *testing.T, id uint32) (*store.Store, *store.DB, *redis.Client) {
	t.Helper()
	s := open(t)
	db := mustCtx(t, s, id)
	if _, _, err := s.CreateRunner(context.Background(), id, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(context.Background(), 1, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	wakeRunner1(t, id, keys.Queue("sh"))
	if err := s.SetSchedulerSettings(context.Background(), time.Hour, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return s, db, srv.Client(t, int(id))
}

// dagFlow creates and starts a flow of n sh jobs; deps[i] lists the (0-based) jobs
// job i depends on. It returns the flow and its jobs (by index).
func dagFlow(t *testing.T, s *store.Store, db *store.DB, n int, deps map[int][]int) (*model.Flow, []*model.Job) {
	t.Helper()
	ctx := context.Background()
	var ids []uint32
	for i := 0; i < n; i++ {
		var on []uint32
		for _, d := range deps[i] {
			on = append(on, ids[d])
		}
		j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "sh", Dependends: on}, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, ready := storetest.StartFlow(t, db, f)
	byID := map[uint32]*model.Job{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	var out []*model.Job
	for _, id := range ids {
		out = append(out, byID[id])
	}
	var readyJobs []*model.Job
	for _, id := range ready {
		readyJobs = append(readyJobs, byID[id])
	}
	if _, err := db.DispatchMany(ctx, f.ID, 1, readyJobs, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	return f, out
}

// claimSh claims and starts n jobs of queue:sh as worker w1.
func claimSh(t *testing.T, db *store.DB, n int) []store.Started {
	t.Helper()
	got, err := db.ClaimStarts(context.Background(), keys.Queue("sh"), "w1", time.Minute, make([]string, n), store.Wake{})
	if err != nil || len(got) != n {
		t.Fatalf("claim %d: %+v %v", n, got, err)
	}
	for _, st := range got {
		if st.Outcome != store.StartRun {
			t.Fatalf("claimed %+v", st)
		}
	}
	return got
}

// finishApplied finishes the runs (status per run: finished unless errs names it) with
// Apply and returns what the script applied.
func finishApplied(t *testing.T, db *store.DB, runs []store.Started, failed ...uint32) store.Applied {
	t.Helper()
	fs := make([]store.Finish, len(runs))
	for i, st := range runs {
		o := store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"out": "job " + itoa(st.Job.ID)}}
		if slices.Contains(failed, st.Job.ID) {
			o = store.JobOutcome{Status: model.JobError, Error: "exit status 3", ExitCode: 3}
		}
		fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: o, Apply: true}
	}
	oks, errs, applied := store.FinishJobsApplied(context.Background(), fs)
	for i := range fs {
		if errs[i] != nil || !oks[i] {
			t.Fatalf("finish run %d: %v %v", i, oks[i], errs[i])
		}
	}
	return applied
}

// A successful run of a flow completes its node, and the dependents it makes ready are
// dispatched and routed onto their queue with runner 1's wake tokens, all in the finish
// script: nothing goes on msg_out. A failed run of the same group goes the router's way.
func TestFinishAppliesFlowEnds(t *testing.T) {
	s, db, rc := applyContext(t, 29)
	ctx := context.Background()
	// a → b, a → c, and d after b and c
	f, jobs := dagFlow(t, s, db, 4, map[int][]int{1: {0}, 2: {0}, 3: {1, 2}})
	a, b, c, d := jobs[0], jobs[1], jobs[2], jobs[3]
	tokens := wakeTokens(t, 29, keys.Queue("sh"))
	run := claimSh(t, db, 1)
	applied := finishApplied(t, db, run)
	if applied.Ends != 1 || applied.Dispatched != 2 || len(applied.FlowsEnded) != 0 {
		t.Fatalf("applied %+v, want 1 end and 2 dispatched", applied)
	}
	if n := rc.LLen(ctx, keys.MsgOut).Val(); n != 0 {
		t.Fatalf("msg_out holds %d messages: the end was applied here", n)
	}
	dag := keys.DAG(f.ID)
	if rc.HExists(ctx, dag, "s:"+itoa(a.ID)).Val() { // a completed node leaves the DAG hash
		t.Fatalf("node a keeps its status %q", rc.HGet(ctx, dag, "s:"+itoa(a.ID)).Val())
	}
	for _, j := range []*model.Job{b, c} {
		if st := rc.HGet(ctx, dag, "s:"+itoa(j.ID)).Val(); st != string(model.NodeDispatched) {
			t.Fatalf("node %d %s, want dispatched", j.ID, st)
		}
		h := rc.HMGet(ctx, keys.Job(1, j.ID), "status", "attempt", "ready_at_ms").Val()
		fin := rc.HGet(ctx, keys.Job(1, a.ID), "finished_at_us").Val() // a run stores its end in µs only
		if h[0] != string(model.JobDispatched) || h[1] != "1" || len(fin) < 4 || h[2] != fin[:len(fin)-3] {
			t.Fatalf("job %d %v: want dispatched, attempt 1, ready when a finished", j.ID, h)
		}
	}
	if q := rc.LRange(ctx, keys.Queue("sh"), 0, -1).Val(); len(q) != 2 || !slices.Contains(q, keys.Job(1, b.ID)) || !slices.Contains(q, keys.Job(1, c.ID)) {
		t.Fatalf("queue:sh %v, want b and c", q)
	}
	if n := wakeTokens(t, 29, keys.Queue("sh")); n <= tokens {
		t.Fatalf("runner 1 has %d wake tokens, had %d: no wake-up for the routed jobs", n, tokens)
	}
	checkApplyMessages(t, rc, f.ID, a.ID, fmt.Sprintf("%d %d", b.ID, c.ID))
	checkApplyEvents(t, db, a.ID, b.ID, c.ID)
	// b succeeds and c fails, ending together: b's end is applied (d waits for c), c's
	// goes on msg_out in a result message of its own.
	runs := claimSh(t, db, 2)
	applied = finishApplied(t, db, runs, c.ID)
	if applied.Ends != 1 || applied.Dispatched != 0 {
		t.Fatalf("applied %+v, want b's end only", applied)
	}
	mks := rc.LRange(ctx, keys.MsgOut, 0, -1).Val()
	if len(mks) != 1 || !strings.Contains(rc.HGet(ctx, mks[0], "job").Val(), fmt.Sprintf(`"id":%d,`, c.ID)) ||
		strings.Contains(rc.HGet(ctx, mks[0], "job").Val(), fmt.Sprintf(`"id":%d,`, b.ID)) {
		t.Fatalf("msg_out %v: want one result message of c alone", mks)
	}
	if st := rc.HGet(ctx, dag, "s:"+itoa(c.ID)).Val(); st != string(model.NodeRunning) && st != string(model.NodeDispatched) {
		t.Fatalf("node c %s: a failed run is the scheduler's to apply", st)
	}
	if st := rc.HGet(ctx, keys.Job(1, d.ID), "status").Val(); st == string(model.JobDispatched) {
		t.Fatal("d dispatched before c ended")
	}
}

// checkApplyMessages: job a's messages hold its result message, processed (never
// pushed), and the flow's the request message of the dependents (job_ids ids),
// acknowledged (routed here).
func checkApplyMessages(t *testing.T, rc *redis.Client, flow, a uint32, ids string) {
	t.Helper()
	ctx := context.Background()
	var result, request bool
	mks := rc.SMembers(ctx, keys.FlowMessages(flow)).Val()
	for _, n := range jobMsgs(t, rc, 1, a) {
		mks = append(mks, "message:1:"+n)
	}
	for _, mk := range mks {
		h := rc.HGetAll(ctx, mk).Val()
		switch h["kind"] {
		case string(model.KindJobResult):
			result = h["status"] == string(model.MessageProcessed)
		case string(model.KindJobRequest):
			if h["job_ids"] == ids {
				request = h["status"] == string(model.MessageAcknowledged) && h["job_ref"] == "1"
			}
		}
	}
	if !result || !request {
		t.Fatalf("flow %d's messages: result processed %v, request of %s acknowledged %v", flow, result, ids, request)
	}
}

// checkApplyEvents: a's end and its dependents' dispatch are recorded, by the runner.
func checkApplyEvents(t *testing.T, db *store.DB, a uint32, deps ...uint32) {
	t.Helper()
	evs, err := db.ReadEvents(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		if e.Actor == "runner" {
			seen[e.Type+" "+itoa(e.JobID)] = true
		}
	}
	want := []string{string(model.EventJobFinished) + " " + itoa(a)}
	for _, d := range deps {
		want = append(want, string(model.EventJobDispatched)+" "+itoa(d))
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("no event %s by the runner (%v)", w, seen)
		}
	}
}

// The last node's end ends the flow: its status, coord:flows:active, its retention and
// the flow waiters' notice; and a standalone job's end starts its retention and tells
// its waiters (the jobs of one finish in one notice).
func TestFinishAppliesFlowAndStandaloneEnds(t *testing.T) {
	s, db, rc := applyContext(t, 30)
	ctx := context.Background()
	c0 := srv.Client(t, 0)
	sub := c0.Subscribe(ctx, keys.FlowDone, keys.JobDone)
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	f, _ := dagFlow(t, s, db, 1, nil)
	// two standalone jobs in the finish's call: their retention and notices are
	// written together
	j, j2 := standaloneJob(t, s, db), standaloneJob(t, s, db)
	for _, sj := range []*model.Job{j, j2} {
		if _, _, ok, why, err := db.Dispatch(ctx, 0, sj, "scheduler", 0); err != nil || !ok {
			t.Fatalf("dispatch: %v %s", err, why)
		}
	}
	before := time.Now().UnixMilli()
	applied := finishApplied(t, db, claimSh(t, db, 3))
	if applied.Ends != 3 || !slices.Equal(applied.FlowsEnded, []model.FlowStatus{model.FlowFinished}) {
		t.Fatalf("applied %+v, want 3 ends and flow finished", applied)
	}
	if st := rc.HGet(ctx, keys.Flow(f.ID), "status").Val(); st != string(model.FlowFinished) {
		t.Fatalf("flow %s", st)
	}
	if c0.SIsMember(ctx, keys.ActiveFlows, "30:"+itoa(f.ID)).Val() {
		t.Fatal("the ended flow is still active")
	}
	for _, m := range []string{"30:flow:" + itoa(f.ID), "30:job:1:" + itoa(j.ID), "30:job:1:" + itoa(j2.ID)} {
		at, err := c0.ZScore(ctx, keys.Expire, m).Result()
		if err != nil || int64(at) < before+time.Hour.Milliseconds() {
			t.Fatalf("retention of %s at %v (%v), want an hour from now", m, at, err)
		}
	}
	for _, sj := range []*model.Job{j, j2} {
		if da := rc.HGet(ctx, keys.Job(1, sj.ID), "done_attempt").Val(); da != "1" {
			t.Fatalf("standalone job %d's done_attempt %q", sj.ID, da)
		}
	}
	got := map[string]bool{}
	for len(got) < 2 {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		m, err := sub.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("notices %v: %v", got, err)
		}
		got[m.Channel+" "+m.Payload] = true
	}
	// the call's two standalone jobs in one notice
	if !got[keys.FlowDone+" 30:"+itoa(f.ID)] || !got[keys.JobDone+" 30:1:"+itoa(j.ID)+" 30:1:"+itoa(j2.ID)] {
		t.Fatalf("notices %v; want the flow's and one naming both jobs", got)
	}
	if n := rc.LLen(ctx, keys.MsgOut).Val(); n != 0 {
		t.Fatalf("msg_out holds %d messages", n)
	}
}

// A standalone job kept forever (retention 0) ends here without an expiry, still
// telling its waiters; a second finish of the same claim (a retry whose answer was
// lost) applies nothing again.
func TestFinishAppliesStandaloneKeptForever(t *testing.T) {
	s, db, rc := applyContext(t, 32)
	ctx := context.Background()
	if err := s.SetSchedulerSettings(ctx, 0, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c0 := srv.Client(t, 0)
	sub := c0.Subscribe(ctx, keys.JobDone)
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	j := standaloneJob(t, s, db)
	if _, _, ok, why, err := db.Dispatch(ctx, 0, j, "scheduler", 0); err != nil || !ok {
		t.Fatalf("dispatch: %v %s", err, why)
	}
	runs := claimSh(t, db, 1)
	if applied := finishApplied(t, db, runs); applied.Ends != 1 {
		t.Fatalf("applied %+v, want 1 end", applied)
	}
	if n := c0.ZCard(ctx, keys.Expire).Val(); n != 0 {
		t.Fatalf("coord:expire holds %d entries for a job kept forever", n)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if m, err := sub.ReceiveMessage(rctx); err != nil || m.Payload != "32:1:"+itoa(j.ID) {
		t.Fatalf("notice %v, %v", m, err)
	}
	if st := rc.HGet(ctx, keys.Job(1, j.ID), "status").Val(); st != string(model.JobFinished) {
		t.Fatalf("status %s", st)
	}
	if applied := finishApplied(t, db, runs); applied.Ends != 0 {
		t.Fatalf("the same finish again applied %+v", applied)
	}
}

// The ends that are the scheduler's to apply: without Apply, before the scheduler
// recorded its settings, and when what ends is kept for less than its sweep's
// interval (its expiry timer would find the deadline late). Each goes on msg_out and
// changes nothing of its flow's DAG.
func TestFinishLeavesEndsToTheScheduler(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, db *store.DB, rc *redis.Client)
		apply bool
	}{
		{"without Apply", nil, false},
		{"no scheduler settings", func(t *testing.T, _ *store.DB, _ *redis.Client) {
			srv.Client(t, 0).Del(context.Background(), keys.SchedulerSettings)
		}, true},
		{"retention shorter than the sweep", func(t *testing.T, _ *store.DB, rc *redis.Client) {
			rc.HSet(context.Background(), keys.Context(31), "retention_seconds", 5)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, db, rc := applyContext(t, 31)
			ctx := context.Background()
			if tc.setup != nil {
				tc.setup(t, db, rc)
			}
			f, jobs := dagFlow(t, s, db, 2, map[int][]int{1: {0}})
			st := claimSh(t, db, 1)[0]
			oks, errs, applied := store.FinishJobsApplied(ctx, []store.Finish{{DB: db, Claim: st.Claim, Job: st.Job,
				Outcome: store.JobOutcome{Status: model.JobFinished}, Apply: tc.apply}})
			if !oks[0] || errs[0] != nil || applied.Ends != 0 || applied.Dispatched != 0 {
				t.Fatalf("finish: %v %v, applied %+v", oks[0], errs[0], applied)
			}
			if n := rc.LLen(ctx, keys.MsgOut).Val(); n != 1 {
				t.Fatalf("msg_out holds %d messages, want the result message", n)
			}
			if s := rc.HGet(ctx, keys.DAG(f.ID), "s:"+strconv.FormatUint(uint64(jobs[0].ID), 10)).Val(); s == string(model.NodeCompleted) {
				t.Fatal("the node was completed by the finish")
			}
			if s := rc.HGet(ctx, keys.Job(1, jobs[1].ID), "status").Val(); s == string(model.JobDispatched) {
				t.Fatal("the dependent was dispatched by the finish")
			}
		})
	}
}

// A dependent made ready by the scheduler's completion is ready from its dependency's
// end: the end a run stores (finished_at_us, less three digits) or, in a job without it
// (a remote node's result, an older version's), finished_at_ms.
func TestCompletionReadyAtTheEnd(t *testing.T) {
	s, db, rc := applyContext(t, 30)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		edit func(jk string) string // changes a's hash; returns the ready_at_ms b must get ("": a's finished_at_us less three digits)
	}{
		{"finished_at_us", func(string) string { return "" }},
		{"finished_at_ms only", func(jk string) string {
			rc.HDel(ctx, jk, "finished_at_us")
			rc.HSet(ctx, jk, "finished_at_ms", "1700000000123")
			return "1700000000123"
		}},
	} {
		f, jobs := dagFlow(t, s, db, 2, map[int][]int{1: {0}})
		a, b := jobs[0], jobs[1]
		run := claimSh(t, db, 1)[0]
		if ok, err := db.FinishJob(ctx, run.Claim, run.Job, store.JobOutcome{Status: model.JobFinished}); !ok || err != nil {
			t.Fatalf("%s: finish: %v %v", tc.name, ok, err)
		}
		jk := keys.Job(1, a.ID)
		want := tc.edit(jk)
		if want == "" {
			us := rc.HGet(ctx, jk, "finished_at_us").Val()
			if len(us) < 16 {
				t.Fatalf("%s: finished_at_us %q", tc.name, us)
			}
			want = us[:len(us)-3]
		}
		res, err := db.CompleteNode(ctx, store.JobEnd{FlowID: f.ID, CallerID: 1, JobID: a.ID, Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"})
		if err != nil || !res.Applied || len(res.Ready) != 1 || res.Ready[0] != b.ID {
			t.Fatalf("%s: complete: %+v %v", tc.name, res, err)
		}
		if _, err := db.DispatchMany(ctx, f.ID, 1, []*model.Job{b}, "scheduler", 0); err != nil {
			t.Fatalf("%s: dispatch: %v", tc.name, err)
		}
		if got := rc.HGet(ctx, keys.Job(1, b.ID), "ready_at_ms").Val(); got != want {
			t.Errorf("%s: b ready_at_ms %q, want %q", tc.name, got, want)
		}
		claimSh(t, db, 1) // b, out of the next case's way
	}
}

// The successful ends of one flow that a finish applies are completed together: their
// job.finished events go in the call's two stream entries (lib_state's ev_later), the
// DAG's counts move once for all, and what each end causes — its result in the flow's
// map, its node leaving the DAG, the dependents whose dependencies are all done made
// ready — is as one by one, the completions' events after the ends'. An end whose node
// is not running any more (here: cancelled under it) applies nothing; the others do.
func TestFinishCompletesAFlowsEndsTogether(t *testing.T) {
	s, db, rc := applyContext(t, 56)
	ctx := context.Background()
	// roots a, b, c, g; d after a and b, e after c
	f, jobs := dagFlow(t, s, db, 6, map[int][]int{4: {0, 1}, 5: {2}})
	a, b, c, g, d, e := jobs[0], jobs[1], jobs[2], jobs[3], jobs[4], jobs[5]
	dag := keys.DAG(f.ID)
	last, err := db.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	runs := claimSh(t, db, 4)
	// g's node is cancelled while it runs: its end completes nothing
	rc.HSet(ctx, dag, "s:"+itoa(g.ID), string(model.NodeCancelled))
	before := rc.XLen(ctx, keys.Events).Val()
	applied := finishApplied(t, db, runs)
	if applied.Ends != 3 || applied.Dispatched != 2 || len(applied.FlowsEnded) != 0 {
		t.Fatalf("applied %+v, want 3 ends and 2 dispatched", applied)
	}
	// four job.finished in two entries, then the two job.dispatched in two more (one
	// entry each way before: six)
	if n := rc.XLen(ctx, keys.Events).Val() - before; n != 4 {
		t.Errorf("the finish wrote %d stream entries, want 4", n)
	}
	checkCompletedTogether(t, rc, f.ID, []*model.Job{a, b, c}, []*model.Job{d, e})
	if st := rc.HGet(ctx, dag, "s:"+itoa(g.ID)).Val(); st != string(model.NodeCancelled) {
		t.Fatalf("node g %s, want cancelled still", st)
	}
	if deps := rc.HGet(ctx, keys.Job(1, a.ID), "dependents").Val(); deps != "["+itoa(d.ID)+"]" {
		t.Fatalf("a's dependents on its job: %q", deps)
	}
	got := eventsBut(t, db, last, true)
	want := []string{}
	for _, r := range runs {
		want = append(want, string(model.EventJobFinished)+" "+itoa(r.Job.ID))
	}
	want = append(want, string(model.EventJobDispatched)+" "+itoa(d.ID), string(model.EventJobDispatched)+" "+itoa(e.ID))
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("events %v, want %v", got, want)
	}
	// d and e end together: the flow ends (g's node counted final by hand: cancelled
	// under its run), after their job.finished events
	rc.HIncrBy(ctx, dag, "terminal", 1)
	last, err = db.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applied = finishApplied(t, db, claimSh(t, db, 2))
	if applied.Ends != 2 || !slices.Equal(applied.FlowsEnded, []model.FlowStatus{model.FlowFinished}) {
		t.Fatalf("applied %+v, want 2 ends and the flow finished", applied)
	}
	if got := eventsBut(t, db, last, false); strings.Join(got, " ") != "job.finished job.finished flow.finished" {
		t.Fatalf("events %v, want two job.finished, then flow.finished", got)
	}
	res := rc.HGet(ctx, keys.Flow(f.ID), "result").Val()
	for _, j := range []*model.Job{a, b, c, d, e} {
		if !strings.Contains(res, `"`+itoa(j.ID)+`.out":"job `+itoa(j.ID)+`"`) {
			t.Fatalf("flow result %s lacks job %d's", res, j.ID)
		}
	}
}

// checkCompletedTogether: the nodes done completed (the DAG's counts, each one's fields
// gone from the DAG and its result in the flow's map) and the nodes ready dispatched.
func checkCompletedTogether(t *testing.T, rc *redis.Client, flow uint32, done, ready []*model.Job) {
	t.Helper()
	ctx := context.Background()
	dag, n := keys.DAG(flow), strconv.Itoa(len(done))
	if h := rc.HMGet(ctx, dag, "completed", "terminal").Val(); h[0] != n || h[1] != n {
		t.Fatalf("DAG completed %v, terminal %v: want %s and %s", h[0], h[1], n, n)
	}
	for _, j := range done {
		if rc.HExists(ctx, dag, "s:"+itoa(j.ID)).Val() || rc.HExists(ctx, dag, "a:"+itoa(j.ID)).Val() {
			t.Fatalf("completed node %d keeps its fields in the DAG", j.ID)
		}
		if v := rc.HGet(ctx, keys.FlowResults(flow), itoa(j.ID)+".out").Val(); v != "job "+itoa(j.ID) {
			t.Fatalf("node %d's result in the flow's map: %q", j.ID, v)
		}
	}
	for _, j := range ready {
		if st := rc.HGet(ctx, dag, "s:"+itoa(j.ID)).Val(); st != string(model.NodeDispatched) {
			t.Fatalf("node %d %s, want dispatched", j.ID, st)
		}
	}
}

// eventsBut reads the events after last but the job.started ones: their types, with
// ids each type and its job id.
func eventsBut(t *testing.T, db *store.DB, last string, ids bool) []string {
	t.Helper()
	evs, err := db.ReadEvents(context.Background(), last, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		switch {
		case ev.Type == string(model.EventJobStarted):
		case ids:
			got = append(got, ev.Type+" "+itoa(ev.JobID))
		default:
			got = append(got, ev.Type)
		}
	}
	return got
}

// A flow of more than 64 nodes keeps its running results (coord:flowres:<flow>) as a
// hash table from its first completions on (lib_complete's RESULTS_MARK, a field no
// reader takes for a result): as a listpack, each result written was a scan of all
// those before it. The flow reads the same results while it runs and once it ended; a
// smaller flow's stay a listpack.
func TestFlowResultsKeptAsAHashTable(t *testing.T) {
	s, db, rc := applyContext(t, 59)
	ctx := context.Background()
	for _, n := range []int{4, 70} {
		f, jobs := dagFlow(t, s, db, n, nil)
		rk := keys.FlowResults(f.ID)
		runs := claimSh(t, db, n)
		finishApplied(t, db, runs[:1]) // one end alone (complete), then many (complete_many)
		finishApplied(t, db, runs[1:n-1])
		want := "listpack"
		if n > 64 {
			want = "hashtable"
		}
		if enc := rc.ObjectEncoding(ctx, rk).Val(); enc != want {
			t.Errorf("flow of %d: its results are a %s; want a %s", n, enc, want)
		}
		fl, err := db.LoadFlow(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(fl.Result) != n-1 {
			t.Errorf("flow of %d running: %d results %v; want %d", n, len(fl.Result), fl.Result, n-1)
		}
		finishApplied(t, db, runs[n-1:])
		if fl, err = db.LoadFlow(ctx, f.ID); err != nil || fl.Status != model.FlowFinished {
			t.Fatalf("flow of %d: %+v %v", n, fl, err)
		}
		if len(fl.Result) != n {
			t.Errorf("flow of %d ended: %d results %v; want %d", n, len(fl.Result), fl.Result, n)
		}
		for _, j := range jobs {
			if v := fl.Result[itoa(j.ID)+".out"]; v != "job "+itoa(j.ID) {
				t.Errorf("flow of %d: job %d's result %q", n, j.ID, v)
			}
		}
	}
}

// A finish of several standalone runs writes each one's end as it is: a plain success
// applied here (its done_attempt and its two messages), a success with a handler's
// result and a non-zero exit code (the same, with them), a failure (the router's
// way: its error, no done_attempt) and a plain success again; none of them a field of
// another's, and each moved from the started index to its status's (the moves
// alternate: lib_state's index_later finds the last one's again), with its score.
func TestFinishWritesEachRunsEnd(t *testing.T) {
	s, db, rc := applyContext(t, 12)
	ctx := context.Background()
	var subs []store.Submission
	for i := range 4 {
		subs = append(subs, store.Submission{Job: shJob(7, 0, fmt.Sprintf("echo %d", i)), Actor: "7"})
	}
	subbed, err := s.SubmitGuarded(ctx, 12, subs, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := db.ClaimStarts(ctx, keys.Queue("sh"), "w12", time.Minute, make([]string, 4), store.Wake{})
	if err != nil || len(got) != 4 {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	outcomes := []store.JobOutcome{
		{Status: model.JobFinished},
		{Status: model.JobFinished, ResultJSON: []byte(`{"n":1}`), ExitCode: 3},
		{Status: model.JobError, Error: "boom"},
		{Status: model.JobFinished},
	}
	fs := make([]store.Finish, 4)
	for i, st := range got {
		if st.Job == nil || st.Job.ID != subbed[i].Job.ID {
			t.Fatalf("claimed %d: %+v", i, st)
		}
		fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: outcomes[i], Apply: true}
	}
	oks, errs := store.FinishJobs(ctx, fs)
	for i := range oks {
		if errs[i] != nil || !oks[i] {
			t.Fatalf("finish %d: %v %v", i, oks[i], errs[i])
		}
	}
	want := []map[string]string{
		{"status": "finished", "done_attempt": "1", "result_json": "", "exit_code": "", "error": ""},
		{"status": "finished", "done_attempt": "1", "result_json": `{"n":1}`, "exit_code": "3", "error": ""},
		{"status": "error", "done_attempt": "", "result_json": "", "exit_code": "", "error": "boom"},
		{"status": "finished", "done_attempt": "1", "result_json": "", "exit_code": "", "error": ""},
	}
	for i, w := range want {
		id := subbed[i].Job.ID
		h := rc.HGetAll(ctx, keys.Job(7, id)).Val()
		for f, v := range w {
			if h[f] != v {
				t.Fatalf("job %d: %s = %q, want %q (%v)", i, f, h[f], v, h)
			}
		}
		if h["finished_at_us"] == "" || h["result"] == "" || len(strings.Fields(h["msgs"])) != 2 {
			t.Fatalf("job %d: end or messages missing: %v", i, h)
		}
		m := fmt.Sprintf("7:%d", id)
		for _, st := range []string{"dispatched", "started", "finished", "error"} {
			score, err := rc.ZScore(ctx, keys.StatusIndex(keys.JobIndex, st), m).Result()
			if in := err == nil; in != (st == w["status"]) || (in && strconv.FormatFloat(score, 'f', -1, 64) != h["created_at_ms"]) {
				t.Fatalf("job %d (%s): in the %s index %v (score %.0f, created_at_ms %s)", i, w["status"], st, in, score, h["created_at_ms"])
			}
		}
	}
}

// A node's dispatch numbers its attempt: the first (its DAG holds no a: yet) is 1,
// made without a number, and a retry's the one after its last, by dispatch (one job)
// and by a started flow's dispatch of several (lib_start's dispatch_ready) alike.
func TestDispatchNumbersTheRetrysAttempt(t *testing.T) {
	s, db, _ := applyContext(t, 57)
	ctx := context.Background()
	f, jobs := dagFlow(t, s, db, 3, nil)
	runs := claimSh(t, db, 3)
	for _, st := range runs {
		if st.Job.Attempt != 1 {
			t.Fatalf("job %d's first run is attempt %d; want 1", st.Job.ID, st.Job.Attempt)
		}
		res, err := db.CompleteNode(ctx, store.JobEnd{FlowID: f.ID, CallerID: 1, JobID: st.Job.ID, Attempt: 1, Status: model.JobError,
			Error: "boom", Retries: 2, Actor: "scheduler"})
		if err != nil || res.RetryAt.IsZero() {
			t.Fatalf("failed end of job %d: %+v %v, want a retry", st.Job.ID, res, err)
		}
	}
	one, err := db.DispatchMany(ctx, f.ID, 1, jobs[:1], "scheduler", 0)
	if err != nil || len(one) != 1 || one[0].Attempt != 2 {
		t.Fatalf("dispatch of job %d's retry: %+v %v; want attempt 2", jobs[0].ID, one, err)
	}
	many, err := db.DispatchStarted(ctx, f.ID, 1, jobs[1:], "scheduler", time.Now()) // (two: flow_start_dispatch)
	if err != nil || len(many) != 2 || many[0].Attempt != 2 || many[1].Attempt != 2 {
		t.Fatalf("started dispatch of the retries: %+v %v; want attempt 2 each", many, err)
	}
	for _, j := range jobs {
		got, err := db.LoadJob(ctx, 1, j.ID)
		if err != nil || got.Attempt != 2 || got.Status != model.JobDispatched {
			t.Fatalf("job %d: %+v %v; want dispatched, attempt 2", j.ID, got, err)
		}
	}
}
