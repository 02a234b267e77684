package e2e

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (operating 1): cancel of a running flow — every running job's process is
// gone (1 s by the design: the time is logged; the jobs sleep 300 s, so gone within
// the safety net is killed), pending jobs never start, the flow shows why.
func TestCancelRunningFlow(t *testing.T) {
	st, c := newStack(t, harness.StackOptions{})
	sa, sb := newSleeper(t, "a"), newSleeper(t, "b")
	createFlow(t, c, 70, nil,
		jobSpec{id: 1, typ: "sh", script: sa.script},
		jobSpec{id: 2, typ: "bash", script: sb.script},
		jobSpec{id: 3, typ: "sh", script: "echo never", deps: []uint32{1}},
		jobSpec{id: 4, typ: "sh", script: "echo never", deps: []uint32{3}},
	)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 70}, nil)
	pa, pb := sa.pid(t, st), sb.pid(t, st)
	start := time.Now()
	var f harness.Flow
	c.MustCall(t, "flow.cancel", map[string]any{"context_id": ctx1, "id": 70}, &f)
	// The jobs sleep 300 s: gone within the safety net only when killed.
	waitGone(t, pa, time.Minute)
	waitGone(t, pb, time.Minute)
	t.Logf("cancel killed the running jobs in %v", time.Since(start))
	f = c.WaitFlow(t, ctx1, 70, time.Minute)
	if f.Status != "error" || f.Error != "cancelled by actor 1" {
		t.Fatalf("cancelled flow: %+v", f)
	}
	// Jobs 3 and 4 never ran: two cancelled ends (1 and 2 were stopped: failed ends).
	if n := metricValue(t, st.Scheduler.AdminAddr, `hero_job_ends_total{outcome="cancelled"}`); n != 2 {
		t.Errorf(`hero_job_ends_total{outcome="cancelled"} = %v, want 2`, n)
	}
	for _, id := range []uint32{3, 4} {
		j := loadJob(t, c, id)
		if j.Status != "error" || j.StartedAt != 0 || j.Error != "cancelled by actor 1" {
			t.Errorf("pending job %d: %+v", id, j)
		}
	}
	for id, st := range nodeStatuses(t, c, 70) {
		if st != "cancelled" {
			t.Errorf("node %d is %s, want cancelled", id, st)
		}
	}
	evs := events(t, c)
	if countEvents(evs, "job.started", 3)+countEvents(evs, "job.started", 4) != 0 {
		t.Error("a pending job started")
	}
	var cancelled map[string]any
	for _, e := range evs {
		if e["type"] == "flow.cancelled" {
			cancelled = e
		}
	}
	if cancelled == nil || cancelled["actor"] != "1" {
		t.Errorf("flow.cancelled event with the actor: %v", cancelled)
	}
	// Cancelling again: the flow ended.
	err := c.Call("flow.cancel", map[string]any{"context_id": ctx1, "id": 70}, nil)
	if re, ok := err.(*harness.RPCError); !ok || re.Code != -32010 {
		t.Errorf("second cancel: %v", err)
	}
}

// keysOf returns the keys of a DB (SCAN), without the ones every context keeps.
// keysOf lists the keys of a context's DB on the server that holds it; db 0: the keys
// of DB 0 of every server (the primary's, and the coordination entries of contexts
// placed elsewhere).
func keysOf(t *testing.T, db int) []string {
	var out []string
	srvs := []*redistest.Server{redisOf(uint32(db))}
	if db == 0 && placedSrv != nil {
		srvs = append(srvs, placedSrv)
	}
	for _, srv := range srvs {
		out = append(out, srv.Keys(t, db)...)
	}
	sort.Strings(out)
	return out
}

func without(a, b []string) []string {
	in := map[string]bool{}
	for _, k := range b {
		in[k] = true
	}
	var out []string
	for _, k := range a {
		if !in[k] {
			out = append(out, k)
		}
	}
	return out
}

