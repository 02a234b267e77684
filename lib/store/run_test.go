package store_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
)

// flowWith creates n independent sh jobs in one flow of context ctxID and starts it.
func flowWith(t *testing.T, s *store.Store, db *store.DB, n int) (*model.Flow, []*model.Job) {
	t.Helper()
	return flowWithSetup(t, s, db, n, nil)
}

// flowWithSetup is flowWith that calls setup (if not nil) with the jobs' ids once they
// exist, before the flow is created and started.
func flowWithSetup(t *testing.T, s *store.Store, db *store.DB, n int, setup func(ids []uint32)) (*model.Flow, []*model.Job) {
	t.Helper()
	ctx := context.Background()
	var ids []uint32
	for i := 0; i < n; i++ {
		j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "sh"}, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	if setup != nil {
		setup(ids)
	}
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, ready := storetest.StartFlow(t, db, f)
	if len(ready) != n {
		t.Fatalf("start flow: ready %v, want %d nodes", ready, n)
	}
	return f, jobs
}

// enqueueJobs pushes the jobs' keys onto a queue, as the router does.
func enqueueJobs(t *testing.T, db *store.DB, q string, jobs []*model.Job) {
	t.Helper()
	for _, j := range jobs {
		if err := db.Enqueue(context.Background(), q, keys.Job(1, j.ID)); err != nil {
			t.Fatal(err)
		}
	}
}

// A start clears what an earlier run or end left in a job (a job that ran in another
// flow, one that ended without a run), and leaves a fresh job's fields alone.
func TestStartFlowClearsAnEarlierRun(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 19)
	rc := srv.Client(t, 19)
	_, jobs := flowWithSetup(t, s, db, 3, func(ids []uint32) {
		// the first job ran before (in another flow)
		rc.HSet(ctx, keys.Job(1, ids[0]), "status", "error", "error", "boom", "exit_code", 3, "worker", "w1", "started_at", 5, "started_at_ms", 5000,
			"started_at_us", 5000000, "finished_at_us", 6000000, "finished_at", 6, "finished_at_ms", 6000, "dispatched_at_ms", 4000, "attempt", 2, "stop_requested", 1, "fatal", 1,
			"retry_after_ms", 2000, "result_json", `{"n":1}`)
		// the second ended without a run: its request could not be delivered
		rc.HSet(ctx, keys.Job(1, ids[1]), "status", "error", "error", "no runner", "fatal", 1, "finished_at", 6, "finished_at_ms", 6000)
	})
	for _, j := range jobs {
		id := j.ID
		h := rc.HGetAll(ctx, keys.Job(1, id)).Val()
		for _, k := range []string{"error", "exit_code", "worker", "started_at", "started_at_ms", "started_at_us", "finished_at", "finished_at_ms", "finished_at_us", "dispatched_at_ms", "attempt", "stop_requested", "fatal", "retry_after_ms", "result_json"} {
			if _, ok := h[k]; ok {
				t.Fatalf("job %d keeps %s=%q of an earlier run after the start", id, k, h[k])
			}
		}
		// (a job created holding the defaults stores no result: "{}" when read)
		if r, ok := h["result"]; h["status"] != string(model.JobDispatched) || (ok && r != "{}") || h["script"] != "true" {
			t.Fatalf("job %d after the start: %v", id, h)
		}
	}
}

// The same success reported again hands back the node's dependents that are still
// ready: the scheduler whose completion made them ready may have died before it
// dispatched them (a kill between the two steps left a flow waiting for the safety
// sweep). Once they are dispatched, a repeat hands back nothing.
func TestRepeatedSuccessHandsBackReadyDependents(t *testing.T) {
	ctx := context.Background()
	db, f, ids, jobs, ready := startFanOut(t, 27)
	if len(ready) != 1 {
		t.Fatalf("ready at the start: %v", ready)
	}
	if _, err := db.DispatchMany(ctx, f.ID, 1, jobs[:1], "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	end := store.JobEnd{FlowID: f.ID, CallerID: 1, JobID: ids[0], Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"}
	complete := func() store.EndResult {
		t.Helper()
		res, errs := db.CompleteNodes(ctx, []store.JobEnd{end})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		return res[0]
	}
	if r := complete(); !r.Applied || len(r.Ready) != 2 {
		t.Fatalf("the first report: %+v", r)
	}
	if r := complete(); r.Applied || !slices.Equal(r.Ready, ids[1:]) {
		t.Fatalf("the same report again, its dependents not dispatched: %+v, want ready %v", r, ids[1:])
	}
	if _, err := db.DispatchMany(ctx, f.ID, 1, jobs[1:], "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	if r := complete(); r.Applied || len(r.Ready) != 0 {
		t.Fatalf("the same report once they are dispatched: %+v", r)
	}
}

// startFanOut creates a flow of three jobs in context ctxID, the last two depending on
// the first (createFanOut), and starts it: its DB, the flow, the job ids, the jobs and
// the nodes ready at the start.
func startFanOut(t *testing.T, ctxID uint32) (*store.DB, *model.Flow, []uint32, []*model.Job, []uint32) {
	t.Helper()
	s := open(t)
	db := mustCtx(t, s, ctxID)
	ids := createFanOut(t, s, ctxID, 3) // 0 ← 1, 0 ← 2
	f, _, err := s.CreateFlow(context.Background(), &model.Flow{CallerID: 1, ContextID: ctxID, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, ready := storetest.StartFlow(t, db, f)
	return db, f, ids, jobs, ready
}

// createFanOut creates n sh jobs of caller 1 in context ctxID, each after the first
// depending on the first, and returns their ids in order.
func createFanOut(t *testing.T, s *store.Store, ctxID uint32, n int) []uint32 {
	t.Helper()
	var ids []uint32
	for i := 0; i < n; i++ {
		j := &model.Job{CallerID: 1, ContextID: ctxID, Script: "true", ScriptType: "sh"}
		if i > 0 {
			j.Dependends = []uint32{ids[0]}
		}
		got, _, err := s.CreateJob(context.Background(), j, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got.ID)
	}
	return ids
}

// LoadStartJobs reads what a start needs of each job and names a job that does not
// exist.
func TestLoadStartJobs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 26)
	ids := createFanOut(t, s, 26, 2)
	srv.Client(t, 26).HSet(ctx, keys.Job(1, ids[1]), "runner_id", 7, "attempt", 2)
	got, err := db.LoadStartJobs(ctx, 1, ids)
	if err != nil || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
	a, b := got[0], got[1]
	if a.ID != ids[0] || a.CallerID != 1 || a.ContextID != 26 || a.ScriptType != "sh" || len(a.Dependends) != 0 || a.Attempt != 0 {
		t.Fatalf("first job: %+v", a)
	}
	if b.ID != ids[1] || len(b.Dependends) != 1 || b.Dependends[0] != ids[0] || b.RunnerID != 7 || b.Attempt != 2 {
		t.Fatalf("second job: %+v", b)
	}
	if _, err := db.LoadStartJobs(ctx, 1, []uint32{ids[0], 999999}); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "999999") {
		t.Fatalf("a missing job: %v", err)
	}
}

// A start stores a node's dependents only when it has some (a flow of independent
// jobs keeps one field per node) and never its dependencies (its job's dependends),
// and LoadDAG reads the ones left out as empty, the dependencies from the jobs.
func TestStartFlowStoresOnlyNonEmptyLists(t *testing.T) {
	ctx := context.Background()
	db, f, ids, _, _ := startFanOut(t, 25)
	h := srv.Client(t, 25).HGetAll(ctx, keys.DAG(f.ID)).Val()
	for field, want := range map[string]string{
		fmt.Sprintf("p:%d", ids[0]): "", fmt.Sprintf("d:%d", ids[0]): fmt.Sprintf("[%d,%d]", ids[1], ids[2]),
		fmt.Sprintf("p:%d", ids[1]): "", fmt.Sprintf("d:%d", ids[1]): "",
	} {
		if h[field] != want {
			t.Errorf("DAG field %s = %q, want %q (hash %v)", field, h[field], want, h)
		}
	}
	g, err := db.LoadDAG(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	root, leaf := g.Nodes[ids[0]], g.Nodes[ids[1]]
	if root.Depends == nil || len(root.Depends) != 0 || len(root.Dependents) != 2 || leaf.Dependents == nil || len(leaf.Dependents) != 0 || len(leaf.Depends) != 1 || leaf.Depends[0] != ids[0] {
		t.Fatalf("loaded nodes: root %+v, leaf %+v", root, leaf)
	}
}

// The nodes a start finds ready are marked by their dispatch: ready at the flow's
// start, with an empty result (the start leaves their jobs alone; a fresh job's
// result is not stored, its default, and the dispatch does not write it).
func TestDispatchStartedMarksReadyJobs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 22)
	rc := srv.Client(t, 22)
	startedAt := time.UnixMilli(time.Now().UnixMilli() - 5000)
	f, jobs := flowWith(t, s, db, 3)
	if h := rc.HGetAll(ctx, keys.Job(1, jobs[0].ID)).Val(); h["ready_at_ms"] != "" {
		t.Fatalf("the start marked a fresh job itself: %v", h)
	}
	res, err := db.DispatchStarted(ctx, f.ID, 1, jobs, "scheduler", startedAt)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range jobs {
		h := rc.HGetAll(ctx, keys.Job(1, j.ID)).Val()
		if res[i].MsgKey == "" || h["status"] != string(model.JobDispatched) || (h["result"] != "" && h["result"] != "{}") || h["attempt"] != "1" ||
			h["ready_at_ms"] != strconv.FormatInt(startedAt.UnixMilli(), 10) || h["dispatched_at_ms"] == "" {
			t.Fatalf("job %d after its dispatch: %+v %v", j.ID, res[i], h)
		}
	}
}

// dispatchEach dispatches the jobs one per call: a request message each.
func dispatchEach(t *testing.T, db *store.DB, flowID uint32, jobs []*model.Job) {
	t.Helper()
	for _, j := range jobs {
		if _, err := db.DispatchMany(context.Background(), flowID, 1, []*model.Job{j}, "scheduler", 0); err != nil {
			t.Fatal(err)
		}
	}
}

// The unpinned jobs of a flow dispatched together share one request message (its job
// and nodes lists, job_ids); a job pinned to a runner has a message of its own.
func TestDispatchMany(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 6)
	f, jobs := flowWith(t, s, db, 4)
	jobs[3].RunnerID = 7 // pinned
	res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0)
	if err != nil {
		t.Fatal(err)
	}
	rc := srv.Client(t, 6)
	group := res[0].MsgKey
	checkDispatchedAndTracked(t, db, rc, f.ID, jobs, res)
	checkGroupMessage(t, db, rc, f.ID, jobs, group)
	own, err := db.LoadMessageKey(ctx, res[3].MsgKey)
	if err != nil || len(own.Job) != 1 || own.Job[0].ID != jobs[3].ID || rc.HExists(ctx, res[3].MsgKey, "job_ids").Val() {
		t.Fatalf("pinned job's message: %+v %v", own, err)
	}
	if n := rc.LLen(ctx, keys.MsgOut).Val(); n != 2 {
		t.Fatalf("msg_out holds %d, want 2", n)
	}
	if n := srv.Client(t, 0).LLen(ctx, keys.WakeMsgOut).Val(); n != 2 {
		t.Fatalf("wake tokens %d, want 2", n)
	}
	// A second dispatch of the same nodes does nothing and says why.
	again, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range again {
		if r.MsgKey != "" || r.Why != "dispatched" {
			t.Fatalf("second dispatch: %+v", r)
		}
	}
	if n := srv.Client(t, 6).LLen(ctx, keys.MsgOut).Val(); n != 2 {
		t.Fatalf("msg_out holds %d after a repeated dispatch, want 2", n)
	}
}

// checkDispatchedAndTracked: the first three (unpinned) jobs share the group's
// message, tracked once, by the flow; the fourth (pinned) has its own, tracked by
// the job. Every job is dispatched.
func checkDispatchedAndTracked(t *testing.T, db *store.DB, rc *redis.Client, flowID uint32, jobs []*model.Job, res []store.Dispatched) {
	t.Helper()
	ctx := context.Background()
	group := res[0].MsgKey
	for i, r := range res {
		if r.JobID != jobs[i].ID || r.MsgKey == "" || r.Attempt != 1 || (i < 3) != (r.MsgKey == group) {
			t.Fatalf("dispatch %d: %+v (group message %s)", i, r, group)
		}
		j, _ := db.LoadJob(ctx, 1, jobs[i].ID)
		if j.Status != model.JobDispatched {
			t.Fatalf("job %d status %s", j.ID, j.Status)
		}
		own := jobMsgs(t, rc, 1, j.ID)
		if i < 3 && (!rc.SIsMember(ctx, keys.FlowMessages(flowID), r.MsgKey).Val() || len(own) != 0) {
			t.Fatalf("job %d: the flow does not track its group request message %s, or the job lists messages %v", j.ID, r.MsgKey, own)
		}
		// A job's own messages are listed by number in its hash (msgs).
		if i == 3 && (!slices.Equal(own, []string{strings.TrimPrefix(r.MsgKey, "message:1:")}) || rc.Exists(ctx, keys.JobMessages(1, j.ID)).Val() != 0) {
			t.Fatalf("job %d does not track its own request message %s", j.ID, r.MsgKey)
		}
	}
	if n := rc.SCard(ctx, keys.FlowMessages(flowID)).Val(); n != 1 {
		t.Fatalf("flow tracks %d messages, want the group's", n)
	}
}

// checkGroupMessage: the group's request message carries the first three jobs, their
// nodes and their ids (job_ids).
func checkGroupMessage(t *testing.T, db *store.DB, rc *redis.Client, flowID uint32, jobs []*model.Job, group string) {
	t.Helper()
	ctx := context.Background()
	m, err := db.LoadMessageKey(ctx, group)
	if err != nil || m.Kind != model.KindJobRequest || len(m.Job) != 3 || len(m.Nodes) != 3 || m.FlowID != flowID || m.Status != model.MessageDispatched {
		t.Fatalf("group message %s: %+v %v", group, m, err)
	}
	for i := range 3 {
		if m.Job[i].ID != jobs[i].ID || m.Job[i].Script != "true" || m.Nodes[i].ID != jobs[i].ID || m.Nodes[i].NodeStatus != model.NodeDispatched {
			t.Fatalf("group message job %d: %+v %+v", i, m.Job[i], m.Nodes[i])
		}
	}
	if ids := rc.HGet(ctx, group, "job_ids").Val(); ids != fmt.Sprintf("%d %d %d", jobs[0].ID, jobs[1].ID, jobs[2].ID) {
		t.Fatalf("job_ids %q", ids)
	}
}

