package store_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// submitN submits n plain sh jobs (of key ck with limit and policy when ck is given)
// and returns them.
func submitN(t *testing.T, s *store.Store, n int, ck string, limit uint32, policy string) []*model.Job {
	t.Helper()
	subs := make([]store.Submission, n)
	for i := range subs {
		subs[i] = store.Submission{Job: &model.Job{CallerID: 1, Script: "true", ScriptType: "sh", ConcurrencyKey: ck, ConcurrencyLimit: limit, ConcurrencyPolicy: policy}}
	}
	got, err := s.SubmitJobs(context.Background(), 1, subs, "actor:1")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*model.Job, len(got))
	for i, g := range got {
		out[i] = g.Job
	}
	return out
}

// countEvents counts the context's events of type typ whose detail holds sub.
func countEvents(t *testing.T, typ model.EventType, sub string) int {
	t.Helper()
	evs, err := srv.Client(t, 1).XRange(context.Background(), keys.Events, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range store.EventsOfEntries(1, evs) { // (an entry may hold several events of a call)
		if e.Type == string(typ) && strings.Contains(e.Detail, sub) {
			n++
		}
	}
	return n
}

// releasedOrder is the jobs of the job.released events whose detail holds sub, in the
// events' order.
func releasedOrder(t *testing.T, sub string) []uint32 {
	t.Helper()
	evs, err := srv.Client(t, 1).XRange(context.Background(), keys.Events, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	for _, e := range evs {
		if d, _ := e.Values["detail"].(string); e.Values["type"] == model.EventJobReleased.Stored() && strings.Contains(d, sub) {
			id, _ := strconv.ParseUint(fmt.Sprint(e.Values["job_id"]), 10, 32)
			ids = append(ids, uint32(id))
		}
	}
	return ids
}

// A max-running limit of a script type: a runner with 8 free slots starts at most 3
// jobs at once; a claim at the limit starts none, takes the context's wake tokens
// off its list (no claim loop while the limit holds) and marks the oldest queued job
// held (a job.held event); the end of a run gives its slot back and puts a token back.
// Every job runs once; the running set is empty at the end. Without lib_limit the
// first claim starts 8.
func TestRunLimitMaxRunning(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	if err := db.SetLimit(ctx, &model.RunLimit{Scope: "type:sh", MaxRunning: 3}); err != nil {
		t.Fatal(err)
	}
	jobs := submitN(t, s, 20, "", 0, "")
	wk := keys.WakeRunner(1, "queue:sh")
	coord := srv.Client(t, 0)
	wake := store.Wake{Key: wk, Token: "1", Held: true}
	var running []ckRun
	ran := map[uint32]bool{}
	claim := func() int {
		got, err := db.ClaimStarts(ctx, "queue:sh", "w1", time.Minute, make([]string, 8-len(running)), wake)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range got {
			if x.Outcome != store.StartRun || ran[x.Job.ID] {
				t.Fatalf("claim %s: outcome %v (or ran twice)", x.Claim.Item, x.Outcome)
			}
			ran[x.Job.ID] = true
			running = append(running, ckRun{x.Claim, x.Job})
		}
		if len(running) > 3 {
			t.Fatalf("%d jobs run at once under a limit of 3", len(running))
		}
		return len(got)
	}
	for step := 0; len(ran) < len(jobs) || len(running) > 0; step++ {
		if step > 200 {
			t.Fatalf("stuck: %d of %d ran", len(ran), len(jobs))
		}
		claim()
		if len(ran) < len(jobs) {
			// at the limit: a claim starts none, leaves no token, the next job says why
			if n := claim(); n != 0 {
				t.Fatalf("a claim at the limit started %d", n)
			}
			checkParked(t, db, wk, jobs[len(ran)].ID, "limit type:sh: 3 running")
		}
		if len(running) == 0 {
			continue
		}
		r := running[0]
		running = running[1:]
		if ok, err := db.FinishJob(ctx, r.c, r.j, store.JobOutcome{Status: model.JobFinished}); !ok || err != nil {
			t.Fatalf("finish %d: %v %v", r.j.ID, ok, err)
		}
		if len(ran) < len(jobs) && coord.LLen(ctx, wk).Val() == 0 {
			t.Fatalf("the end of a run under the limit woke nobody (step %d)", step)
		}
	}
	if n := srv.Client(t, 1).SCard(ctx, keys.LimitRunning("type:sh")).Val(); n != 0 {
		t.Errorf("%d runs left counted after every job ended", n)
	}
	if countEvents(t, model.EventJobHeld, "limit type:sh") == 0 {
		t.Error("no job.held event names the limit")
	}
	ls, err := db.Limits(ctx)
	if err != nil || len(ls) != 1 || ls[0].Scope != "type:sh" || ls[0].MaxRunning != 3 || ls[0].Running != 0 {
		t.Fatalf("limit.list: %+v %v", ls, err)
	}
}

// checkParked checks that a claim stopped by a limit left no wake token on wk and
// that the oldest waiting job, id, says why.
func checkParked(t *testing.T, db *store.DB, wk string, id uint32, why string) {
	t.Helper()
	ctx := context.Background()
	if n := srv.Client(t, 0).LLen(ctx, wk).Val(); n != 0 {
		t.Fatalf("a claim stopped by the limit left %d wake tokens", n)
	}
	if h, err := db.LoadJob(ctx, 1, id); err != nil || h.Held != why {
		t.Fatalf("the oldest waiting job (%d): held %q, %v (want %q)", id, h.Held, err, why)
	}
}

// A run whose runner died (kill -9) holds its slot only while its lease lasts: once
// the lease expired, a claim takes the slot (the sweep need not have run).
func TestRunLimitLeaseEnd(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	if err := db.SetLimit(ctx, &model.RunLimit{Scope: "context", MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	submitN(t, s, 2, "", 0, "")
	got, err := db.ClaimStarts(ctx, "queue:sh", "dead", 50*time.Millisecond, make([]string, 2), store.Wake{})
	if err != nil || len(got) != 1 {
		t.Fatalf("first claim: %+v %v (want one job: the limit is 1)", got, err)
	}
	first := got[0].Job.ID
	for deadline := time.Now().Add(time.Minute); ; {
		got, err = db.ClaimStarts(ctx, "queue:sh", "w2", time.Minute, make([]string, 2), store.Wake{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead run's slot never came back")
		}
	}
	if len(got) != 1 || got[0].Job.ID == first {
		t.Fatalf("after the lease's end: %+v (want the other job, alone)", got)
	}
}

// A rate limit: a bucket of burst 2 at 1 job per minute lets a claim of 8 start 2,
// the next none; the stopped claim parks the queue in coord:delayed at the time of
// the next token (a release before then changes nothing) and the waiting job says
// why. Removing the limit at run time wakes the queue, and the next claim starts the
// rest: no restart.
func TestRunLimitRate(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	if err := db.SetLimit(ctx, &model.RunLimit{Scope: "type:sh", Rate: 1, Per: "1m", Burst: 2}); err != nil {
		t.Fatal(err)
	}
	jobs := submitN(t, s, 10, "", 0, "")
	got, err := db.ClaimStarts(ctx, "queue:sh", "w1", time.Minute, make([]string, 8), store.Wake{})
	if err != nil || len(got) != 2 {
		t.Fatalf("first claim: %d jobs, %v (want the burst, 2)", len(got), err)
	}
	got, err = db.ClaimStarts(ctx, "queue:sh", "w1", time.Minute, make([]string, 8), store.Wake{})
	if err != nil || len(got) != 0 {
		t.Fatalf("second claim: %d jobs, %v (want none)", len(got), err)
	}
	member := "1:limit:queue:sh"
	due, err := srv.Client(t, 0).ZScore(ctx, keys.Delayed, member).Result()
	if err != nil || time.UnixMilli(int64(due)).Before(time.Now().Add(30*time.Second)) {
		t.Fatalf("the parked queue's entry: %v %v (want about a minute ahead)", due, err)
	}
	if ok, err := db.WakeLimited(ctx, store.DelayedItem{ContextID: 1, Kind: "limit", Queue: "queue:sh", Member: member}); ok || err != nil {
		t.Fatalf("a release before the next token: %v %v", ok, err)
	}
	if j, err := db.LoadJob(ctx, 1, jobs[2].ID); err != nil || j.Held != "limit type:sh: 1 per 60000 ms" {
		t.Fatalf("the waiting job's held field: %q %v", j.Held, err)
	}
	if ok, err := db.DeleteLimit(ctx, "type:sh"); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	got, err = db.ClaimStarts(ctx, "queue:sh", "w1", time.Minute, make([]string, 8), store.Wake{})
	if err != nil || len(got) != 8 {
		t.Fatalf("after the limit's removal: %d jobs, %v (want 8)", len(got), err)
	}
}

// A limit set for a concurrency key replaces its jobs' own limit.
func TestRunLimitKey(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	if err := db.SetLimit(ctx, &model.RunLimit{Scope: "key:k", MaxRunning: 2}); err != nil {
		t.Fatal(err)
	}
	submitN(t, s, 4, "k", 1, "")
	if got := claimFree(t, db, 8); len(got) != 2 {
		t.Fatalf("claimed %d jobs of key k (want 2: the key's limit, not the jobs' 1)", len(got))
	}
}

// Bad limits are refused naming the field, and nothing is stored.
func TestRunLimitRefused(t *testing.T) {
	_, db := priorityCtx(t)
	ctx := context.Background()
	for _, c := range []struct {
		l     model.RunLimit
		field string
	}{
		{model.RunLimit{Scope: "queue:sh", MaxRunning: 1}, "scope"},
		{model.RunLimit{Scope: "type:no-such-type", MaxRunning: 1}, "scope"},
		{model.RunLimit{Scope: "context"}, "max_running"},
		{model.RunLimit{Scope: "key:k", Rate: model.MaxRunLimitRate + 1}, "rate"},
		{model.RunLimit{Scope: "context", Rate: 5, Per: "soon"}, "per"},
		{model.RunLimit{Scope: "context", MaxRunning: 1, Per: "1s"}, "per"},
	} {
		err := db.SetLimit(ctx, &c.l)
		var ve *model.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%+v: %v (want a refusal naming %s)", c.l, err, c.field)
		}
	}
	if ls, err := db.Limits(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("refused limits stored: %+v %v", ls, err)
	}
}

// Concurrency policies at the key's limit: cancel_newest ends the new jobs
// cancelled (error naming the policy, a job.cancelled event, never run);
// cancel_oldest stops the key's running job (a stop request on its worker's list)
// or ends its queued one, and the new job takes the place.
func TestConcurrencyPolicies(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	newest := submitN(t, s, 3, "n", 1, model.ConcurrencyCancelNewest)
	for i, j := range newest {
		got, err := db.LoadJob(ctx, 1, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		cancelled := got.Status == model.JobError && strings.Contains(got.Error, "policy cancel_newest")
		if cancelled != (i > 0) {
			t.Errorf("cancel_newest job %d: %s %q", i, got.Status, got.Error)
		}
	}
	if n := countEvents(t, model.EventJobCancelled, "policy cancel_newest"); n != 2 {
		t.Errorf("%d job.cancelled events name cancel_newest (want 2)", n)
	}
	if got := claimFree(t, db, 8); len(got) != 1 || got[0].j.ID != newest[0].ID {
		t.Fatalf("cancel_newest: claimed %+v (want the first job only)", got)
	}

	first := submitN(t, s, 1, "o", 1, model.ConcurrencyCancelOldest)[0]
	run := claimFree(t, db, 8)
	if len(run) != 1 || run[0].j.ID != first.ID {
		t.Fatalf("cancel_oldest: first claim %+v", run)
	}
	second := submitN(t, s, 1, "o", 1, model.ConcurrencyCancelOldest)[0]
	if j, _ := db.LoadJob(ctx, 1, first.ID); !j.StopAsked {
		t.Errorf("the running oldest job was not asked to stop: %+v", j)
	}
	if n := srv.Client(t, 0).LLen(ctx, keys.StopList("w1")).Val(); n != 1 {
		t.Errorf("the worker's stop list holds %d entries (want 1)", n)
	}
	third := submitN(t, s, 1, "o", 1, model.ConcurrencyCancelOldest)[0]
	if j, _ := db.LoadJob(ctx, 1, second.ID); j.Status != model.JobError || !strings.Contains(j.Error, "policy cancel_oldest") {
		t.Errorf("the queued oldest job: %s %q (want error, cancelled by cancel_oldest)", j.Status, j.Error)
	}
	got, err := db.ClaimStarts(ctx, "queue:sh", "w1", time.Minute, make([]string, 8), store.Wake{})
	if err != nil {
		t.Fatal(err)
	}
	var started []uint32
	for _, x := range got {
		if x.Outcome == store.StartRun {
			started = append(started, x.Job.ID)
		}
	}
	if len(started) != 1 || started[0] != third.ID {
		t.Fatalf("cancel_oldest: started %v (want the newest job, %d, only)", started, third.ID)
	}
}

// Debounce: a job submitted with a debounce key replaces the key's pending job, which
// ends cancelled (naming the debounce and the job that replaced it) and leaves
// coord:delayed; a job no longer scheduled is left as it is.
func TestDebounceReplaces(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	submit := func() *model.Job {
		t.Helper()
		got, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: &model.Job{CallerID: 1, Script: "true", ScriptType: "sh", DebounceKey: "k"},
			RunAt: time.Now().Add(time.Minute)}}, "actor:1")
		if err != nil {
			t.Fatal(err)
		}
		j := got[0].Job
		if prev, err := db.Debounce(ctx, "k", j, time.Minute, "actor:1"); err != nil {
			t.Fatal(err)
		} else if prev != "" {
			t.Logf("job %d replaced %s", j.ID, prev)
		}
		return j
	}
	a := submit()
	b := submit()
	ja, err := db.LoadJob(ctx, 1, a.ID)
	if err != nil || ja.Status != model.JobError || !strings.Contains(ja.Error, "debounced by job 1:"+u32s(b.ID)) || !strings.Contains(ja.Error, "debounce_key k") {
		t.Fatalf("the replaced job: %+v %v", ja, err)
	}
	if _, err := srv.Client(t, 0).ZScore(ctx, keys.Delayed, "1:job:1:"+u32s(a.ID)).Result(); err == nil {
		t.Error("the replaced job is still in coord:delayed")
	}
	if jb, err := db.LoadJob(ctx, 1, b.ID); err != nil || jb.Status != model.JobScheduled || jb.DebounceKey != "k" {
		t.Fatalf("the pending job: %+v %v", jb, err)
	}
	// b stopped (no longer scheduled): a later submission leaves it as it is
	if ok, _, err := db.CancelScheduled(ctx, 1, b.ID, "actor:1"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	c := submit()
	if jb, _ := db.LoadJob(ctx, 1, b.ID); jb.Error != "cancelled" {
		t.Errorf("a stopped job was cancelled again by job %d: %q", c.ID, jb.Error)
	}
}

func u32s(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// Acceptance 2 (keys) at the store: 3 concurrency keys × 1,000 jobs with a limit of 2
// per key, claimed by a runner of 8 slots that ends its oldest run after each claim:
// from the jobs' own start and end stamps (started_at_us, finished_at_us), at most 2
// jobs of a key ever run at once and each key reaches 2; the keys interleave (in the
// first tenth of the starts each key has close to a third). tests/e2e
// TestConcurrencyKeysEndToEnd runs the same on the real binaries with fewer jobs.
func TestConcurrencyKeys3x1000(t *testing.T) {
	if testing.Short() {
		t.Skip("3,000 jobs")
	}
	s, db := priorityCtx(t)
	ctx := context.Background()
	ks := []string{"a", "b", "c"}
	for _, k := range ks {
		submitN(t, s, 1000, k, 2, "")
	}
	var running []ckRun
	done := 0
	for step := 0; done < 3000; step++ {
		if step > 10000 {
			t.Fatalf("stuck: %d of 3000 ended", done)
		}
		running = append(running, claimFree(t, db, 8-len(running))...)
		if len(running) == 0 {
			t.Fatalf("nothing to run with %d of 3000 ended", done)
		}
		r := running[0]
		running = running[1:]
		if ok, err := db.FinishJob(ctx, r.c, r.j, store.JobOutcome{Status: model.JobFinished}); !ok || err != nil {
			t.Fatalf("finish %d: %v %v", r.j.ID, ok, err)
		}
		done++
	}
	type edge struct {
		at    int64
		key   string
		delta int
	}
	var edges []edge
	var starts []edge
	rdb := srv.Client(t, 1)
	p := rdb.Pipeline()
	cmds := make([]interface{ Val() []any }, 3000)
	for i := range 3000 {
		cmds[i] = p.HMGet(ctx, keys.Job(1, uint32(i+1)), "concurrency_key", "started_at_us", "finished_at_us")
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		v := c.Val()
		k, _ := v[0].(string)
		a, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		b, _ := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
		if a == 0 || b < a {
			t.Fatalf("job %d: start %d, end %d", i+1, a, b)
		}
		edges = append(edges, edge{a, k, 1}, edge{b, k, -1})
		starts = append(starts, edge{a, k, 1})
	}
	// an end and a start at the same µs: the end first (the start came after it)
	slices.SortFunc(edges, func(x, y edge) int {
		if x.at != y.at {
			return cmp.Compare(x.at, y.at)
		}
		return cmp.Compare(x.delta, y.delta)
	})
	now, most := map[string]int{}, map[string]int{}
	for _, e := range edges {
		now[e.key] += e.delta
		most[e.key] = max(most[e.key], now[e.key])
	}
	for _, k := range ks {
		if most[k] != 2 {
			t.Errorf("key %s: at most %d of its jobs ran at once by their stamps, want 2", k, most[k])
		}
	}
	slices.SortFunc(starts, func(x, y edge) int { return cmp.Compare(x.at, y.at) })
	n := map[string]int{}
	for _, e := range starts[:300] {
		n[e.key]++
	}
	for _, k := range ks {
		if n[k] < 80 {
			t.Errorf("key %s: %d of the first 300 starts, want about a third: %v", k, n[k], n)
		}
	}
}

// A rate per concurrency key: a key at 1 job a minute with a burst of 2 lets a claim
// of 8 start 2 of its 5 jobs beside the 3 jobs of no key; the key's other 3 are held
// (StartHeld: on coord:ckrate:k, the oldest says why, job.held events) and the key's
// release is due about a minute ahead (a release before then changes nothing). A
// raised rate at run time makes the release due now: the held jobs go back to their
// queue with their tokens paid and the next claim starts them, oldest first, taking
// no token again; nothing is left held. Without the key's rate the first claim starts
// all 8.
func TestRunLimitKeyRate(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	if err := db.SetLimit(ctx, &model.RunLimit{Scope: "key:k", Rate: 1, Per: "1m", Burst: 2}); err != nil {
		t.Fatal(err)
	}
	keyed := submitN(t, s, 5, "k", 10, "")
	submitN(t, s, 3, "", 0, "")
	got, err := db.ClaimStarts(ctx, "queue:sh", "w1", time.Minute, make([]string, 8), store.Wake{})
	if err != nil {
		t.Fatal(err)
	}
	var started, held []uint32
	for _, x := range got {
		id, _ := strconv.ParseUint(x.Claim.Item[strings.LastIndexByte(x.Claim.Item, ':')+1:], 10, 32)
		switch x.Outcome {
		case store.StartRun:
			started = append(started, uint32(id))
		case store.StartHeld:
			held = append(held, uint32(id))
		default:
			t.Fatalf("claim %s: outcome %v %v", x.Claim.Item, x.Outcome, x.Err)
		}
	}
	want := []uint32{keyed[2].ID, keyed[3].ID, keyed[4].ID}
	if len(started) != 5 || !slices.Equal(held, want) {
		t.Fatalf("first claim: started %v, held %v (want 5 started: 2 of the key and the 3 others; held %v)", started, held, want)
	}
	c1 := srv.Client(t, 1)
	if n := c1.LLen(ctx, keys.ConcurrencyRateHeld("k")).Val(); n != 3 {
		t.Fatalf("%d jobs on the key's held list (want 3)", n)
	}
	if j, err := db.LoadJob(ctx, 1, keyed[2].ID); err != nil || j.Held != "limit key:k: 1 per 60000 ms" {
		t.Fatalf("a held job's held field: %q %v", j.Held, err)
	}
	if n := countEvents(t, model.EventJobHeld, "limit key:k"); n != 3 {
		t.Errorf("%d job.held events name the key's rate (want 3)", n)
	}
	member := "1:keyrate:k"
	due, err := srv.Client(t, 0).ZScore(ctx, keys.Delayed, member).Result()
	if err != nil || time.UnixMilli(int64(due)).Before(time.Now().Add(30*time.Second)) {
		t.Fatalf("the key's release: %v %v (want about a minute ahead)", due, err)
	}
	it := store.DelayedItem{ContextID: 1, Kind: "keyrate", Key: "k", Member: member}
	if ok, err := db.WakeLimited(ctx, it); ok || err != nil {
		t.Fatalf("a release before the next token: %v %v", ok, err)
	}
	keyRateRaisedReleases(t, db, it, want)
}

// keyRateRaisedReleases: the key's rate raised at run time makes its release due now,
// paying the held jobs' tokens one per token as they come (the bucket keeps its tokens
// across the change); the next claim starts them, oldest first, taking no token again.
func keyRateRaisedReleases(t *testing.T, db *store.DB, it store.DelayedItem, want []uint32) {
	t.Helper()
	ctx := context.Background()
	c1 := srv.Client(t, 1)
	// raised at run time: the release is due now and pays the held jobs' tokens, one
	// per token as they come (the bucket keeps its tokens across the change)
	if err := db.SetLimit(ctx, &model.RunLimit{Scope: "key:k", Rate: 1000, Per: "1s", Burst: 10}); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.WakeLimited(ctx, it); !ok || err != nil {
		t.Fatalf("the release after the raise: %v %v", ok, err)
	}
	for deadline := time.Now().Add(time.Minute); c1.LLen(ctx, keys.ConcurrencyRateHeld("k")).Val() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs left held a minute after the raise", c1.LLen(ctx, keys.ConcurrencyRateHeld("k")).Val())
		}
		if _, err := db.WakeLimited(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	tokens, _ := strconv.ParseFloat(c1.HGet(ctx, keys.LimitBucket("key:k"), "tokens").Val(), 64)
	runs := claimFree(t, db, 8)
	var ran []uint32
	for _, r := range runs {
		ran = append(ran, r.j.ID)
	}
	// Released oldest first (their events' order); each release goes to its queue's
	// consuming end, so the claim's order among jobs released by separate wakes — the
	// tokens came one a millisecond here, or all at once on a slower run — is the
	// newest release first: the claim is checked to start the three, in any order.
	if got := slices.Sorted(slices.Values(ran)); !slices.Equal(got, want) {
		t.Fatalf("after the release: runs %v (want the 3 held, %v)", ran, want)
	}
	if order := releasedOrder(t, "limit key:k"); !slices.Equal(order, want) {
		t.Errorf("jobs released in the order %v (want the oldest held first: %v)", order, want)
	}
	for _, r := range runs {
		if v := c1.HMGet(ctx, keys.Job(1, r.j.ID), "held", "rate_paid").Val(); v[0] != nil || v[1] != nil {
			t.Errorf("job %d started with held/rate_paid %v", r.j.ID, v)
		}
	}
	if after, _ := strconv.ParseFloat(c1.HGet(ctx, keys.LimitBucket("key:k"), "tokens").Val(), 64); after != tokens {
		t.Errorf("the paid jobs' claim took tokens again: %.3f -> %.3f", tokens, after)
	}
	if n := countEvents(t, model.EventJobReleased, "limit key:k"); n != 3 {
		t.Errorf("%d job.released events name the key's rate (want 3)", n)
	}
}