// Acceptance (operating 2): delete leaves no key of the deleted object behind.
func TestDeleteLeavesNothing(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{})
	// Keys that exist before the objects: the context, the runner, counters, events.
	base := keysOf(t, ctx1)
	base0 := keysOf(t, 0)
	createFlow(t, c, 80, map[string]string{"X": "1"},
		jobSpec{id: 1, typ: "sh", script: "echo one; echo R=1 > $HERO_RESULT_FILE"},
		jobSpec{id: 2, typ: "python", script: "print('two')", deps: []uint32{1}},
		jobSpec{id: 3, typ: "sh", script: "echo three"}, // dispatched with job 1: one message for both
	)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 80}, nil)
	if f := c.WaitFlow(t, ctx1, 80, time.Minute); f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}
	if !slices.Contains(keysOf(t, ctx1), "coord:flowmsgs:80") {
		t.Fatalf("the flow tracks no shared message (keys: %v)", keysOf(t, ctx1))
	}
	var standalone harness.Job
	c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 9, "script": "echo alone", "script_type": "sh"}}, &standalone)
	// A job of a flow cannot be deleted on its own; a running flow cannot be deleted.
	if err := c.Call("job.delete", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, nil); err == nil || !strings.Contains(err.Error(), "belongs to flow 80") {
		t.Fatalf("delete a flow's job: %v", err)
	}
	c.MustCall(t, "flow.delete", map[string]any{"context_id": ctx1, "id": 80}, nil)
	c.MustCall(t, "job.delete", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 9}, nil)
	checkNothingLeftOfFlow(t, c, base, base0)
	// Runner delete.
	c.MustCall(t, "runner.create", map[string]any{"context_id": ctx1, "runner": map[string]any{"id": 7, "script_types": []string{"v"}}}, nil)
	c.MustCall(t, "runner.delete", map[string]any{"context_id": ctx1, "id": 7}, nil)
	for _, k := range keysOf(t, ctx1) {
		if strings.Contains(k, "runner:7") || strings.Contains(k, "rq:7:") {
			t.Errorf("runner key left: %s", k)
		}
	}
	if v := redisOf(ctx1).Client(t, ctx1).HGet(context.Background(), "coord:script_types", "v").Val(); v != "" {
		t.Errorf("script type v still counted: %q", v)
	}
	// Context delete: refused while a flow runs, unless forced; then the DB is empty.
	createFlow(t, c, 81, nil, jobSpec{id: 20, typ: "sh", script: "sleep 30"})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 81}, nil)
	err := c.Call("context.delete", map[string]any{"id": ctx1}, nil)
	if re, ok := err.(*harness.RPCError); !ok || re.Code != -32010 || !strings.Contains(re.Message, "running flow") {
		t.Fatalf("delete a context with a running flow: %v", err)
	}
	c.MustCall(t, "context.delete", map[string]any{"id": ctx1, "force": true}, nil)
	checkNothingLeftOfContext(t)
}

// checkNothingLeftOfFlow: after the flow and the standalone job were deleted, only
// the context's counters and event log remain of them in its DB (base: its keys
// before), and in DB 0 (base0) only what expires or leaves on its own; no expiry
// entry is left, and both are gone.
func checkNothingLeftOfFlow(t *testing.T, c *harness.Client, base, base0 []string) {
	t.Helper()
	// Counters and the event log are the context's, not the objects'.
	shared := func(k string) bool {
		return strings.HasPrefix(k, "coord:seq:") || k == "coord:events" || k == "coord:runner:1:procs"
	}
	for _, k := range without(keysOf(t, ctx1), base) {
		if !shared(k) {
			t.Errorf("key left behind after delete: %s", k)
		}
	}
	for _, k := range without(keysOf(t, 0), base0) {
		// Wake lists, the used nonces of signed requests (they expire on their own), the
		// index of contexts with work (a context leaves it at the next sweep), the
		// sweep lock (it expires), the runner processes' heartbeats.
		if !strings.HasPrefix(k, "coord:wake:") && !strings.HasPrefix(k, "coord:nonce:") && k != "coord:busy" && k != "coord:sweeplock" && !strings.HasPrefix(k, "coord:procs:") {
			t.Errorf("DB 0 key left behind: %s", k)
		}
	}
	if n := redisOf(ctx1).Client(t, 0).ZCard(context.Background(), "coord:expire").Val(); n != 0 {
		t.Errorf("expiry entries left: %d", n)
	}
	if err := c.Call("flow.load", map[string]any{"context_id": ctx1, "id": 80}, nil); err == nil || err.(*harness.RPCError).Code != -32004 {
		t.Errorf("flow.load after delete: %v", err)
	}
	if err := c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, nil); err == nil || err.(*harness.RPCError).Code != -32004 {
		t.Errorf("job.load after delete: %v", err)
	}
}