// The claim routes a request of several jobs whole when every job is plain; otherwise
// it claims it, and SplitRequest replaces it by one request per job, which the next
// claim routes (or claims) each on its own.
func TestGroupRequestRoutedWholeOrSplit(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 18)
	rc := srv.Client(t, 18)
	wakeRunner1(t, db.ContextID, "queue:sh")
	f, jobs := flowWith(t, s, db, 3)
	// Dispatched while no runner serves sh: the request goes to msg_out; served by the
	// claim, the claim routes it.
	res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0)
	if err != nil || res[0].MsgKey == "" || res[0].MsgKey != res[2].MsgKey {
		t.Fatalf("dispatch: %+v %v", res, err)
	}
	rc.HSet(ctx, "coord:script_types", "sh", 1, "v", 0)
	cms, routed, err := db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{}, true)
	if err != nil || len(cms) != 0 || len(routed) != 3 {
		t.Fatalf("claim: %d claimed, routed %+v, %v; want the three jobs routed", len(cms), routed, err)
	}
	for i, r := range routed {
		if r.Job != keys.Job(1, jobs[i].ID) || r.Queue != "queue:sh" {
			t.Fatalf("routed %d: %+v", i, r)
		}
	}
	if st := rc.HGet(ctx, res[0].MsgKey, "status").Val(); st != string(model.MessageAcknowledged) {
		t.Fatalf("group request is %q", st)
	}
	if n := wakeTokens(t, 18, "queue:sh"); n != 3 {
		t.Fatalf("%d wake tokens for 3 routed jobs", n)
	}

	checkGroupClaimedWholeAndSplit(t, s, db, rc)
}

// checkGroupClaimedWholeAndSplit: a flow whose middle job's type nobody serves: the
// group is claimed whole, split into one request per job, and the next claim routes
// the first and third and claims the second.
func checkGroupClaimedWholeAndSplit(t *testing.T, s *store.Store, db *store.DB, rc *redis.Client) {
	t.Helper()
	ctx := context.Background()
	f2, jobs2 := flowWith(t, s, db, 3)
	rc.HSet(ctx, keys.Job(1, jobs2[1].ID), "script_type", "v")
	jobs2[1].ScriptType = "v"
	res, err := db.DispatchMany(ctx, f2.ID, 1, jobs2, "scheduler", 0)
	if err != nil {
		t.Fatal(err)
	}
	cms, routed, err := db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{}, true)
	if err != nil || len(cms) != 1 || len(routed) != 0 || cms[0].Item != res[0].MsgKey {
		t.Fatalf("claim: %+v routed %+v %v; want the group claimed", cms, routed, err)
	}
	m, err := db.MessageFromHash(cms[0].Item, cms[0].Msg)
	if err != nil || len(m.Job) != 3 {
		t.Fatalf("claimed group: %+v %v", m, err)
	}
	n, err := db.SplitRequest(ctx, cms[0].Claim, m)
	if err != nil || n != 3 {
		t.Fatalf("split: %d %v", n, err)
	}
	if st := rc.HGet(ctx, res[0].MsgKey, "status").Val(); st != string(model.MessageProcessed) {
		t.Fatalf("split group request is %q", st)
	}
	if held := rc.LLen(ctx, keys.Processing("r1")).Val(); held != 0 || rc.ZCard(ctx, keys.Leases).Val() != 0 {
		t.Fatalf("the split group is still claimed (%d held)", held)
	}
	cms, routed, err = db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{}, true)
	if err != nil || len(routed) != 2 || len(cms) != 1 || cms[0].Job["id"] != strconv.Itoa(int(jobs2[1].ID)) {
		t.Fatalf("after the split: claimed %+v, routed %+v, %v; want jobs 1 and 3 routed, job 2 claimed", cms, routed, err)
	}
	if n := rc.SCard(ctx, keys.FlowMessages(f2.ID)).Val(); n != 4 {
		t.Fatalf("flow tracks %d messages, want the group's and one per job", n)
	}
}

func TestClaimStart(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 7)
	q := keys.Queue("sh")
	if cl, _, _, err := db.ClaimStart(ctx, q, "w1", time.Minute, "0af7651916cd43dd8448eb211c80319c"); cl != nil || err != nil {
		t.Fatalf("empty queue: %v %v", cl, err)
	}
	_, jobs := flowWith(t, s, db, 2)
	enqueueJobs(t, db, q, jobs)
	cl, out, j, err := db.ClaimStart(ctx, q, "w1", time.Minute, "0af7651916cd43dd8448eb211c80319c")
	if err != nil || cl == nil || out != store.StartRun || j == nil || j.ID != jobs[0].ID {
		t.Fatalf("claim start: %v %v %+v %v", cl, out, j, err)
	}
	if j.Status != model.JobStarted || j.Worker != "w1" || j.StartedAtMs == 0 || j.ContextID != 7 || j.TraceID != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("started job: %+v", j)
	}
	checkClaimedAsStored(t, db, cl, j, jobs[0].Status)
	checkFinishOnce(t, db, cl, j)
	checkClaimDropsDoneAndGone(t, db, q, jobs)
}

// checkClaimedAsStored: what the claim returned is what it stored, the job moved
// from its status index (was) to the started one, and the claim holds a lease and
// its item in the processing list.
func checkClaimedAsStored(t *testing.T, db *store.DB, cl *store.Claim, j *model.Job, was model.JobStatus) {
	t.Helper()
	ctx := context.Background()
	stored, err := db.LoadJob(ctx, 1, j.ID)
	if err != nil || stored.Status != j.Status || stored.Worker != j.Worker || stored.StartedAtMs != j.StartedAtMs ||
		stored.StartedAt != j.StartedAt || stored.UpdatedAt != j.UpdatedAt || stored.TraceID != j.TraceID || stored.Attempt != j.Attempt {
		t.Fatalf("stored %+v\nreturned %+v (%v)", stored, j, err)
	}
	member := fmt.Sprintf("1:%d", j.ID)
	rc7 := srv.Client(t, 7)
	if rc7.ZScore(ctx, "coord:idx:jobs:started", member).Err() != nil || rc7.ZScore(ctx, "coord:idx:jobs:"+string(was), member).Err() == nil {
		t.Fatalf("status index after the start: started %v, %s %v", rc7.ZScore(ctx, "coord:idx:jobs:started", member).Err(), was, rc7.ZScore(ctx, "coord:idx:jobs:"+string(was), member).Err())
	}
	if ok, err := db.ExtendLease(ctx, cl, time.Minute); !ok || err != nil {
		t.Fatalf("the claim holds no lease: %v %v", ok, err)
	}
	if got := rc7.LRange(ctx, keys.Processing("w1"), 0, -1).Val(); len(got) != 1 || got[0] != cl.Item {
		t.Fatalf("processing list: %v", got)
	}
}

// checkFinishOnce: the end's log note is appended within the log's cap; the same
// end again (a retry after a lost answer) answers true and writes nothing twice.
func checkFinishOnce(t *testing.T, db *store.DB, cl *store.Claim, j *model.Job) {
	t.Helper()
	ctx := context.Background()
	rc7 := srv.Client(t, 7)
	if err := db.AppendLog(ctx, 1, j.ID, []byte("0123456789"), 16); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.FinishJob(ctx, cl, j, store.JobOutcome{Status: model.JobFinished, Log: []byte("header line\n"), LogMax: 16}); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	if b, _, _ := db.ReadLog(ctx, 1, j.ID, 0, 0); string(b) != "0123456789header\n[log truncated at 16 bytes]\n" {
		t.Fatalf("log after the end: %q", b)
	}
	msgs, evs := rc7.LLen(ctx, keys.MsgOut).Val(), rc7.XLen(ctx, keys.Events).Val()
	if ok, err := db.FinishJob(ctx, cl, j, store.JobOutcome{Status: model.JobError, Error: "later"}); !ok || err != nil {
		t.Fatalf("finish again: %v %v", ok, err)
	}
	if m, e := rc7.LLen(ctx, keys.MsgOut).Val(), rc7.XLen(ctx, keys.Events).Val(); m != msgs || e != evs {
		t.Fatalf("a second finish pushed %d messages and %d events", m-msgs, e-evs)
	}
	if again, _ := db.LoadJob(ctx, 1, j.ID); again.Status != model.JobFinished || again.Error != "" {
		t.Fatalf("a second finish changed the job: %+v", again)
	}
}

// checkClaimDropsDoneAndGone: the first (now finished) job queued again is acked,
// not run; a job that is gone, and an item that is no job key, are both dropped,
// nothing held.
func checkClaimDropsDoneAndGone(t *testing.T, db *store.DB, q string, jobs []*model.Job) {
	t.Helper()
	ctx := context.Background()
	if err := db.Enqueue(ctx, q, keys.Job(1, jobs[0].ID)); err != nil {
		t.Fatal(err)
	}
	_, _, j, err := db.ClaimStart(ctx, q, "w1", time.Minute, "0af7651916cd43dd8448eb211c80319c") // the second job first (FIFO)
	if err != nil || j == nil || j.ID != jobs[1].ID {
		t.Fatalf("second job: %+v %v", j, err)
	}
	cl, out, j, err := db.ClaimStart(ctx, q, "w1", time.Minute, "0af7651916cd43dd8448eb211c80319c")
	if err != nil || cl == nil || out != store.StartDone || j != nil {
		t.Fatalf("duplicate of a finished job: %v %v %+v %v", cl, out, j, err)
	}
	if ok, _ := db.ExtendLease(ctx, cl, time.Minute); ok {
		t.Fatal("a finished job's duplicate keeps its lease")
	}
	for _, item := range []string{keys.Job(1, 999), "not-a-job"} {
		if err := db.Enqueue(ctx, q, item); err != nil {
			t.Fatal(err)
		}
		cl, out, j, err := db.ClaimStart(ctx, q, "w2", time.Minute, "0af7651916cd43dd8448eb211c80319c")
		if cl == nil || out != store.StartGone || j != nil {
			t.Fatalf("%s: %v %v %+v %v", item, cl, out, j, err)
		}
		if (item == "not-a-job") != (err != nil) {
			t.Fatalf("%s: error %v", item, err)
		}
	}
	if n := srv.Client(t, 7).LLen(ctx, keys.Processing("w2")).Val(); n != 0 {
		t.Fatalf("dropped items left in the processing list: %d", n)
	}
}

// One claim call of items of every kind, in queue order: each item's outcome, claim,
// job and start reads are its own (the script's reply is flat, five items an item:
// lib/store claimed reads them by position).
func TestClaimStartsMixedItems(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 7)
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 3)
	items := []string{keys.Job(1, jobs[0].ID), keys.Job(1, 999), keys.Job(1, jobs[1].ID), keys.Job(1, jobs[0].ID), "not-a-job", keys.Job(1, jobs[2].ID)}
	for _, item := range items {
		if err := db.Enqueue(ctx, q, item); err != nil {
			t.Fatal(err)
		}
	}
	traces := []string{"0af7651916cd43dd8448eb211c80319c", "", "1af7651916cd43dd8448eb211c80319c", "", "", "2af7651916cd43dd8448eb211c80319c"}
	got, err := db.ClaimStarts(ctx, q, "w1", time.Minute, traces, store.Wake{})
	if err != nil || len(got) != len(items) {
		t.Fatalf("claim: %d items, %v", len(got), err)
	}
	want := []store.StartOutcome{store.StartRun, store.StartGone, store.StartRun, store.StartDone, store.StartGone, store.StartRun}
	ran := map[int]*model.Job{0: jobs[0], 2: jobs[1], 5: jobs[2]}
	ids := map[string]bool{}
	for i, st := range got {
		if st.Outcome != want[i] || st.Claim == nil || st.Claim.Item != items[i] || ids[st.Claim.ID] {
			t.Fatalf("item %d (%s): %+v, want outcome %v", i, items[i], st, want[i])
		}
		ids[st.Claim.ID] = true
		j := ran[i]
		if j == nil {
			if st.Job != nil || (items[i] == "not-a-job") != (st.Err != nil) {
				t.Fatalf("item %d (%s): job %+v, error %v", i, items[i], st.Job, st.Err)
			}
			continue
		}
		if st.Job == nil || st.Job.ID != j.ID || st.Job.Status != model.JobStarted || st.Job.TraceID != traces[i] || st.Claim.Reads == nil {
			t.Fatalf("item %d (%s): %+v, job %+v", i, items[i], st.Claim, st.Job)
		}
	}
	if n := srv.Client(t, 7).LLen(ctx, keys.Processing("w1")).Val(); n != 3 {
		t.Fatalf("processing list: %d items, want the 3 started", n)
	}
}

// A claim clears what an earlier attempt's end left in the job (its error, exit code
// and end times), in Redis and in the job it returns.
func TestClaimStartClearsAnEarlierEnd(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 8)
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 1)
	jk := keys.Job(1, jobs[0].ID)
	rc := srv.Client(t, 8)
	rc.HSet(ctx, jk, "error", "attempt 1 failed", "exit_code", 2, "finished_at", 7, "finished_at_ms", 7000)
	enqueueJobs(t, db, q, jobs)
	_, out, j, err := db.ClaimStart(ctx, q, "w1", time.Minute, "")
	if err != nil || out != store.StartRun || j == nil {
		t.Fatalf("claim: %v %+v %v", out, j, err)
	}
	if j.Error != "" || j.ExitCode != 0 || j.FinishedAt != 0 || j.FinishedAtMs != 0 {
		t.Fatalf("returned job keeps an earlier end: %+v", j)
	}
	for _, f := range []string{"error", "exit_code", "finished_at", "finished_at_ms"} {
		if rc.HExists(ctx, jk, f).Val() {
			t.Fatalf("stored job keeps %s of an earlier end", f)
		}
	}
}

// FinishJob writes the end's fields and clears those a run before it left behind.
func TestFinishJobFields(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 8)
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 1)
	// Its first attempt, as a dispatch would number it.
	if err := srv.Client(t, 8).HSet(ctx, keys.Job(1, jobs[0].ID), "attempt", "1").Err(); err != nil {
		t.Fatal(err)
	}
	run := func(o store.JobOutcome) *model.Job {
		t.Helper()
		if err := db.Enqueue(ctx, q, keys.Job(1, jobs[0].ID)); err != nil {
			t.Fatal(err)
		}
		cl, out, j, err := db.ClaimStart(ctx, q, "w1", time.Minute, "")
		if err != nil || out != store.StartRun {
			t.Fatalf("claim: %v %v", out, err)
		}
		if j.Error != "" || j.ExitCode != 0 || j.FinishedAtMs != 0 {
			t.Fatalf("a new start still shows the last end: %+v", j)
		}
		if ok, err := db.FinishJob(ctx, cl, j, o); !ok || err != nil {
			t.Fatalf("finish: %v %v", ok, err)
		}
		stored, err := db.LoadJob(ctx, 1, jobs[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		// Back to dispatched, its next attempt, so that it can be claimed again (as a
		// retry's dispatch leaves it).
		if err := srv.Client(t, 8).HSet(ctx, keys.Job(1, jobs[0].ID), "status", "dispatched").Err(); err != nil {
			t.Fatal(err)
		}
		srv.Client(t, 8).HIncrBy(ctx, keys.Job(1, jobs[0].ID), "attempt", 1)
		return stored
	}
	j := run(store.JobOutcome{Status: model.JobError, Error: "boom", ExitCode: 3, Fatal: true, RetryAfter: 2 * time.Second, ResultJSON: json.RawMessage(`{"n":1}`)})
	if !failedAsTold(j) {
		t.Fatalf("after a failed run: %+v", j)
	}
	j = run(store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"k": "v"}})
	if !finishedClean(j) {
		t.Fatalf("after a good run: %+v", j)
	}
	if srv.Client(t, 8).HExists(ctx, keys.Job(1, jobs[0].ID), "result_json").Val() {
		t.Fatal("the stored job keeps the result_json of the run before")
	}
	// A run stores its start and end in µs only; a read derives the s and ms.
	for _, f := range []string{"started_at", "started_at_ms", "finished_at", "finished_at_ms"} {
		if srv.Client(t, 8).HExists(ctx, keys.Job(1, jobs[0].ID), f).Val() {
			t.Errorf("the run stored %s (only the µs times are stored)", f)
		}
	}
	if j.StartedAtUs == 0 || j.StartedAtMs != j.StartedAtUs/1000 || j.StartedAt != j.StartedAtUs/1_000_000 ||
		j.FinishedAtUs < j.StartedAtUs || j.FinishedAtMs != j.FinishedAtUs/1000 || j.FinishedAt != j.FinishedAtUs/1_000_000 {
		t.Errorf("times of the loaded job: %d/%d/%d µs/ms/s started, %d/%d/%d finished", j.StartedAtUs, j.StartedAtMs, j.StartedAt, j.FinishedAtUs, j.FinishedAtMs, j.FinishedAt)
	}
	// A run that says when its process was about to run (after its claim: its sandbox
	// was made) stores that as its start (issue 44).
	claimed := j.StartedAtUs
	ran := time.Now().Add(time.Hour) // later than any claim of this test
	j = run(store.JobOutcome{Status: model.JobFinished, StartedAt: ran})
	if !startedAt(j, ran, claimed) {
		t.Errorf("started_at_us %d, want the process's start %d (claimed at %d)", j.StartedAtUs, ran.UnixMicro(), claimed)
	}
}

// startedAt: the loaded job's start is the run's process start ran, not its claim.
func startedAt(j *model.Job, ran time.Time, claimed int64) bool {
	return j.StartedAtUs == ran.UnixMicro() && j.StartedAtMs == ran.UnixMilli() && j.StartedAtUs != claimed
}

// A job's entry in each per-status index has the score of its entry in coord:idx:jobs,
// its created_at_ms: the status changes take the score from the field (lib_state's
// reindex), so every way a job is made must write both from one clock reading. A job
// without the field (an older one) keeps its index score through the changes too.
func TestStatusIndexesKeepTheCreationScore(t *testing.T) {
	s, db, c, _ := context10(t)
	ctx := context.Background()
	q := keys.Queue("sh")
	if _, _, err := s.CreateRunner(ctx, 10, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	created := standaloneJob(t, s, db)
	sub, err := s.SubmitJobs(ctx, 10, []store.Submission{{Job: &model.Job{CallerID: 1, ContextID: 10, Script: "true", ScriptType: "sh"}}}, "1")
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	old := standaloneJob(t, s, db)
	c.HDel(ctx, keys.Job(1, old.ID), "created_at_ms")
	c.ZAdd(ctx, keys.JobIndex, redis.Z{Score: 12345, Member: member(old)})
	for _, j := range []*model.Job{created, old} {
		if _, _, ok, why, err := db.Dispatch(ctx, 0, j, "scheduler", 0); err != nil || !ok {
			t.Fatalf("dispatch job %d: %v %s", j.ID, err, why)
		}
	}
	jobs := []*model.Job{created, sub[0].Job, old}
	// scoresKept: each job's score in the status index of st is its coord:idx:jobs one.
	scoresKept := func(st string) {
		t.Helper()
		for _, j := range jobs {
			m := member(j)
			want := c.ZScore(ctx, keys.JobIndex, m).Val()
			if j != old && c.HGet(ctx, keys.Job(1, j.ID), "created_at_ms").Val() != strconv.FormatFloat(want, 'f', -1, 64) {
				t.Errorf("job %s: index score %.0f, created_at_ms %s", m, want, c.HGet(ctx, keys.Job(1, j.ID), "created_at_ms").Val())
			}
			if got, err := c.ZScore(ctx, keys.StatusIndex(keys.JobIndex, st), m).Result(); err != nil || got != want {
				t.Errorf("job %s: score %.0f in the %s index (%v), want %.0f", m, got, st, err, want)
			}
		}
	}
	var runs []store.Finish
	for range jobs {
		cl, out, j, err := db.ClaimStart(ctx, q, "w1", time.Minute, "")
		if err != nil || out != store.StartRun {
			t.Fatalf("claim: %v %v", out, err)
		}
		runs = append(runs, store.Finish{DB: db, Claim: cl, Job: j, Outcome: store.JobOutcome{Status: model.JobFinished}})
	}
	scoresKept("started")
	for _, f := range runs {
		if ok, err := db.FinishJob(ctx, f.Claim, f.Job, f.Outcome); !ok || err != nil {
			t.Fatalf("finish: %v %v", ok, err)
		}
	}
	scoresKept("finished")
}

// failedAsTold: j holds the end TestFinishJobFields' failed run reported.
func failedAsTold(j *model.Job) bool {
	return j.Status == model.JobError && j.Error == "boom" && j.ExitCode == 3 && j.Fatal && j.RetryAfterMs == 2000 &&
		j.FinishedAtMs != 0 && string(j.ResultJSON) == `{"n":1}`
}

// finishedClean: j holds TestFinishJobFields' good run, nothing of the failed one.
func finishedClean(j *model.Job) bool {
	return j.Status == model.JobFinished && j.Error == "" && j.ExitCode == 0 && !j.Fatal && j.RetryAfterMs == 0 &&
		j.Result["k"] == "v" && j.ResultJSON == nil
}

// A job's results reach the flow's result map however many there are (the completion
// writes them in chunks), and a retry's requested delay is taken from the job.
// The ends of one flow reported together are applied by one script, in order, each as
// on its own: a retry among them leaves the ends after it applied in the context's DB.
func TestCompleteNodesOfOneFlowTogether(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 10)
	f, jobs := flowWith(t, s, db, 4)
	srv.Client(t, 10).HSet(ctx, keys.Job(1, jobs[1].ID), "retries", 1)
	if _, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	end := func(i int, st model.JobStatus) store.JobEnd {
		return store.JobEnd{FlowID: f.ID, CallerID: 1, JobID: jobs[i].ID, Attempt: 1, Status: st, Error: map[bool]string{true: "boom"}[st == model.JobError], Retries: -1, Actor: "scheduler"}
	}
	ends := []store.JobEnd{end(0, model.JobFinished), end(1, model.JobError), end(2, model.JobFinished), end(0, model.JobFinished)}
	res, errs := db.CompleteNodes(ctx, ends)
	for i, e := range errs {
		if e != nil {
			t.Fatalf("end %d: %v", i, e)
		}
	}
	if !res[0].Applied || res[0].FlowFinished || !res[1].Applied || res[1].RetryAt.IsZero() || !res[2].Applied || res[3].Applied {
		t.Fatalf("results %+v: want applied, retry, applied, duplicate", res)
	}
	dag := srv.Client(t, 10).HMGet(ctx, keys.DAG(f.ID), "s:"+strconv.Itoa(int(jobs[0].ID)), "s:"+strconv.Itoa(int(jobs[1].ID)),
		"s:"+strconv.Itoa(int(jobs[2].ID)), "s:"+strconv.Itoa(int(jobs[3].ID)), "terminal").Val()
	if dag[0] != nil || dag[1] != "ready" || dag[2] != nil || dag[3] != "dispatched" || dag[4] != "2" { // completed: no status left
		t.Fatalf("DAG after the ends: %v", dag)
	}
	if n := srv.Client(t, 0).ZCard(ctx, keys.Due).Val(); n != 1 {
		t.Fatalf("%d retries due, want 1", n)
	}
}

func TestCompleteNodeManyResults(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 9)
	f, jobs := flowWith(t, s, db, 1)
	j := jobs[0]
	if _, _, ok, why, err := db.Dispatch(ctx, f.ID, j, "scheduler", 0); !ok || err != nil {
		t.Fatalf("dispatch: %v %s %v", ok, why, err)
	}
	if err := db.Enqueue(ctx, keys.Queue("sh"), keys.Job(1, j.ID)); err != nil {
		t.Fatal(err)
	}
	cl, _, job, err := db.ClaimStart(ctx, keys.Queue("sh"), "w", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]string{"output": "x"}
	for i := 0; i < 5000; i++ {
		res[fmt.Sprintf("K%d", i)] = strconv.Itoa(i)
	}
	if ok, err := db.FinishJob(ctx, cl, job, store.JobOutcome{Status: model.JobFinished, Result: res}); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	end, err := db.CompleteNode(ctx, store.JobEnd{FlowID: f.ID, CallerID: 1, JobID: j.ID, Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"})
	if err != nil || !end.Applied || !end.FlowFinished {
		t.Fatalf("complete: %+v %v", end, err)
	}
	// The flow ended: its result map holds every result.
	fl, err := db.LoadFlow(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := fl.Result; len(got) != len(res) || got[fmt.Sprintf("%d.K4999", j.ID)] != "4999" || got[fmt.Sprintf("%d.output", j.ID)] != "x" {
		t.Fatalf("flow results: %d entries, want %d", len(got), len(res))
	}
}

// ClaimStarts takes several jobs in queue order, each with its own claim and trace id,
// and removes the wake tokens of the jobs it took beyond the one its caller held; the
// tokens left always cover the jobs left.
func TestClaimStartsTakesGroupsAndTheirWakeTokens(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 13)
	wakeRunner1(t, 13, keys.Queue("sh"))
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 5)
	enqueueJobs(t, db, q, jobs)
	g := srv.Client(t, 0)
	wake := keys.WakeRunner(1, q)
	tokens := func() int64 { return g.LLen(ctx, wake).Val() }
	if n := tokens(); n != 5 {
		t.Fatalf("%d wake tokens for 5 jobs", n)
	}
	g.LPop(ctx, wake) // the token the caller holds
	traces := []string{"0af7651916cd43dd8448eb211c80319c", "", "1af7651916cd43dd8448eb211c80319c"}
	got, err := db.ClaimStarts(ctx, q, "w1", time.Minute, traces, store.Wake{Key: wake, Token: "13", Held: true})
	if err != nil || len(got) != 3 {
		t.Fatalf("claim 3: %d %v", len(got), err)
	}
	rc := srv.Client(t, 13)
	checkStartsClaimedEach(t, db, rc, got, jobs, traces)
	first := got
	if n := tokens(); n != 2 {
		t.Fatalf("%d wake tokens left for the 2 jobs left", n)
	}
	// Without a held token the claim removes one per job; an empty queue returns none.
	got, err = db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 8), store.Wake{Key: wake, Token: "13"})
	if err != nil || len(got) != 2 || got[0].Job.ID != jobs[3].ID || got[1].Job.ID != jobs[4].ID {
		t.Fatalf("claim the rest: %+v %v", got, err)
	}
	if n := tokens(); n != 0 {
		t.Fatalf("%d wake tokens left for an empty queue", n)
	}
	if got, err := db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 4), store.Wake{Key: wake, Token: "13"}); err != nil || len(got) != 0 {
		t.Fatalf("empty queue: %+v %v", got, err)
	}
	checkFinishedTogether(t, db, rc, q, first, jobs)
}

// checkStartsClaimedEach: each start of a ClaimStarts is run, has its own claim and
// the trace asked for, as stored (none asked for: its claim's, model.TraceOfClaim).
func checkStartsClaimedEach(t *testing.T, db *store.DB, rc *redis.Client, got []store.Started, jobs []*model.Job, traces []string) {
	t.Helper()
	ctx := context.Background()
	claims := map[string]bool{}
	for i, st := range got {
		want := traces[i]
		if want == "" && st.Claim != nil {
			want = model.TraceOfClaim(st.Claim.ID)
		}
		if st.Err != nil || st.Outcome != store.StartRun || st.Job.ID != jobs[i].ID || st.Job.TraceID != want || claims[st.Claim.ID] {
			t.Fatalf("job %d: %+v %+v", i, st, st.Job)
		}
		claims[st.Claim.ID] = true
		stored, err := db.LoadJob(ctx, 1, jobs[i].ID)
		if err != nil || stored.Status != model.JobStarted || stored.TraceID != want || rc.HGet(ctx, keys.Job(1, jobs[i].ID), "claim").Val() != st.Claim.ID {
			t.Fatalf("stored job %d: %+v %v", i, stored, err)
		}
	}
}