// checkNothingLeftOfContext: after the context was deleted its DB is empty, and
// nothing of it is left in DB 0: its registration, active flows, wake lists, busy
// entry, and its entry in the runner's index.
func checkNothingLeftOfContext(t *testing.T) {
	t.Helper()
	if left := keysOf(t, ctx1); len(left) != 0 {
		t.Errorf("keys left in the deleted context's DB: %v", left)
	}
	ctx := context.Background()
	c0 := redisSrv.Client(t, 0)
	if c0.ZScore(ctx, "coord:contexts", "1").Err() == nil {
		t.Error("context still registered")
	}
	for _, m := range redisOf(ctx1).Client(t, 0).SMembers(ctx, "coord:flows:active").Val() {
		if strings.HasPrefix(m, "1:") {
			t.Errorf("active flow left: %s", m)
		}
	}
	for _, k := range keysOf(t, 0) {
		if strings.HasPrefix(k, "coord:wake:1:") {
			t.Errorf("wake list left: %s", k)
		}
	}
	c1 := redisOf(ctx1).Client(t, 0)
	if c1.ZScore(ctx, "coord:busy", "1").Err() == nil {
		t.Error("deleted context still in coord:busy")
	}
	if c1.SIsMember(ctx, "coord:runner:1:contexts", "1").Val() {
		t.Error("deleted context still in the runner's index coord:runner:1:contexts")
	}
}

// Acceptance (operating 4, test part): with a short retention, ended objects vanish
// and running ones stay.
func TestRetention(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{SchedulerArgs: []string{"--retention", "2s"}})
	// A long flow first: what exists once its job runs is what must stay.
	createFlow(t, c, 91, nil, jobSpec{id: 2, typ: "sh", script: "sleep 20"})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 91}, nil)
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, 2).Status == "started" }) {
		t.Fatal("the long job did not start")
	}
	before := keysOf(t, ctx1)
	// A short flow and a standalone job: everything they add must go.
	createFlow(t, c, 90, nil, jobSpec{id: 1, typ: "sh", script: "echo short"})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 90}, nil)
	if f := c.WaitFlow(t, ctx1, 90, time.Minute); f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}
	var j harness.Job
	c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 3, "script": "echo alone", "script_type": "sh"}}, &j)
	added := without(keysOf(t, ctx1), before)
	for _, want := range []string{"flow:90", "job:1:1", "job:1:3", "coord:log:1:1", "coord:log:1:3"} {
		if !slices.Contains(added, want) {
			t.Fatalf("%s missing before expiry (added: %v)", want, added)
		}
	}
	if !slices.ContainsFunc(added, func(k string) bool { return strings.HasPrefix(k, "message:") }) {
		t.Fatalf("no message keys to expire (added: %v)", added)
	}
	gone := c.WaitEvent(t, ctx1, time.Minute, func() bool {
		e1 := c.Call("flow.load", map[string]any{"context_id": ctx1, "id": 90}, nil)
		e2 := c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 3}, nil)
		return e1 != nil && e2 != nil
	})
	if !gone {
		t.Fatal("ended flow and job not removed by retention")
	}
	// Every key the short flow and the job added is gone: hashes, logs, DAG state,
	// messages, index entries.
	after := keysOf(t, ctx1)
	if left := without(after, without(after, added)); len(left) > 0 {
		t.Errorf("expired objects left keys: %v", left)
	}
	rdb := redisOf(ctx1).Client(t, ctx1)
	for _, m := range []struct{ idx, member string }{{"coord:idx:jobs", "1:1"}, {"coord:idx:jobs", "1:3"}, {"coord:idx:flows", "90"}} {
		if rdb.ZScore(context.Background(), m.idx, m.member).Err() == nil {
			t.Errorf("%s still lists %s", m.idx, m.member)
		}
	}
	var f harness.Flow
	c.MustCall(t, "flow.load", map[string]any{"context_id": ctx1, "id": 91}, &f)
	if f.Status != "started" {
		t.Fatalf("running flow must stay: %+v", f)
	}
	if j := loadJob(t, c, 2); j.Status != "started" {
		t.Fatalf("running job must stay: %+v", j)
	}
	if left := without(before, keysOf(t, ctx1)); len(left) > 0 {
		t.Errorf("keys of the running flow vanished: %v", left)
	}
}