// checkFinishedTogether: each claim is its own: finishing them together finishes
// each (but the one given a stale claim).
func checkFinishedTogether(t *testing.T, db *store.DB, rc *redis.Client, q string, first []store.Started, jobs []*model.Job) {
	t.Helper()
	ctx := context.Background()
	var fs []store.Finish
	for i, st := range first {
		fs = append(fs, store.Finish{DB: db, Claim: st.Claim, Job: st.Job,
			Outcome: store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"n": strconv.Itoa(i)}}})
	}
	fs[1].Claim = &store.Claim{Queue: q, Consumer: "w1", Item: fs[1].Claim.Item, ID: "not-the-claim"}
	oks, errs := store.FinishJobs(ctx, fs)
	for i := range fs {
		if errs[i] != nil || oks[i] != (i != 1) {
			t.Fatalf("finish %d: %v %v (a stale claim must not finish)", i, oks[i], errs[i])
		}
	}
	// The runs of one flow that end together share one result message, which lists
	// the jobs that finished (not the stale one).
	mks := rc.LRange(ctx, keys.MsgOut, 0, -1).Val()
	if len(mks) != 1 {
		t.Fatalf("msg_out holds %d result messages, want 1 for the group", len(mks))
	}
	// The message names the jobs with their ends (what the router reads; their caller
	// and flow are the message's); loaded, it holds the finished jobs.
	raw := rc.HGet(ctx, mks[0], "job").Val()
	if want := fmt.Sprintf(`[{"id":%d,"status":"finished"},{"id":%d,"status":"finished"}]`,
		jobs[0].ID, jobs[2].ID); raw != want || rc.HGet(ctx, mks[0], "job_ref").Val() != "1" {
		t.Fatalf("group result message's job list %s, want %s", raw, want)
	}
	m, err := db.LoadMessageKey(ctx, mks[0])
	if err != nil || len(m.Job) != 2 {
		t.Fatalf("load group result message: %+v %v", m, err)
	}
	done := m.Job
	if done[0].ID != jobs[0].ID || done[1].ID != jobs[2].ID || done[1].Result["n"] != "2" || done[0].Status != model.JobFinished ||
		done[0].ScriptType != jobs[0].ScriptType || done[0].Script != "" || done[0].ContextID != db.ContextID {
		t.Fatalf("group result message's jobs: %+v", done)
	}
	if !rc.SIsMember(ctx, keys.FlowMessages(jobs[0].FlowID), mks[0]).Val() {
		t.Fatalf("flow %d does not track the group's result message", jobs[0].FlowID)
	}
	if n := srv.Client(t, 0).LLen(ctx, keys.WakeMsgOut).Val(); n != 1 {
		t.Fatalf("%d msg_out wake tokens for one message", n)
	}
}

// Eval and EvalBatch load the functions the server does not know (after FUNCTION
// FLUSH, as after a restart without its data) and run the calls.
func TestScriptsAfterFunctionFlush(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 14)
	_, jobs := flowWith(t, s, db, 2)
	srv.Client(t, 0).FunctionFlush(ctx)
	enqueueJobs(t, db, keys.Queue("sh"), jobs)
	got, err := db.ClaimStarts(ctx, keys.Queue("sh"), "w", time.Minute, []string{"", ""}, store.Wake{})
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %v %v", got, err)
	}
	srv.Client(t, 0).FunctionFlush(ctx)
	fs := []store.Finish{}
	for _, st := range got {
		fs = append(fs, store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: store.JobOutcome{Status: model.JobFinished}})
	}
	oks, errs := store.FinishJobs(ctx, fs)
	if errs[0] != nil || errs[1] != nil || !oks[0] || !oks[1] {
		t.Fatalf("finish after FUNCTION FLUSH: %v %v", oks, errs)
	}
}

// The loader (Open without WaitScripts) loads the store's libraries and records them
// in use; it deletes the libraries of other versions that no process has called for
// KeepOldScripts, keeps those called since (a waiting service's record) and those it
// sees for the first time (recorded as in use now), leaves libraries not of the store
// alone, and forgets the records of libraries that are gone.
func TestLoaderRetiresOtherVersionsLibraries(t *testing.T) {
	ctx := context.Background()
	c := srv.Client(t, 0)
	srv.Flush(t)
	old, recent, unseen := "hero_claim_start_000000000000", "hero_claim_start_000000000001", "hero_claim_start_000000000002"
	t.Cleanup(func() {
		for _, name := range []string{"someone_else", old, recent, unseen} {
			c.FunctionDelete(ctx, name)
		}
	})
	for _, name := range []string{old, recent, unseen, "someone_else"} {
		lib := "#!lua name=" + name + "\nredis.register_function('" + name + "', function() return 1 end)"
		if err := c.FunctionLoadReplace(ctx, lib).Err(); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	c.HSet(ctx, keys.Functions, old, now.Add(-2*time.Hour).UnixMilli(), recent, now.Add(-30*time.Minute).UnixMilli(), "hero_gone_000000000000", 1)
	s, err := store.Open(ctx, store.Options{URL: srv.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop(), KeepOldScripts: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	claim := 0
	for _, l := range libs {
		have[l.Name] = true
		if strings.HasPrefix(l.Name, "hero_claim_start_") {
			claim++
		}
	}
	if have[old] || !have[recent] || !have[unseen] || !have["someone_else"] || claim != 3 {
		t.Fatalf("libraries after Open: %v", have)
	}
	marks := c.HGetAll(ctx, keys.Functions).Val()
	if _, ok := marks[old]; ok {
		t.Errorf("the deleted library %s is still recorded", old)
	}
	if _, ok := marks["hero_gone_000000000000"]; ok {
		t.Error("a library that is gone is still recorded")
	}
	if ms, _ := strconv.ParseInt(marks[unseen], 10, 64); time.Since(time.UnixMilli(ms)) > time.Minute {
		t.Errorf("the library seen for the first time is recorded at %q, want now", marks[unseen])
	}
	mine := 0
	for name, v := range marks {
		if ms, _ := strconv.ParseInt(v, 10, 64); have[name] && name != recent && name != unseen && time.Since(time.UnixMilli(ms)) < time.Minute {
			mine++
		}
	}
	if mine != len(libs)-3 {
		t.Errorf("%d of this version's %d libraries recorded in use now: %v", mine, len(libs)-3, marks)
	}
}

// A service that does not load the functions (WaitScripts) waits until the loader has
// loaded them, and says what it waits for; until then its calls fail with "Function
// not found" and load nothing. The loader loads a library that went missing again by
// itself (its checks).
func TestWaitScriptsUntilTheLoaderLoads(t *testing.T) {
	ctx := context.Background()
	c := srv.Client(t, 0)
	srv.Flush(t)
	c.FunctionFlush(ctx)
	waiter, err := store.Open(ctx, store.Options{URL: srv.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop(), WaitScripts: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(waiter.Close)
	if n := len(c.FunctionList(ctx, redis.FunctionListQuery{}).Val()); n != 0 {
		t.Fatalf("a waiting store loaded %d libraries", n)
	}
	db, err := waiter.Ctx(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ClaimStarts(ctx, keys.Queue("sh"), "w", time.Minute, []string{""}, store.Wake{}); err == nil || !strings.Contains(err.Error(), "Function not found") {
		t.Fatalf("a waiting store's call without its function: %v", err)
	}
	notes := make(chan string, 100)
	done := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		done <- waiter.WaitScripts(wctx, func(s string) {
			select {
			case notes <- s:
			default:
			}
		})
	}()
	if note := <-notes; !strings.Contains(note, "Redis functions of this version") || !strings.Contains(note, "supervisor-daemon") {
		t.Fatalf("while waiting: %q", note)
	}
	select {
	case err := <-done:
		t.Fatalf("WaitScripts returned before any loader ran: %v", err)
	default:
	}
	loader, err := store.Open(ctx, store.Options{URL: srv.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(loader.Close)
	if err := <-done; err != nil {
		t.Fatalf("WaitScripts after the loader ran: %v", err)
	}
	if _, err := db.ClaimStarts(ctx, keys.Queue("sh"), "w", time.Minute, []string{""}, store.Wake{}); err != nil {
		t.Fatalf("a waiting store's call once loaded: %v", err)
	}
	c.FunctionFlush(ctx)
	for deadline := time.Now().Add(time.Minute); len(c.FunctionList(ctx, redis.FunctionListQuery{}).Val()) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the loader did not load the flushed functions again")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ClaimMessages reads each job request's job (whatever the key order of the job JSON
// in the message) and the served script types, and removes the extra wake tokens.
func TestClaimMessagesReadsJobsAndWakeTokens(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 15)
	f, jobs := flowWith(t, s, db, 2)
	dispatchEach(t, db, f.ID, jobs)
	rc := srv.Client(t, 15)
	// A third request whose job JSON starts with another key (a message not written
	// by the dispatch script), and a message that is not a job request.
	rc.HSet(ctx, "message:1:900", "id", 900, "caller_id", 1, "kind", "job_request", "job", fmt.Sprintf(`[{"caller_id":1,"id":%d}]`, jobs[1].ID))
	rc.HSet(ctx, "message:1:901", "id", 901, "caller_id", 1, "kind", "chat")
	for _, m := range []string{"message:1:900", "message:1:901"} {
		if err := db.Enqueue(ctx, keys.MsgOut, m); err != nil {
			t.Fatal(err)
		}
	}
	rc.HSet(ctx, "coord:script_types", "sh", 1)
	wakeRunner1(t, db.ContextID, "queue:sh")
	g := srv.Client(t, 0)
	// The dispatch pushed one router wake token per request; Enqueue pushes onto
	// another list, so the two test messages' tokens are added here.
	g.LPush(ctx, keys.WakeMsgOut, "15", "15")
	before := g.LLen(ctx, keys.WakeMsgOut).Val()
	g.LPop(ctx, keys.WakeMsgOut) // the token the caller holds
	cms, _, err := db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{Key: keys.WakeMsgOut, Token: "15", Held: true}, false)
	if err != nil || len(cms) != 4 {
		t.Fatalf("claim: %d %v", len(cms), err)
	}
	for i, cm := range cms[:3] {
		want := jobs[min(i, 1)].ID
		if cm.Msg["kind"] != "job_request" || cm.Job["id"] != strconv.Itoa(int(want)) || cm.ScriptTypes["sh"] != "1" {
			t.Fatalf("message %d (%s): job %v types %v", i, cm.Item, cm.Job, cm.ScriptTypes)
		}
	}
	if cms[3].Msg["kind"] != "chat" || len(cms[3].Job) != 0 {
		t.Fatalf("chat message: %+v", cms[3])
	}
	if n := g.LLen(ctx, keys.WakeMsgOut).Val(); n != before-4 {
		t.Fatalf("%d wake tokens left of %d after claiming 4 with one held", n, before)
	}
}

// A group whose jobs are not all ready: its message lists only the jobs dispatched
// (the lists are cut from the ones the scheduler built for every grouped job).
func TestDispatchManyGroupOfSomeJobs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 21)
	f, jobs := flowWith(t, s, db, 5)
	// Jobs 2 and 4 are dispatched already: a second dispatch leaves them out.
	for _, i := range []int{1, 3} {
		if _, err := db.DispatchMany(ctx, f.ID, 1, []*model.Job{jobs[i]}, "scheduler", 0); err != nil {
			t.Fatal(err)
		}
	}
	res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0)
	if err != nil {
		t.Fatal(err)
	}
	group := res[0].MsgKey
	for i, r := range res {
		if (i == 1 || i == 3) != (r.MsgKey == "") || (r.MsgKey != "" && r.MsgKey != group) {
			t.Fatalf("dispatch %d: %+v", i, r)
		}
	}
	m, err := db.LoadMessageKey(ctx, group)
	if err != nil || len(m.Job) != 3 || len(m.Nodes) != 3 {
		t.Fatalf("group message %s: %+v %v", group, m, err)
	}
	for k, i := range []int{0, 2, 4} {
		if m.Job[k].ID != jobs[i].ID || m.Job[k].Script != "true" || m.Nodes[k].ID != jobs[i].ID {
			t.Fatalf("group message item %d: %+v %+v, want job %d", k, m.Job[k], m.Nodes[k], jobs[i].ID)
		}
	}
	if ids := srv.Client(t, 21).HGet(ctx, group, "job_ids").Val(); ids != fmt.Sprintf("%d %d %d", jobs[0].ID, jobs[2].ID, jobs[4].ID) {
		t.Fatalf("job_ids %q", ids)
	}
}

// With route, the claim script routes plain job requests itself (acknowledged, job key
// on queue:<script_type> with a wake token, no lease) and claims the others: a job
// pinned to a runner, a script type no runner serves.
func TestClaimMessagesRoutesPlainJobRequests(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 16)
	f, jobs := flowWith(t, s, db, 4)
	rc := srv.Client(t, 16)
	rc.HSet(ctx, keys.Job(1, jobs[2].ID), "runner_id", 7)     // pinned
	rc.HSet(ctx, keys.Job(1, jobs[3].ID), "script_type", "v") // nobody serves v
	wakeRunner1(t, db.ContextID, "queue:sh")
	dispatchEach(t, db, f.ID, jobs) // while nobody serves sh: onto msg_out
	rc.HSet(ctx, "coord:script_types", "sh", 2, "v", 0)
	cms, routed, err := db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(routed) != 2 || routed[0].Job != keys.Job(1, jobs[0].ID) || routed[1].Job != keys.Job(1, jobs[1].ID) || routed[0].Queue != "queue:sh" {
		t.Fatalf("routed %+v: want jobs 1 and 2 onto queue:sh, in order", routed)
	}
	if len(cms) != 2 || cms[0].Job["id"] != strconv.Itoa(int(jobs[2].ID)) || cms[1].Job["id"] != strconv.Itoa(int(jobs[3].ID)) || cms[0].ID == "" || cms[0].ID == cms[1].ID {
		t.Fatalf("claimed %+v: want the pinned job's and the unserved job's requests, each with its claim", cms)
	}
	if q := rc.LRange(ctx, "queue:sh", 0, -1).Val(); len(q) != 2 || q[1] != keys.Job(1, jobs[0].ID) {
		t.Fatalf("queue:sh %v (FIFO: the first job at the consuming end)", q)
	}
	if n := wakeTokens(t, 16, "queue:sh"); n != 2 {
		t.Fatalf("%d wake tokens for 2 routed jobs", n)
	}
	held := rc.LRange(ctx, keys.Processing("r1"), 0, -1).Val()
	leases := rc.ZCard(ctx, keys.Leases).Val()
	if len(held) != 2 || leases != 2 {
		t.Fatalf("processing %v, %d leases: only the two claimed messages", held, leases)
	}
	msgs := rc.Keys(ctx, "message:*").Val()
	acked := 0
	for _, m := range msgs {
		if rc.HGet(ctx, m, "status").Val() == string(model.MessageAcknowledged) {
			acked++
		}
	}
	if acked != 2 {
		t.Fatalf("%d request messages acknowledged, want the 2 routed", acked)
	}
}

// A handler job ("executor#handler") is routed by the claim onto its executor's queue
// when some runner has that executor; one whose executor no runner has is claimed, for
// the router to refuse with the reason.
func TestClaimMessagesRoutesHandlerJobs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 17)
	f, jobs := flowWith(t, s, db, 3)
	rc := srv.Client(t, 17)
	rc.HSet(ctx, keys.Job(1, jobs[0].ID), "function_name", "go#noop", "script_type", "")
	rc.HSet(ctx, keys.Job(1, jobs[1].ID), "function_name", "py#noop", "script_type", "")
	rc.HSet(ctx, keys.Job(1, jobs[2].ID), "function_name", "go#other", "script_type", "sh")
	wakeRunner1(t, db.ContextID, "queue:exec:go")
	dispatchEach(t, db, f.ID, jobs) // while no runner has go: onto msg_out
	rc.HSet(ctx, keys.Executors, "go", 1, "py", 0)
	cms, routed, err := db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(routed) != 2 || routed[0].Job != keys.Job(1, jobs[0].ID) || routed[1].Job != keys.Job(1, jobs[2].ID) || routed[0].Queue != "queue:exec:go" || routed[1].Queue != "queue:exec:go" {
		t.Fatalf("routed %+v: want jobs 1 and 3 onto queue:exec:go", routed)
	}
	if len(cms) != 1 || cms[0].Job["id"] != strconv.Itoa(int(jobs[1].ID)) {
		t.Fatalf("claimed %+v: want the request of the job whose executor no runner has", cms)
	}
	if q := rc.LRange(ctx, "queue:exec:go", 0, -1).Val(); len(q) != 2 || q[1] != keys.Job(1, jobs[0].ID) {
		t.Fatalf("queue:exec:go %v", q)
	}
	if n := wakeTokens(t, 17, "queue:exec:go"); n != 2 {
		t.Fatalf("%d wake tokens for 2 routed handler jobs", n)
	}
}

// One claim can route more jobs than Lua's unpack takes at once (64 group messages of
// up to 256 jobs): every job is queued, in order, with a wake token each.
func TestClaimMessagesRoutesManyGroups(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 20)
	const n = 8500
	f, jobs := flowWith(t, s, db, n)
	rc := srv.Client(t, 20)
	wakeRunner1(t, db.ContextID, "queue:sh")
	for i := 0; i < n; i += 256 { // while nobody serves sh: onto msg_out
		if _, err := db.DispatchMany(ctx, f.ID, 1, jobs[i:min(i+256, n)], "scheduler", 0); err != nil {
			t.Fatal(err)
		}
	}
	rc.HSet(ctx, "coord:script_types", "sh", 1)
	_, routed, err := db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 64, store.Wake{}, true)
	if err != nil || len(routed) != n {
		t.Fatalf("routed %d jobs (%v), want %d", len(routed), err, n)
	}
	q := rc.LRange(ctx, "queue:sh", 0, -1).Val()
	if len(q) != n || q[n-1] != keys.Job(1, jobs[0].ID) || q[0] != keys.Job(1, jobs[n-1].ID) {
		t.Fatalf("queue:sh holds %d jobs, want %d in dispatch order", len(q), n)
	}
	if got := wakeTokens(t, 20, "queue:sh"); got != min(n, store.WakeSpread) {
		t.Fatalf("%d wake tokens for %d routed jobs, want %d", got, n, min(n, store.WakeSpread))
	}
}

// A job result is claimed with only its kind and job fields (what the router needs of
// a local result); Message reads the whole hash when more is needed. Other messages
// come whole.
func TestClaimMessagesReturnsPartOfAResult(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 17)
	rc := srv.Client(t, 17)
	rc.HSet(ctx, "message:1:50", "id", 50, "caller_id", 1, "kind", "job_result", "job", `[{"id":3,"caller_id":1,"status":"finished"}]`, "message", "result of job 17:1:3", "transport_id", "t-9")
	rc.HSet(ctx, "message:1:51", "id", 51, "caller_id", 1, "kind", "chat", "message", "hello")
	for _, m := range []string{"message:1:50", "message:1:51"} {
		if err := db.Enqueue(ctx, keys.MsgOut, m); err != nil {
			t.Fatal(err)
		}
	}
	cms, _, err := db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{}, true)
	if err != nil || len(cms) != 2 {
		t.Fatalf("claim: %d %v", len(cms), err)
	}
	res, chat := cms[0], cms[1]
	if !res.Partial || len(res.Msg) != 4 || res.Msg["kind"] != "job_result" || res.Msg["job"] != `[{"id":3,"caller_id":1,"status":"finished"}]` || res.Msg["caller_id"] != "1" {
		t.Fatalf("result claimed as %+v (partial %v): want kind, job, caller_id and flow_id only", res.Msg, res.Partial)
	}
	if chat.Partial || chat.Msg["message"] != "hello" {
		t.Fatalf("chat claimed as %+v (partial %v): want the whole hash", chat.Msg, chat.Partial)
	}
	h, err := db.Message(ctx, res)
	if err != nil || h["transport_id"] != "t-9" || h["message"] != "result of job 17:1:3" || res.Partial {
		t.Fatalf("whole result: %v %v (partial %v)", h, err, res.Partial)
	}
	if h, err := db.Message(ctx, chat); err != nil || h["message"] != "hello" {
		t.Fatalf("whole chat: %v %v", h, err)
	}
}

// ReleaseClaims gives back only the named claims of a consumer (those of a claim call
// whose answer was lost): their jobs are on the queue again with a wake token, the
// other claims stay held.
func TestReleaseClaims(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 14)
	wakeRunner1(t, 14, keys.Queue("sh"))
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 3)
	enqueueJobs(t, db, q, jobs)
	got, err := db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 3), store.Wake{})
	if err != nil || len(got) != 3 {
		t.Fatalf("claim: %d %v", len(got), err)
	}
	tokens := wakeTokens(t, 14, q)
	moved, err := db.ReleaseClaims(ctx, "w1", []string{got[0].Claim.ID, got[2].Claim.ID, "never-made"})
	if err != nil || len(moved) != 2 {
		t.Fatalf("release: %+v %v", moved, err)
	}
	rc := srv.Client(t, 14)
	if q := rc.LRange(ctx, q, 0, -1).Val(); len(q) != 2 || !slices.Contains(q, got[0].Claim.Item) || !slices.Contains(q, got[2].Claim.Item) {
		t.Fatalf("queue after the release: %v", q)
	}
	if p := rc.LRange(ctx, keys.Processing("w1"), 0, -1).Val(); len(p) != 1 || p[0] != got[1].Claim.Item {
		t.Fatalf("processing list after the release: %v", p)
	}
	if ok, _ := db.ExtendLease(ctx, got[1].Claim, time.Minute); !ok {
		t.Fatal("the claim not named lost its lease")
	}
	if n := wakeTokens(t, 14, q); n != tokens+2 {
		t.Fatalf("wake tokens: %d, want %d", n, tokens+2)
	}
}

// A message given back to msg_out (a lease ended, a claim released) wakes the routers:
// its token goes on coord:wake:msg_out (the context id), not on a job queue's list.
func TestRequeuedMessageWakesRouters(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 16)
	srv.Client(t, 16).LPush(ctx, keys.MsgOut, "message:1:1")
	cl, err := db.Claim(ctx, keys.MsgOut, "router-a", time.Minute)
	if err != nil || cl == nil {
		t.Fatalf("claim: %v %v", cl, err)
	}
	g := srv.Client(t, 0)
	g.Del(ctx, keys.WakeMsgOut)
	if moved, err := db.ReleaseClaims(ctx, "router-a", []string{cl.ID}); err != nil || len(moved) != 1 {
		t.Fatalf("release: %v %v", moved, err)
	}
	if got := g.LRange(ctx, keys.WakeMsgOut, 0, -1).Val(); len(got) != 1 || got[0] != "16" {
		t.Fatalf("router wake tokens: %v, want [16]", got)
	}
}

// A job queued twice (a write retried after a lost answer) runs once: the second
// entry, claimed while the first run's claim still holds the job, is dropped; once that
// claim is gone (its lease expired and was swept), the job can be taken over.
func TestDuplicateQueueEntryOfARunningJobIsDropped(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 17)
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 1)
	enqueueJobs(t, db, q, jobs)
	enqueueJobs(t, db, q, jobs)
	enqueueJobs(t, db, q, jobs)
	first, err := db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 1), store.Wake{})
	if err != nil || len(first) != 1 || first[0].Outcome != store.StartRun {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	// The same worker and another one claim the duplicates: both dropped.
	for _, w := range []string{"w1", "w2"} {
		got, err := db.ClaimStarts(ctx, q, w, time.Minute, make([]string, 1), store.Wake{})
		if err != nil || len(got) != 1 || got[0].Outcome != store.StartDone {
			t.Fatalf("%s claims a duplicate of a running job: %+v %v", w, got, err)
		}
	}
	if n := srv.Client(t, 17).LLen(ctx, keys.Processing("w2")).Val(); n != 0 {
		t.Fatalf("the dropped duplicate stays in w2's processing list (%d)", n)
	}
	// The first run's claim is given back (its lease ended): the job runs again.
	if _, err := db.ReleaseClaims(ctx, "w1", []string{first[0].Claim.ID}); err != nil {
		t.Fatal(err)
	}
	got, err := db.ClaimStarts(ctx, q, "w2", time.Minute, make([]string, 1), store.Wake{})
	if err != nil || len(got) != 1 || got[0].Outcome != store.StartRun {
		t.Fatalf("take-over after the lease: %+v %v", got, err)
	}
}

// A job queued twice whose two entries one claim takes together starts once: the
// second entry is a duplicate of the run the first just started. Only the started job
// goes onto the processing list, with one lease.
func TestDuplicateQueueEntriesInOneClaim(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 29)
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 2)
	enqueueJobs(t, db, q, jobs[:1])
	enqueueJobs(t, db, q, jobs)
	got, err := db.ClaimStarts(ctx, q, "w3", time.Minute, make([]string, 4), store.Wake{})
	if err != nil || len(got) != 3 {
		t.Fatalf("claim: %+v %v", got, err)
	}
	runs := map[string]int{}
	for _, g := range got {
		if g.Outcome == store.StartRun {
			runs[g.Claim.Item]++
		} else if g.Outcome != store.StartDone {
			t.Fatalf("outcome %+v", g)
		}
	}
	if len(runs) != 2 || runs[keys.Job(jobs[0].CallerID, jobs[0].ID)] != 1 || runs[keys.Job(jobs[1].CallerID, jobs[1].ID)] != 1 {
		t.Fatalf("started %v, want each job once", runs)
	}
	rc := srv.Client(t, 29)
	if proc := rc.LRange(ctx, keys.Processing("w3"), 0, -1).Val(); len(proc) != 2 || proc[0] == proc[1] {
		t.Fatalf("processing list %v, want the two started jobs", proc)
	}
	if n := rc.ZCard(ctx, keys.Leases).Val(); n != 2 {
		t.Fatalf("%d leases, want 2", n)
	}
	if n := rc.LLen(ctx, q).Val(); n != 0 {
		t.Fatalf("%d entries left on the queue", n)
	}
	if n := rc.ZCard(ctx, keys.JobIndex+":"+string(model.JobStarted)).Val(); n != 2 {
		t.Fatalf("%d jobs in the started index, want 2", n)
	}
}

// RouteClaimed queues each claimed request's job once, however often it is called.
func TestRouteClaimedIsIdempotent(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 18)
	wakeRunner1(t, 18, keys.Queue("sh"))
	rc := srv.Client(t, 18)
	rc.LPush(ctx, keys.MsgOut, "message:1:1", "message:1:2")
	var routed []store.RoutedJob
	for i := 1; i <= 2; i++ {
		cl, err := db.Claim(ctx, keys.MsgOut, "router-a", time.Minute)
		if err != nil || cl == nil {
			t.Fatal(cl, err)
		}
		routed = append(routed, store.RoutedJob{Claim: cl, Target: keys.Queue("sh"), Job: fmt.Sprintf("job:1:%d", i)})
	}
	for try := 0; try < 2; try++ {
		n, err := db.RouteClaimed(ctx, routed)
		if err != nil || n != 2*(1-try) {
			t.Fatalf("try %d: routed %d, %v", try, n, err)
		}
	}
	if got := rc.LRange(ctx, keys.Queue("sh"), 0, -1).Val(); len(got) != 2 || got[0] != "job:1:2" || got[1] != "job:1:1" {
		t.Fatalf("queue: %v", got)
	}
	if n := wakeTokens(t, 18, keys.Queue("sh")); n != 2 {
		t.Fatalf("wake tokens: %d", n)
	}
	if st := rc.HGet(ctx, "message:1:1", "status").Val(); st != "acknowledged" || rc.LLen(ctx, keys.Processing("router-a")).Val() != 0 || rc.ZCard(ctx, keys.Leases).Val() != 0 {
		t.Fatalf("message status %q, claims left", st)
	}
}

// A stale lease (a claim whose answer was lost; the job was queued and claimed again
// since, and runs) ends without touching the running claim: its job is not queued
// again, the running claim keeps its copy in the processing list, the stale copy goes.
// (The same worker's claim of a job that still names its earlier claim takes that
// claim back instead of making another: TestOwnClaimOfASweptJobTakesItBack.)
func TestStaleLeaseLeavesTheRunningClaim(t *testing.T) {
	for i, again := range []string{"w2"} {
		s := open(t)
		ctx := context.Background()
		db := mustCtx(t, s, uint32(20+i))
		rc := srv.Client(t, 20+i)
		q := keys.Queue("sh")
		_, jobs := flowWith(t, s, db, 1)
		enqueueJobs(t, db, q, jobs)
		stale, err := db.ClaimStarts(ctx, q, "w1", time.Millisecond, make([]string, 1), store.Wake{})
		if err != nil || len(stale) != 1 || stale[0].Outcome != store.StartRun {
			t.Fatal(stale, err)
		}
		item := stale[0].Claim.Item
		// Queued and claimed again (the stale copy set aside meanwhile, as a requeue of
		// another lease would have left it).
		rc.LRem(ctx, keys.Processing("w1"), 1, item)
		enqueueJobs(t, db, q, jobs)
		running, err := db.ClaimStarts(ctx, q, again, time.Minute, make([]string, 1), store.Wake{})
		if err != nil || len(running) != 1 || running[0].Outcome != store.StartRun {
			t.Fatalf("%s: claim again: %+v %v", again, running, err)
		}
		rc.LPush(ctx, keys.Processing("w1"), item) // the stale claim's copy
		moved, err := db.RequeueExpired(ctx, time.Now().Add(time.Second), 100)
		if err != nil || len(moved) != 0 || rc.LLen(ctx, q).Val() != 0 {
			t.Fatalf("%s: the stale lease requeued %v (%v)", again, moved, err)
		}
		want := map[string]int64{"w1": 0, "w2": 0}
		want[again] = 1
		for w, n := range want {
			if got := rc.LLen(ctx, keys.Processing(w)).Val(); got != n {
				t.Fatalf("%s: %s's processing list holds %d, want %d", again, w, got, n)
			}
		}
		if ok, _ := db.ExtendLease(ctx, running[0].Claim, time.Minute); !ok {
			t.Fatalf("%s: the running claim lost its lease", again)
		}
	}
}