// A context's retention_seconds wins over the scheduler's --retention.
func TestRetentionPerContext(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{SchedulerArgs: []string{"--retention", "1h"}})
	var ctxOut struct {
		RetentionSeconds int64 `json:"retention_seconds"`
	}
	c.MustCall(t, "context.update", map[string]any{"id": ctx1, "retention_seconds": 1}, &ctxOut)
	if ctxOut.RetentionSeconds != 1 {
		t.Fatalf("context.update: %+v", ctxOut)
	}
	createFlow(t, c, 80, nil, jobSpec{id: 1, typ: "sh", script: "true"})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 80}, nil)
	if f := c.WaitFlow(t, ctx1, 80, time.Minute); f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool {
		return c.Call("flow.load", map[string]any{"context_id": ctx1, "id": 80}, nil) != nil
	}) {
		t.Fatal("the context's 1 s retention did not apply (the scheduler keeps ended flows 1 h)")
	}
	if c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, nil) == nil {
		t.Fatal("the expired flow's job is still there")
	}
}

// Acceptance (operating 5): a watcher that disconnects mid-flow and resumes from its
// last event id sees every event exactly once, in order.
func TestWatchResume(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{})
	api := c.API(t)
	md := context.Background()
	createFlow(t, c, 95, nil,
		jobSpec{id: 1, typ: "sh", script: "echo a"},
		jobSpec{id: 2, typ: "sh", script: "sleep 1; echo b", deps: []uint32{1}},
		jobSpec{id: 3, typ: "sh", script: "echo c", deps: []uint32{1}},
		jobSpec{id: 4, typ: "sh", script: "sleep 1; echo d", deps: []uint32{2, 3}},
	)
	seen := watchAcrossReconnect(t, c, api)
	// The full log, read after the fact, filtered to the flow.
	var want []string
	for _, e := range events(t, c) {
		if fid, _ := e["flow_id"].(float64); uint32(fid) == 95 {
			want = append(want, e["id"].(string))
		}
	}
	var got []string
	for _, e := range seen {
		got = append(got, e.Id)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events seen across the reconnect:\n got %v\nwant %v", got, want)
	}
	// In order: ids increase.
	for i := 1; i < len(got); i++ {
		if !idLess(got[i-1], got[i]) {
			t.Fatalf("event %s came after %s", got[i], got[i-1])
		}
	}
	checkWatchTypeFilter(t, api, seen)
	// A position that was trimmed from the stream (retention, the cap) is refused with
	// a clear error rather than skipping silently over what was lost.
	redisOf(ctx1).Client(t, ctx1).XTrimMinID(context.Background(), "coord:events", got[2])
	err := c.Call("events.read", map[string]any{"context_id": ctx1, "after": got[0]}, nil)
	if err == nil || !strings.Contains(err.Error(), "-32011") || !strings.Contains(err.Error(), "no longer in context") {
		t.Fatalf("events.read from a trimmed position: %v", err)
	}
	gone, err := api.Watch(md, &herov1.WatchRequest{ContextId: ctx1, AfterId: got[0]})
	if err == nil {
		_, err = gone.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("Watch from a trimmed position: %v", err)
	}
	if err := c.Call("events.read", map[string]any{"context_id": ctx1, "after": got[2]}, nil); err != nil {
		t.Fatalf("events.read from the oldest kept event: %v", err)
	}
}