// TestHandlerRequestsRoutedByClaim: the claim routes a flow's handler jobs
// ("executor#handler") itself, to queue:exec:<executor>, when some runner has that
// executor, as it routes script jobs (no split, no router round trip); a group with a
// job whose executor no runner has is claimed whole for the router (which fails it).
func TestHandlerRequestsRoutedByClaim(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 23)
	rc := srv.Client(t, 23)
	wakeRunner1(t, db.ContextID, "queue:exec:go")
	serve := func() {
		rc.HSet(ctx, keys.ScriptTypes, "sh", 1)
		rc.HSet(ctx, keys.Executors, "go", 1, "gone", 0)
	}
	handlers := func(fns ...string) func(ids []uint32) {
		return func(ids []uint32) {
			for i, fn := range fns {
				if fn != "" {
					rc.HSet(ctx, keys.Job(1, ids[i]), "function_name", fn)
				}
			}
		}
	}
	// go#noop and go#echo to the executor's queue; "#plain" names no executor: its
	// script type's queue.
	f, jobs := flowWithSetup(t, s, db, 4, handlers("go#noop", "go#echo", "#plain", ""))
	if _, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0); err != nil { // served by none yet: msg_out
		t.Fatal(err)
	}
	serve()
	cms, routed, err := db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{}, true)
	if err != nil || len(cms) != 0 || len(routed) != 4 {
		t.Fatalf("claim: %d claimed, routed %+v, %v; want the four jobs routed", len(cms), routed, err)
	}
	want := []string{"queue:exec:go", "queue:exec:go", "queue:sh", "queue:sh"}
	for i, r := range routed {
		if r.Job != keys.Job(1, jobs[i].ID) || r.Queue != want[i] {
			t.Fatalf("routed %d: %+v, want %s to %s", i, r, keys.Job(1, jobs[i].ID), want[i])
		}
	}
	if n := rc.LLen(ctx, "queue:exec:go").Val(); n != 2 {
		t.Fatalf("queue:exec:go holds %d jobs, want 2", n)
	}
	if n := wakeTokens(t, 23, "queue:exec:go"); n != 2 {
		t.Fatalf("%d wake tokens for 2 routed handler jobs", n)
	}

	// An executor no runner has (count 0, or never announced): the router's.
	f2, jobs2 := flowWithSetup(t, s, db, 2, handlers("go#noop", "gone#x"))
	if _, err := db.DispatchMany(ctx, f2.ID, 1, jobs2, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	cms, routed, err = db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{}, true)
	if err != nil || len(cms) != 1 || len(routed) != 0 {
		t.Fatalf("claim: %d claimed, routed %+v, %v; want the group claimed whole", len(cms), routed, err)
	}
}

// TestCreateFlowChecksItsJobs: flow.create refuses, storing nothing, a job that does
// not exist and one that belongs to another flow, naming it; a retried create of the
// same flow is fine (its jobs name it already).
func TestCreateFlowChecksItsJobs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 24)
	rc := srv.Client(t, 24)
	var ids []uint32
	for range 2 {
		j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "sh"}, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	f := &model.Flow{ID: 7, CallerID: 1, ContextID: db.ContextID, Jobs: ids}
	if _, created, err := s.CreateFlow(ctx, f, "1"); err != nil || !created {
		t.Fatalf("create flow 7: %v %v", created, err)
	}
	if _, created, err := s.CreateFlow(ctx, &model.Flow{ID: 7, CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1"); err != nil || created {
		t.Fatalf("create flow 7 again: %v %v; want found", created, err)
	}
	for _, c := range []struct {
		jobs []uint32
		want string
	}{
		{[]uint32{ids[0]}, fmt.Sprintf("job %d already belongs to flow 7", ids[0])},
		{[]uint32{999}, "job 999 of caller 1 in context 24"},
	} {
		_, _, err := s.CreateFlow(ctx, &model.Flow{ID: 8, CallerID: 1, ContextID: db.ContextID, Jobs: c.jobs}, "1")
		var ve *model.ValidationError
		if !errors.As(err, &ve) || ve.Field != "jobs" || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("flow 8 of %v: %v; want an error on jobs naming %q", c.jobs, err, c.want)
		}
		if rc.Exists(ctx, keys.Flow(8)).Val() != 0 {
			t.Fatalf("flow 8 stored")
		}
	}
}

// TestCreateFlowOfManyParts: a flow of more jobs than one claim call takes
// (store.FlowJobsPart) is claimed in every part: a missing job in the last part refuses
// it, storing nothing (the other parts' claims given back, an id reserved for a flow of
// id 0 too), and each part's jobs learn their flow.
func TestCreateFlowOfManyParts(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 26)
	rc := srv.Client(t, 26)
	jobs := make([]*model.Job, 2*store.FlowJobsPart+5)
	for i := range jobs {
		jobs[i] = &model.Job{ID: uint32(i + 1), CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "sh"}
	}
	var ids []uint32
	for i, r := range s.CreateJobs(ctx, jobs, "1") {
		if r.Err != nil {
			t.Fatalf("job %d: %v", i+1, r.Err)
		}
		ids = append(ids, r.Job.ID)
	}
	_, _, err := s.CreateFlow(ctx, &model.Flow{ID: 9, CallerID: 1, ContextID: db.ContextID, Jobs: append(slices.Clone(ids), 99999)}, "1")
	var ve *model.ValidationError
	if !errors.As(err, &ve) || ve.Field != "jobs" || !strings.Contains(err.Error(), "job 99999 of caller 1 in context 26") {
		t.Fatalf("a flow with job 99999 missing: %v", err)
	}
	if rc.Exists(ctx, keys.Flow(9)).Val() != 0 || rc.HExists(ctx, keys.Job(1, ids[0]), "flow_id").Val() {
		t.Fatal("the refused flow stored something")
	}
	checkRefusedFlowOfID0(t, s, db, ids)
	if _, created, err := s.CreateFlow(ctx, &model.Flow{ID: 9, CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1"); err != nil || !created {
		t.Fatalf("create flow 9: %v %v", created, err)
	}
	for _, id := range []uint32{ids[0], ids[store.FlowJobsPart], ids[len(ids)-1]} {
		if got := rc.HGet(ctx, keys.Job(1, id), "flow_id").Val(); got != "9" {
			t.Fatalf("job %d's flow_id %q, want 9", id, got)
		}
	}
	_, _, err = s.CreateFlow(ctx, &model.Flow{ID: 10, CallerID: 1, ContextID: db.ContextID, Jobs: ids[len(ids)-1:]}, "1")
	if want := fmt.Sprintf("job %d already belongs to flow 9", ids[len(ids)-1]); !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("flow 10 of a job of flow 9: %v; want %q", err, want)
	}
	// Jobs that name their flow already (flow.begin's) are claimed without a write:
	// the flow's stage looked up (a flow of a chosen id may be flow.begin's), the three
	// parts' claims, the flow's creation and the claim's end.
	for i := range jobs {
		jobs[i] = &model.Job{ID: uint32(10_001 + i), CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "sh", FlowID: 11}
	}
	ids = ids[:0]
	for i, r := range s.CreateJobs(ctx, jobs, "1") {
		if r.Err != nil {
			t.Fatalf("job %d: %v", jobs[i].ID, r.Err)
		}
		ids = append(ids, r.Job.ID)
	}
	f0 := fcalls(t)
	if _, created, err := s.CreateFlow(ctx, &model.Flow{ID: 11, CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1"); err != nil || !created {
		t.Fatalf("create flow 11: %v %v", created, err)
	}
	if n := fcalls(t) - f0; n != 1+3+1+1 {
		t.Errorf("flow 11 of jobs naming it: %d script calls, want its stage's, its parts' 3 claims, its creation and the claim's end", n)
	}
	// A job that does not name it yet is linked by its part's claim.
	rc.HDel(ctx, keys.Job(1, ids[store.FlowJobsPart]), "flow_id")
	f0 = fcalls(t)
	if _, created, err := s.CreateFlow(ctx, &model.Flow{ID: 11, CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1"); err != nil || created {
		t.Fatalf("create flow 11 again: %v %v; want found", created, err)
	}
	if n, got := fcalls(t)-f0, rc.HGet(ctx, keys.Job(1, ids[store.FlowJobsPart]), "flow_id").Val(); n != 1+3+1+1 || got != "11" {
		t.Errorf("flow 11 again, a job's flow_id lost: %d script calls (want 6), its flow_id %q (want 11)", n, got)
	}
}

// checkRefusedFlowOfID0: a flow of id 0 whose last part names a missing job is refused
// after its first part's claim reserved an id: the id is given back with the claims.
func checkRefusedFlowOfID0(t *testing.T, s *store.Store, db *store.DB, ids []uint32) {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, int(db.ContextID))
	seq0 := rc.Get(ctx, keys.FlowSeq).Val()
	_, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: db.ContextID, Jobs: append(slices.Clone(ids), 99999)}, "1")
	var ve *model.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), fmt.Sprintf("job 99999 of caller 1 in context %d", db.ContextID)) {
		t.Fatalf("a flow of id 0 with job 99999 missing: %v", err)
	}
	if seq := rc.Get(ctx, keys.FlowSeq).Val(); seq != seq0 || rc.HExists(ctx, keys.Job(1, ids[0]), "flow_id").Val() {
		t.Fatalf("the refused flow of id 0 kept its id (the counter %q, was %q) or its first part's claim", seq, seq0)
	}
}

// TestCreateJobsEachOnItsOwn: CreateJobs stores each job on its own, in order (a job
// named twice is created once and found the second time; a conflicting one and an
// invalid one get their own errors and store nothing), and returns each job as stored.
func TestCreateJobsEachOnItsOwn(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 25)
	rc := srv.Client(t, 25)
	job := func(id uint32, script string) *model.Job {
		return &model.Job{ID: id, CallerID: 1, ContextID: db.ContextID, Script: script, ScriptType: "sh",
			EnvVars: map[string]string{"A": "1"}, Dependends: []uint32{99}}
	}
	res := s.CreateJobs(ctx, []*model.Job{
		job(5, "true"), job(6, "true"), job(5, "true"), job(5, "false"),
		{ID: 7, CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "cobol"}, job(0, "echo auto"),
	}, "1")
	wantCreated := []bool{true, true, false, false, false, true}
	for i, r := range res {
		failed := i == 3 || i == 4
		if (r.Err != nil) != failed || r.Created != wantCreated[i] {
			t.Fatalf("job %d: created %v, err %v", i, r.Created, r.Err)
		}
		if failed {
			continue
		}
		stored, err := db.LoadJob(ctx, 1, r.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.Job, stored) {
			t.Fatalf("job %d returned %+v, stored %+v", i, r.Job, stored)
		}
	}
	var ee *store.ExistsError
	if !errors.As(res[3].Err, &ee) || ee.Field != "script" {
		t.Fatalf("conflicting job: %v; want an ExistsError naming script", res[3].Err)
	}
	if !strings.Contains(res[4].Err.Error(), "script_type") || rc.Exists(ctx, keys.Job(1, 7)).Val() != 0 {
		t.Fatalf("invalid job: %v (stored: %d)", res[4].Err, rc.Exists(ctx, keys.Job(1, 7)).Val())
	}
	if v := rc.HGet(ctx, keys.Job(1, 5), "script").Val(); v != "true" {
		t.Fatalf("job 5's script %q after the conflicting create", v)
	}
	n := 0
	for _, e := range store.EntryEvents(db.ContextID, rc.XRange(ctx, keys.Events, "-", "+").Val()) {
		if e.Type == string(model.EventJobCreated) {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d events, want job.created for 5, 6 and the auto one", n)
	}

	checkCreateJobsOrder(t, s, job)
}

// CreateJobs of jobs that share a script call: a job whose id cannot be allocated (the
// caller's id counter at its end) fails alone, and the next ones are created.
func TestCreateJobsIDSpaceExhausted(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 31)
	rc := srv.Client(t, 31)
	rc.Set(ctx, keys.JobSeq(3), 4294967295, 0)
	res := s.CreateJobs(ctx, []*model.Job{
		{CallerID: 3, ContextID: db.ContextID, Script: "true", ScriptType: "sh"},
		{ID: 8, CallerID: 3, ContextID: db.ContextID, Script: "true", ScriptType: "sh"},
	}, "1")
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "id space exhausted") {
		t.Fatalf("job without an id: %+v", res[0])
	}
	if res[1].Err != nil || !res[1].Created || res[1].Job.ID != 8 {
		t.Fatalf("job 8 after it: %+v", res[1])
	}
	if v := rc.Get(ctx, keys.JobSeq(3)).Val(); v != "4294967296" {
		t.Fatalf("id counter %s", v)
	}
}

// checkCreateJobsOrder: CreateJobs of many jobs at once keeps their order throughout.
func checkCreateJobsOrder(t *testing.T, s *store.Store, job func(uint32, string) *model.Job) {
	t.Helper()
	ctx := context.Background()
	var ee *store.ExistsError
	var many []*model.Job
	for i := range 250 {
		many = append(many, job(uint32(1000+i), fmt.Sprint("echo ", i)))
	}
	many[220] = job(1010, "echo 10")    // the same as the 11th: found
	many[230] = job(1020, "echo other") // the 21st with other content: refused
	for i, r := range s.CreateJobs(ctx, many, "1") {
		switch {
		case i == 220 && (r.Err != nil || r.Created || r.Job.ID != 1010):
			t.Fatalf("job 1010 again: %+v", r)
		case i == 230 && !errors.As(r.Err, &ee):
			t.Fatalf("job 1020 with other content: %v", r.Err)
		case i != 220 && i != 230 && (r.Err != nil || !r.Created || r.Job.ID != uint32(1000+i)):
			t.Fatalf("job %d: %+v", 1000+i, r)
		}
	}
}

// LoadDispatchJobs reads what a dispatch needs of each job (a pinned runner too), and
// names a job that does not exist.
func TestLoadDispatchJobs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 24)
	f, jobs := flowWith(t, s, db, 2)
	srv.Client(t, 24).HSet(ctx, keys.Job(1, jobs[1].ID), "runner_id", 7)
	got, err := db.LoadDispatchJobs(ctx, 1, []uint32{jobs[0].ID, jobs[1].ID})
	if err != nil || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
	for i, j := range got {
		if j.ID != jobs[i].ID || j.CallerID != 1 || j.FlowID != f.ID || j.ContextID != 24 {
			t.Fatalf("job %d: %+v", i, j)
		}
	}
	if got[0].RunnerID != 0 || got[1].RunnerID != 7 {
		t.Fatalf("runner ids %d, %d; want 0, 7", got[0].RunnerID, got[1].RunnerID)
	}
	if _, err := db.LoadDispatchJobs(ctx, 1, []uint32{jobs[0].ID, 999999}); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "999999") {
		t.Fatalf("a missing job: %v", err)
	}
}

// Dispatch routes what a runner of this node can take itself, as the router's claim
// would (lib_route): a group of plain jobs onto their queue in order, its message
// acknowledged, a wake token per job and none for the router; a job of its own for an
// executor onto queue:exec:<executor>; a group with a pinned job goes whole to msg_out
// for the router (which splits it), as does a job nobody here takes.
func TestDispatchRoutesWhatARunnerHereTakes(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 28)
	rc := srv.Client(t, 28)
	rc.HSet(ctx, keys.ScriptTypes, "sh", 1)
	rc.HSet(ctx, keys.Executors, "go", 1)
	wakeRunner1(t, db.ContextID, "queue:sh")
	wakeRunner1(t, db.ContextID, "queue:exec:go")
	f, jobs := flowWith(t, s, db, 3)
	res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0)
	if err != nil || res[0].MsgKey == "" || res[0].MsgKey != res[2].MsgKey {
		t.Fatalf("dispatch: %+v %v", res, err)
	}
	q := rc.LRange(ctx, "queue:sh", 0, -1).Val()
	if len(q) != 3 || q[2] != keys.Job(1, jobs[0].ID) || q[0] != keys.Job(1, jobs[2].ID) {
		t.Fatalf("queue:sh %v: want the three jobs in dispatch order", q)
	}
	if st := rc.HGet(ctx, res[0].MsgKey, "status").Val(); st != string(model.MessageAcknowledged) || rc.LLen(ctx, keys.MsgOut).Val() != 0 {
		t.Fatalf("group request %q, msg_out %d: want acknowledged, nothing for the router", st, rc.LLen(ctx, keys.MsgOut).Val())
	}
	if n, w := wakeTokens(t, 28, "queue:sh"), srv.Client(t, 0).LLen(ctx, keys.WakeMsgOut).Val(); n != 3 || w != 0 {
		t.Fatalf("%d runner wake tokens, %d router tokens: want 3 and 0", n, w)
	}
	if st := rc.HGet(ctx, keys.Job(1, jobs[1].ID), "status").Val(); st != string(model.JobDispatched) {
		t.Fatalf("job %d is %q", jobs[1].ID, st)
	}

	// A handler job of its own goes to its executor's queue.
	f2, jobs2 := flowWithSetup(t, s, db, 1, func(ids []uint32) { rc.HSet(ctx, keys.Job(1, ids[0]), "function_name", "go#noop") })
	dispatchEach(t, db, f2.ID, jobs2)
	if q := rc.LRange(ctx, "queue:exec:go", 0, -1).Val(); len(q) != 1 || q[0] != keys.Job(1, jobs2[0].ID) {
		t.Fatalf("queue:exec:go %v", q)
	}

	// A group with a job nobody here serves, and a pinned job: msg_out, for the router.
	f3, jobs3 := flowWithSetup(t, s, db, 2, func(ids []uint32) { rc.HSet(ctx, keys.Job(1, ids[1]), "script_type", "v") })
	if _, err := db.DispatchMany(ctx, f3.ID, 1, jobs3, "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	f4, jobs4 := flowWithSetup(t, s, db, 1, func(ids []uint32) { rc.HSet(ctx, keys.Job(1, ids[0]), "runner_id", 7) })
	dispatchEach(t, db, f4.ID, jobs4)
	if n, w := rc.LLen(ctx, keys.MsgOut).Val(), srv.Client(t, 0).LLen(ctx, keys.WakeMsgOut).Val(); n != 2 || w != 2 {
		t.Fatalf("msg_out %d, router tokens %d: want the group whole and the pinned job's request, a token each", n, w)
	}
	if n := rc.LLen(ctx, "queue:sh").Val(); n != 3 {
		t.Fatalf("queue:sh holds %d jobs: the group's plain job went without its group", n)
	}
}

// A claim returns the jobs it starts from its script (each one's DUMP), with every
// change of the start, so that a runner starts its jobs without a second round trip,
// whether the claim took a few (a lightly loaded runner) or more (a claim of the
// group a submission stored: ~8 a claim at 16 job.run clients).
func TestClaimStartsReturnsItsJobsWithoutARead(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 30)
	q := keys.Queue("sh")
	wakeRunner1(t, 30, q)
	_, jobs := flowWith(t, s, db, 9)
	enqueueJobs(t, db, q, jobs)
	reads := monitorReads(t, 30, "hgetall", "dump")
	traces := []string{"0af7651916cd43dd8448eb211c80319c", "", "1af7651916cd43dd8448eb211c80319c"}
	few, err := db.ClaimStarts(ctx, q, "w1", time.Minute, traces, store.Wake{})
	if err != nil || len(few) != 3 {
		t.Fatalf("claim 3: %d %v", len(few), err)
	}
	if n := reads(); n != 0 {
		t.Fatalf("a claim of 3 jobs read them with %d HGETALLs or DUMPs of its own", n)
	}
	rc := srv.Client(t, 30)
	checkStartsClaimedEach(t, db, rc, few, jobs, traces)
	reads() // the check's own
	many, err := db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 8), store.Wake{})
	if err != nil || len(many) != 6 {
		t.Fatalf("claim the other 6: %d %v", len(many), err)
	}
	if n := reads(); n != 0 {
		t.Fatalf("a claim of 6 jobs read them with %d HGETALLs or DUMPs of its own", n)
	}
	checkStartsClaimedEach(t, db, rc, many, jobs[3:], make([]string, 6))
	// Both give the whole job as stored after its start.
	for _, st := range append(few, many...) {
		stored, err := db.LoadJob(ctx, 1, st.Job.ID)
		if err != nil || !reflect.DeepEqual(stored, st.Job) {
			t.Fatalf("job %d as claimed:\n%+v\nas stored:\n%+v (%v)", st.Job.ID, st.Job, stored, err)
		}
	}
}

// monitorReads watches server DB db with MONITOR (on a connection of its own: the
// go-redis client's MONITOR stops after its first reply); the func it returns says
// how many of the commands cmds (lower-case) a client (not a script) sent there since
// its last call.
func monitorReads(t *testing.T, db int, cmds ...string) func() int {
	t.Helper()
	ctx := context.Background()
	opt := srv.Options()
	var conn net.Conn
	var err error
	if opt.TLSConfig != nil {
		conn, err = tls.Dial("tcp", opt.Addr, opt.TLSConfig)
	} else {
		conn, err = net.Dial("tcp", opt.Addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	send := func(args ...string) {
		b := fmt.Appendf(nil, "*%d\r\n", len(args))
		for _, a := range args {
			b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	rd := bufio.NewReader(conn)
	if opt.Password != "" {
		if opt.Username != "" {
			send("AUTH", opt.Username, opt.Password)
		} else {
			send("AUTH", opt.Password)
		}
		if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			t.Fatalf("AUTH: %q %v", line, err)
		}
	}
	send("MONITOR")
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q %v", line, err)
	}
	mc := srv.Client(t, db)
	marks := 0
	return func() int {
		marks++
		m := "monitor-mark-" + strconv.Itoa(marks)
		if err := mc.Echo(ctx, m).Err(); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		n := 0
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("MONITOR: %v", err)
			}
			if strings.Contains(line, `"echo" "`+m+`"`) {
				return n
			}
			if !strings.Contains(line, fmt.Sprintf("[%d ", db)) || strings.Contains(line, " lua]") {
				continue
			}
			for _, c := range cmds {
				if strings.Contains(strings.ToLower(line), `] "`+c+`"`) {
					n++
				}
			}
		}
	}
}

// An append to a job's log publishes the job on coord:logappend only while its log is
// watched (WatchLog): the unwatched job's append, made first, is never told.
func TestAppendLogTellsOnlyAWatchedLog(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db, err := s.Ctx(9)
	if err != nil {
		t.Fatal(err)
	}
	sub := srv.Client(t, 0).Subscribe(ctx, keys.LogAppended)
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.AppendLog(ctx, 1, 41, []byte("not watched\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := db.WatchLog(ctx, 1, 42, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := srv.Client(t, 9).TTL(ctx, keys.JobLogWatch(1, 42)).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the watch's TTL is %v", ttl)
	}
	if err := db.AppendLog(ctx, 1, 42, []byte("watched\n"), 0); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	msg, err := sub.ReceiveMessage(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Payload != "9:1:42" {
		t.Fatalf("the first notice is %q, want the watched job's 9:1:42", msg.Payload)
	}
	if b, _, _ := db.ReadLog(ctx, 1, 42, 0, 0); string(b) != "watched\n" {
		t.Fatalf("log %q", b)
	}
}

// checkFreshTrace: a job started by ClaimStartsFresh (st) stores its claim and, as its
// trace id, stored (nil: none, its claim's derived when the job is read: issue 49),
// and reads back with the trace id its start gave.
func checkFreshTrace(t *testing.T, db *store.DB, st store.Started, j *model.Job, stored any) {
	t.Helper()
	ctx := context.Background()
	if stored == nil && st.Job != nil && st.Job.TraceID != model.TraceOfClaim(st.Claim.ID) {
		t.Fatalf("job %d: trace id %q, want its claim's %q", j.ID, st.Job.TraceID, model.TraceOfClaim(st.Claim.ID))
	}
	h := srv.Client(t, int(db.ContextID)).HMGet(ctx, keys.Job(1, j.ID), "claim", "trace_id").Val()
	if st.Err != nil || st.Outcome != store.StartRun || st.Job.ID != j.ID || h[0] != st.Claim.ID || h[1] != stored {
		t.Fatalf("job %d: %+v, stored claim and trace %v", j.ID, st, h)
	}
	if got, err := db.LoadJob(ctx, 1, j.ID); err != nil || got.TraceID != st.Job.TraceID {
		t.Fatalf("job %d read back: %+v, want trace id %q (%v)", j.ID, got, st.Job.TraceID, err)
	}
}

// ClaimStartsFresh (the runner's claim) sends one random stem for its claims, not an
// id per slot: each started job still gets a claim id and a trace id of its own (its
// producer's trace when it handed one in, stored; else its claim's, which a read
// derives: issue 49), and two calls share none. A call of more jobs than a stem's index
// can number is refused before anything is claimed.
func TestClaimStartsFreshGivesEachJobItsOwnIDs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 31)
	q := keys.Queue("sh")
	_, jobs := flowWith(t, s, db, 5)
	rc := srv.Client(t, 31)
	const producer = "4bf92f3577b34da6a3ce929d0e0e4736"
	if err := rc.HSet(ctx, keys.Job(1, jobs[1].ID), "traceparent", "00-"+producer+"-00f067aa0ba902b7-01").Err(); err != nil {
		t.Fatal(err)
	}
	enqueueJobs(t, db, q, jobs)
	if _, err := db.ClaimStartsFresh(ctx, q, "w1", time.Minute, store.MaxClaimStarts+1, store.Wake{}); err == nil || !strings.Contains(err.Error(), "at most 255") {
		t.Fatalf("a claim of %d jobs: %v, want a refusal naming the limit", store.MaxClaimStarts+1, err)
	}
	if n := rc.LLen(ctx, q).Val(); n != 5 {
		t.Fatalf("the refused claim changed the queue: %d items, want 5", n)
	}
	first, err := db.ClaimStartsFresh(ctx, q, "w1", time.Minute, 2, store.Wake{})
	if err != nil || len(first) != 2 {
		t.Fatalf("claim 2: %d %v", len(first), err)
	}
	rest, err := db.ClaimStartsFresh(ctx, q, "w1", time.Minute, 8, store.Wake{})
	if err != nil || len(rest) != 3 {
		t.Fatalf("claim the other 3 with 8 slots: %d %v", len(rest), err)
	}
	hex := regexp.MustCompile(`^[0-9a-f]+$`)
	claims, traces := map[string]bool{}, map[string]bool{}
	for i, st := range append(first, rest...) {
		wantStored := any(nil) // the producer's trace id alone is stored
		if i == 1 {
			wantStored = producer
		}
		checkFreshTrace(t, db, st, jobs[i], wantStored)
		if len(st.Claim.ID) != 16 || !hex.MatchString(st.Claim.ID) || claims[st.Claim.ID] {
			t.Fatalf("job %d: claim id %q (16 hex digits, each claim its own)", i, st.Claim.ID)
		}
		claims[st.Claim.ID] = true
		want := st.Job.TraceID
		if i == 1 {
			want = producer
		}
		if len(st.Job.TraceID) != 32 || !hex.MatchString(st.Job.TraceID) || traces[st.Job.TraceID] || st.Job.TraceID != want {
			t.Fatalf("job %d: trace id %q (32 hex digits, each job its own, the producer's kept)", i, st.Job.TraceID)
		}
		traces[st.Job.TraceID] = true
	}
	if first[0].Claim.ID[:14] == rest[0].Claim.ID[:14] {
		t.Fatalf("two calls share their claims' stem: %s %s", first[0].Claim.ID, rest[0].Claim.ID)
	}
	// a claim given back (the job stops naming it) leaves the trace id with the job
	if _, err := db.ReleaseClaims(ctx, "w1", []string{first[0].Claim.ID}); err != nil {
		t.Fatal(err)
	}
	stored := rc.HMGet(ctx, keys.Job(1, jobs[0].ID), "claim", "trace_id").Val()
	if j, err := db.LoadJob(ctx, 1, jobs[0].ID); err != nil || stored[0] != nil || stored[1] != first[0].Job.TraceID || j.TraceID != first[0].Job.TraceID {
		t.Fatalf("a released claim: stored %v, want no claim and trace %s (%v)", stored, first[0].Job.TraceID, err)
	}
}

// jobMaker returns a function that creates n sh jobs of caller 1 in db's context (ids
// from 1 on, a call after the other) and returns their ids.
func jobMaker(t *testing.T, s *store.Store, db *store.DB) func(n int) []uint32 {
	next := uint32(0)
	return func(n int) []uint32 {
		t.Helper()
		jobs := make([]*model.Job, n)
		for i := range jobs {
			next++
			jobs[i] = &model.Job{ID: next, CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "sh"}
		}
		var ids []uint32
		for i, r := range s.CreateJobs(context.Background(), jobs, "1") {
			if r.Err != nil {
				t.Fatalf("job %d: %v", jobs[i].ID, r.Err)
			}
			ids = append(ids, r.Job.ID)
		}
		return ids
	}
}