// watchAcrossReconnect watches flow 95 from the start of the stream, starts it,
// disconnects after a few events, and resumes from the last id seen until the flow
// ends; it returns every event seen.
func watchAcrossReconnect(t *testing.T, c *harness.Client, api herov1.CoordinatorClient) []*herov1.Event {
	t.Helper()
	var seen []*herov1.Event
	// First connection: from the start of the stream, until a few events arrived.
	ctx1c, cancel1 := context.WithCancel(context.Background())
	stream, err := api.Watch(ctx1c, &herov1.WatchRequest{ContextId: ctx1, AfterId: "0", FlowId: 95})
	if err != nil {
		t.Fatal(err)
	}
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 95}, nil)
	for len(seen) < 6 {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev.Event)
	}
	cancel1() // disconnect mid-flow
	// Events keep happening while disconnected; resume from the last id seen.
	ctx2c, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()
	stream, err = api.Watch(ctx2c, &herov1.WatchRequest{ContextId: ctx1, AfterId: seen[len(seen)-1].Id, FlowId: 95})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("resumed stream: %v (seen %d)", err, len(seen))
		}
		seen = append(seen, ev.Event)
		if ev.Event.Type == "flow.finished" || ev.Event.Type == "flow.error" {
			return seen
		}
	}
}

// checkWatchTypeFilter: a type filter: from the start, only the flow's own state
// changes, the same ones the full log holds (seen), in order.
func checkWatchTypeFilter(t *testing.T, api herov1.CoordinatorClient, seen []*herov1.Event) {
	t.Helper()
	var wantFlow []string
	for _, e := range seen {
		if strings.HasPrefix(e.Type, "flow.") {
			wantFlow = append(wantFlow, e.Id)
		}
	}
	ctx3c, cancel3 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel3()
	stream, err := api.Watch(ctx3c, &herov1.WatchRequest{ContextId: ctx1, AfterId: "0", FlowId: 95, TypePrefixes: []string{"flow."}})
	if err != nil {
		t.Fatal(err)
	}
	var gotFlow []string
	for len(gotFlow) < len(wantFlow) {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("filtered stream: %v", err)
		}
		if !strings.HasPrefix(ev.Event.Type, "flow.") {
			t.Fatalf("type filter flow. let through %s", ev.Event.Type)
		}
		gotFlow = append(gotFlow, ev.Event.Id)
	}
	if len(wantFlow) < 2 || strings.Join(gotFlow, ",") != strings.Join(wantFlow, ",") {
		t.Fatalf("filtered events: got %v, want %v", gotFlow, wantFlow)
	}
}

func idLess(a, b string) bool {
	pa, pb := strings.SplitN(a, "-", 2), strings.SplitN(b, "-", 2)
	ma, _ := strconv.ParseUint(pa[0], 10, 64)
	mb, _ := strconv.ParseUint(pb[0], 10, 64)
	if ma != mb {
		return ma < mb
	}
	sa, _ := strconv.ParseUint(pa[1], 10, 64)
	sb, _ := strconv.ParseUint(pb[1], 10, 64)
	return sa < sb
}

// A context created while the runner waits for work is served at once: its first job
// does not wait for the runner's idle fallbacks (its claim loops each waited once on
// the old set of contexts, 4 × 5 s, before the fix).
func TestNewContextServedAtOnce(t *testing.T) {
	st, c := newStack(t, harness.StackOptions{})
	var j harness.Job
	c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"script": "echo one", "script_type": "sh"}}, &j)
	if j.Status != "finished" {
		t.Fatalf("first context: %+v", j)
	}
	st.Operator().MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, nil)
	c.MustCall(t, "runner.create", map[string]any{"context_id": 2, "runner": map[string]any{"id": 1, "script_types": []string{"sh"}}}, nil)
	c.MustCall(t, "job.run", map[string]any{"context_id": 2, "timeout": 5, "job": map[string]any{"script": "echo two", "script_type": "sh"}}, &j)
	if j.Status != "finished" {
		t.Fatalf("a new context's first job did not run within 5 s: %+v", j)
	}
}