// TestFlowsRaceForAJob: two flow.create calls at once naming the same jobs, one part
// each or several: at most one of them stores its flow, the other is refused naming
// the job and the winner, and every job names the flow stored (or none when both were
// refused: a part each). Before the claim, the check, the creation and the link were
// three steps that both calls could pass: two flows stored, their jobs naming the last
// link's, and the other flow never to end.
func TestFlowsRaceForAJob(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 32)
	rc := srv.Client(t, 32)
	newJobs := jobMaker(t, s, db)
	flowID := uint32(100)
	for trial := range 40 {
		n := 3
		if trial%4 == 3 {
			n = 2*store.FlowJobsPart + 5
		}
		ids := newJobs(n)
		// ids in two orders: the flows claim their parts in opposite orders
		rev := slices.Clone(ids)
		slices.Reverse(rev)
		flows := [2]*model.Flow{{ID: flowID, Jobs: ids}, {ID: flowID + 1, Jobs: rev}}
		if trial%2 == 1 { // ids of the counter's
			flows[0].ID, flows[1].ID = 0, 0
		}
		flowID += 2
		var errs [2]error
		var got [2]*model.Flow
		done := make(chan int)
		for k, f := range flows {
			f.CallerID, f.ContextID = 1, db.ContextID
			go func() {
				got[k], _, errs[k] = s.CreateFlow(ctx, f, "1")
				done <- k
			}()
		}
		<-done
		<-done
		winner := ""
		for k := range flows {
			switch {
			case errs[k] == nil && winner != "":
				t.Fatalf("trial %d: both flows stored (%s and %d) with the same jobs", trial, winner, got[k].ID)
			case errs[k] == nil:
				winner = strconv.FormatUint(uint64(got[k].ID), 10)
			case !strings.Contains(errs[k].Error(), "already belongs to flow"):
				t.Fatalf("trial %d: flow %d refused: %v; want a job of the other flow named", trial, k, errs[k])
			}
		}
		if winner == "" && n == 3 {
			t.Fatalf("trial %d: both flows of one part refused: %v, %v", trial, errs[0], errs[1])
		}
		for _, id := range ids {
			if f := rc.HGet(ctx, keys.Job(1, id), "flow_id").Val(); f != winner {
				t.Fatalf("trial %d: job %d names flow %q; want %q (stored: %v, refused: %v)", trial, id, f, winner, got, errs)
			}
		}
	}
	// every stored flow is one trial's winner: no flow without its jobs
	fl, err := rc.Keys(ctx, keys.FlowPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range fl {
		id, _ := strconv.ParseUint(strings.TrimPrefix(k, keys.FlowPrefix), 10, 32)
		f, err := db.LoadFlow(ctx, uint32(id))
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range f.Jobs {
			if got := rc.HGet(ctx, keys.Job(1, j), "flow_id").Val(); got != strconv.FormatUint(id, 10) {
				t.Fatalf("flow %d lists job %d, which names flow %q", id, j, got)
			}
		}
	}
}

// TestFlowCreateRacesOfOneID: two flow.create calls of the same chosen id at once
// with overlapping jobs, and a job.delete racing a flow.create. The stored flow's jobs
// all name it (one create's give-back took the other's jobs when their claims mixed:
// the id's hold keeps them apart, the later create refused as busy or as the stored
// flow's conflict), and a job is never both deleted and in a stored flow (job.delete
// refuses a job whose flow is being stored).
func TestFlowCreateRacesOfOneID(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 39)
	rc := srv.Client(t, 39)
	newJobs := jobMaker(t, s, db)
	both := func(a, b func() error) (error, error) {
		res := [2]error{}
		done := make(chan struct{})
		go func() { res[0] = a(); done <- struct{}{} }()
		go func() { res[1] = b(); done <- struct{}{} }()
		<-done
		<-done
		return res[0], res[1]
	}
	for trial := range 100 {
		ids := newJobs(3)
		id := uint32(1000 + trial)
		ea, eb := both(func() error {
			_, _, err := s.CreateFlow(ctx, &model.Flow{ID: id, CallerID: 1, ContextID: db.ContextID, Jobs: ids[:2]}, "1")
			return err
		}, func() error {
			_, _, err := s.CreateFlow(ctx, &model.Flow{ID: id, CallerID: 1, ContextID: db.ContextID, Jobs: ids[1:]}, "1")
			return err
		})
		if ea == nil && eb == nil {
			t.Fatalf("trial %d: both creates of flow %d stored, with other jobs", trial, id)
		}
		want := map[uint32]string{}
		if f, err := db.LoadFlow(ctx, id); err == nil {
			for _, j := range f.Jobs {
				want[j] = strconv.FormatUint(uint64(id), 10)
			}
		} else if ea == nil || eb == nil {
			t.Fatalf("trial %d: flow %d not stored: %v (the creates: %v, %v)", trial, id, err, ea, eb)
		}
		for _, j := range ids {
			if got := rc.HGet(ctx, keys.Job(1, j), "flow_id").Val(); got != want[j] {
				t.Fatalf("trial %d: job %d names flow %q, want %q (the creates: %v, %v)", trial, j, got, want[j], ea, eb)
			}
		}
		if rc.Exists(ctx, keys.FlowClaim(id)).Val() != 0 {
			t.Fatalf("trial %d: flow %d's hold left behind", trial, id)
		}
		// job.delete against flow.create
		job := newJobs(1)
		ec, ed := both(func() error {
			_, _, err := s.CreateFlow(ctx, &model.Flow{ID: 5000 + uint32(trial), CallerID: 1, ContextID: db.ContextID, Jobs: job}, "1")
			return err
		}, func() error { return db.DeleteJob(ctx, 1, job[0], false, "1") })
		if ec == nil && ed == nil {
			t.Fatalf("trial %d: flow %d stored and its job %d deleted", trial, 5000+trial, job[0])
		}
	}
}

// TestFlowDeleteRacesItsStart: flow.delete of a flow deleted in chunks (more jobs than
// one call takes) at once with its start: the flow is never started with its jobs
// going (a start between two of the delete's chunks started it: nodes never to run,
// the delete refused as "running"). The start refuses a flow being deleted, and a
// delete refused because the start came first leaves the flow whole.
func TestFlowDeleteRacesItsStart(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 41)
	rc := srv.Client(t, 41)
	next := uint32(0)
	for trial := range 8 {
		jobs := make([]*model.Job, 3*store.StartChunk+7)
		for i := range jobs {
			next++
			jobs[i] = &model.Job{ID: next, CallerID: 1, ContextID: db.ContextID, Script: "true", ScriptType: "sh"}
			if i > 0 {
				jobs[i].Dependends = []uint32{next - 1}
			}
		}
		var ids []uint32
		for i, r := range s.CreateJobs(ctx, jobs, "1") {
			if r.Err != nil {
				t.Fatalf("job %d: %v", jobs[i].ID, r.Err)
			}
			ids = append(ids, r.Job.ID)
		}
		f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1")
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := db.LoadStartJobs(ctx, 1, f.Jobs)
		if err != nil {
			t.Fatal(err)
		}
		deps, err := store.PlanDAG(f, loaded)
		if err != nil {
			t.Fatal(err)
		}
		var derr, serr error
		var started bool
		var st string
		done := make(chan struct{}, 2)
		go func() { derr = db.DeleteFlow(ctx, f.ID, false, "1"); done <- struct{}{} }()
		go func() { _, st, started, serr = db.StartFlow(ctx, f, loaded, deps, "1"); done <- struct{}{} }()
		<-done
		<-done
		exists := rc.Exists(ctx, keys.Flow(f.ID)).Val() == 1
		switch {
		case started && derr == nil:
			t.Fatalf("trial %d: flow %d both started and deleted", trial, f.ID)
		case started:
			for _, id := range ids {
				if got := rc.HGet(ctx, keys.Job(1, id), "flow_id").Val(); got != strconv.FormatUint(uint64(f.ID), 10) {
					t.Fatalf("trial %d: flow %d started (the delete: %v) with job %d gone (flow_id %q)", trial, f.ID, derr, id, got)
				}
			}
		case derr != nil:
			t.Fatalf("trial %d: neither the start (%s) nor the delete (%v) of flow %d", trial, st, derr, f.ID)
		case exists:
			t.Fatalf("trial %d: flow %d deleted, its hash left (the start: %s)", trial, f.ID, st)
		}
		if !started && st != store.FlowDeleting && !errors.Is(serr, store.ErrNotFound) {
			t.Fatalf("trial %d: the start of flow %d reported %q, %v; want it refused as being deleted, or not found", trial, f.ID, st, serr)
		}
	}
}

// SetFlowTraceparent writes a flow's jobs and the flow, and nothing of a flow deleted
// meanwhile (flow.start loads the flow, then stores the trace: its HSETs made a deleted
// flow's hashes again, holding the traceparent alone, which no delete could take).
func TestFlowTraceparentOfADeletedFlow(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 42)
	rc := srv.Client(t, 42)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ids := jobMaker(t, s, db)(2)
	fl, _, err := s.CreateFlow(ctx, &model.Flow{ID: 7, CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetFlowTraceparent(ctx, fl, tp); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keys.Flow(7), keys.Job(1, ids[0]), keys.Job(1, ids[1])} {
		if got := rc.HGet(ctx, k, "traceparent").Val(); got != tp {
			t.Fatalf("%s's traceparent %q, want %q", k, got, tp)
		}
	}
	if err := db.DeleteFlow(ctx, 7, false, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.SetFlowTraceparent(ctx, fl, tp); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keys.Flow(7), keys.Job(1, ids[0]), keys.Job(1, ids[1])} {
		if rc.Exists(ctx, k).Val() != 0 {
			t.Fatalf("%s made again by the trace of the deleted flow: %v", k, rc.HGetAll(ctx, k).Val())
		}
	}
}

// Retention deletes a flow or a standalone job only while it is ended: retention takes
// the expiry first and deletes after, and a flow.retry or dlq.requeue in between made it
// run again (the forced delete removed the running work). A flow deleted in chunks is
// marked deleting, which a retry refuses.
func TestRetentionDeletesOnlyTheEnded(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 43)
	rc := srv.Client(t, 43)
	newJobs := jobMaker(t, s, db)
	job := newJobs(1)[0]
	if deleted, err := db.DeleteEndedJob(ctx, 1, job, "retention"); err != nil || deleted || rc.Exists(ctx, keys.Job(1, job)).Val() != 1 {
		t.Fatalf("retention of a job not ended: deleted %v, %v", deleted, err)
	}
	rc.HSet(ctx, keys.Job(1, job), "status", "finished")
	if deleted, err := db.DeleteEndedJob(ctx, 1, job, "retention"); err != nil || !deleted || rc.Exists(ctx, keys.Job(1, job)).Val() != 0 {
		t.Fatalf("retention of a finished job: deleted %v, %v", deleted, err)
	}
	for _, n := range []int{3, 2*store.StartChunk + 3} {
		ids := newJobs(n)
		f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1")
		if err != nil {
			t.Fatal(err)
		}
		deleted, err := db.DeleteEndedFlow(ctx, f.ID, "retention")
		if err != nil || deleted {
			t.Fatalf("retention of a flow of %d jobs not ended: deleted %v, %v", n, deleted, err)
		}
		for _, id := range ids {
			if rc.Exists(ctx, keys.Job(1, id)).Val() != 1 {
				t.Fatalf("retention of a flow of %d jobs not ended deleted its job %d", n, id)
			}
		}
		if rc.HExists(ctx, keys.Flow(f.ID), "deleting").Val() {
			t.Fatalf("retention of a flow of %d jobs not ended marked it deleting", n)
		}
		rc.HSet(ctx, keys.Flow(f.ID), "status", "error")
		if deleted, err := db.DeleteEndedFlow(ctx, f.ID, "retention"); err != nil || !deleted || rc.Exists(ctx, keys.Flow(f.ID), keys.Job(1, ids[0]), keys.Job(1, ids[n-1])).Val() != 0 {
			t.Fatalf("retention of a failed flow of %d jobs: deleted %v, %v", n, deleted, err)
		}
	}
	// a flow whose deletion in chunks began: its retry is refused
	ids := newJobs(2*store.StartChunk + 3)
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	rc.HSet(ctx, keys.Flow(f.ID), "status", "error", "deleting", "1")
	if _, err := db.RetryFlow(ctx, f.ID, "1"); err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("retry of a flow being deleted: %v", err)
	}
}

// A standalone dispatch of a job that a flow claimed since its caller loaded it (job.run
// checks flow_id, then dispatches) is refused: the job runs with its flow, not twice.
// A deleted scheduled flow's start goes with it: a flow made again with its id does not
// start on it.
func TestStandaloneDispatchOfAFlowsJob(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 44)
	rc := srv.Client(t, 44)
	ids := jobMaker(t, s, db)(1)
	j, err := db.LoadJob(ctx, 1, ids[0]) // (as the scheduler's job.run loads it: no flow yet)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateFlow(ctx, &model.Flow{ID: 5, CallerID: 1, ContextID: db.ContextID, Jobs: ids}, "1"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, why, err := db.Dispatch(ctx, 0, j, "scheduler", 0); err != nil || ok || why != "of flow 5" {
		t.Fatalf("a standalone dispatch of flow 5's job: ok %v, why %q, %v; want refused, of flow 5", ok, why, err)
	}
	if st := rc.HGet(ctx, keys.Job(1, ids[0]), "status").Val(); st == string(model.JobDispatched) && rc.HExists(ctx, keys.Job(1, ids[0]), "attempt").Val() {
		t.Fatal("the refused dispatch counted an attempt")
	}
	// flow 5 scheduled, then deleted
	c0 := srv.Client(t, 0)
	if err := db.ScheduleFlow(ctx, 5, time.Now().Add(time.Hour), "1"); err != nil {
		t.Fatal(err)
	}
	member := "44:flow:5"
	if c0.ZScore(ctx, keys.Delayed, member).Err() != nil {
		t.Fatalf("flow 5 scheduled is not in %s", keys.Delayed)
	}
	if err := db.DeleteFlow(ctx, 5, false, "1"); err != nil {
		t.Fatal(err)
	}
	if c0.ZScore(ctx, keys.Delayed, member).Err() == nil {
		t.Fatalf("deleted flow 5's start is still in %s", keys.Delayed)
	}
}
