package store_test

import (
	"context"
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

// The seed's fields of message:<caller>:<id> (seed 001/002) that every local job
// message keeps; the others (message_type, message_format_type, timeout, timeout_ack,
// timeout_result, logs, created_at) it stores only when they do not hold their default
// or what a read derives, which a load gives back (issue 49).
var seedMessageFields = []string{"id", "caller_id", "context_id", "message", "job", "updated_at", "status"}

// A standalone job's request and result messages name the job (ids; for the result the
// run's end) instead of carrying it: small enough for a listpack. Loaded, they hold
// the full job as before (the seed's Message.job: a list of jobs), the request its
// node; deleting the job deletes them.
func TestJobMessagesNameTheirJobs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 24)
	if _, _, err := s.CreateRunner(ctx, 24, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"go"}); err != nil {
		t.Fatal(err)
	}
	out, err := s.SubmitJobs(ctx, 24, []store.Submission{{Job: &model.Job{CallerID: 1, ContextID: 24, FunctionName: "go#noop",
		Args: []byte(`[1,"two"]`), EnvVars: map[string]string{"A": "b"}}}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	j := out[0].Job
	req := checkRequestNamesItsJob(t, db, j)
	res := checkResultNamesItsJob(t, db, j)
	checkJobMessagesDeleted(t, db, j, req, res)
	// A message whose job is gone loads as it names it.
	checkGoneJobsMessage(t, db)
}

// checkRequestNamesItsJob: job j's request message (first on msg_out) names it, and
// loads with the job and its node. It returns the message's key.
func checkRequestNamesItsJob(t *testing.T, db *store.DB, j *model.Job) string {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, 24)
	// The submission routed the job itself (a runner here has go): its request is
	// tracked for the job, acknowledged, not on msg_out.
	nums := jobMsgs(t, rc, 1, j.ID)
	if len(nums) != 1 || rc.LLen(ctx, keys.MsgOut).Val() != 0 {
		t.Fatalf("job %d's messages %v, msg_out %d: want its request only, routed", j.ID, nums, rc.LLen(ctx, keys.MsgOut).Val())
	}
	req := "message:1:" + nums[0]
	if st := db.MessageHash(ctx, req)["status"]; st != string(model.MessageAcknowledged) {
		t.Fatalf("request %s is %q; want acknowledged", req, st)
	}
	checkNamingMessage(t, db, req, fmt.Sprintf(`[{"id":%d,"caller_id":1}]`, j.ID))
	if rc.HExists(ctx, req, "nodes").Val() {
		t.Fatalf("request %s stores its nodes", req)
	}
	m, err := db.LoadMessageKey(ctx, req)
	if err != nil || len(m.Job) != 1 || len(m.Nodes) != 1 {
		t.Fatalf("load request: %+v %v", m, err)
	}
	if g := m.Job[0]; g.ID != j.ID || g.FunctionName != "go#noop" || string(g.Args) != `[1,"two"]` || g.EnvVars["A"] != "b" || g.ContextID != 24 || g.Status != model.JobDispatched {
		t.Fatalf("request's job as loaded: %+v", g)
	}
	if n := m.Nodes[0]; n.ID != j.ID || n.NodeStatus != model.NodeDispatched || n.Depends == nil || n.Prerequisites == nil {
		t.Fatalf("request's node as loaded: %+v", n)
	}

	return req
}

// checkResultNamesItsJob: the runner's end of job j (queued by its submission): the
// result message names the job with the run's end, and loads with the job as it
// ended. It returns the message's key.
func checkResultNamesItsJob(t *testing.T, db *store.DB, j *model.Job) string {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, 24)
	q := keys.Queue(j.QueueSuffix())
	started, err := db.ClaimStarts(ctx, q, "w1", time.Minute, []string{""}, store.Wake{})
	if err != nil || len(started) != 1 || started[0].Job == nil {
		t.Fatalf("claim: %+v %v", started, err)
	}
	rc.Del(ctx, keys.MsgOut)
	ok, err := db.FinishJob(ctx, started[0].Claim, started[0].Job, store.JobOutcome{Status: model.JobError, Error: "no \"luck\"", Fatal: true,
		Result: map[string]string{"k": "v"}})
	if err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	res := rc.LIndex(ctx, keys.MsgOut, 0).Val()
	checkNamingMessage(t, db, res, fmt.Sprintf(`[{"id":%d,"attempt":1,"status":"error","error":"no \"luck\"","fatal":true}]`, j.ID)) // (its caller: the message's)
	m, err := db.LoadMessageKey(ctx, res)
	if err != nil || len(m.Job) != 1 || len(m.Nodes) != 0 {
		t.Fatalf("load result: %+v %v", m, err)
	}
	if g := m.Job[0]; g.ID != j.ID || g.Status != model.JobError || g.Error != `no "luck"` || !g.Fatal || g.Attempt != 1 || g.Result["k"] != "v" ||
		g.FunctionName != "go#noop" || g.Worker != "w1" || g.FinishedAtMs == 0 {
		t.Fatalf("result's job as loaded: %+v", g)
	}
	// A run of a later attempt does not change what the result reports of this one.
	rc.HSet(ctx, keys.Job(1, j.ID), "attempt", 2, "status", string(model.JobDispatched))
	if m, err = db.LoadMessageKey(ctx, res); err != nil || m.Job[0].Attempt != 1 || m.Job[0].Status != model.JobError {
		t.Fatalf("result after a retry: %+v %v", m, err)
	}

	return res
}

// checkJobMessagesDeleted: job j's hash lists both its messages by number (msgs; and
// coord:idx:messages none); deleting the job deletes them, and those that a message
// set of an earlier version lists (a key, a number).
func checkJobMessagesDeleted(t *testing.T, db *store.DB, j *model.Job, req, res string) {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, 24)
	if nums := jobMsgs(t, rc, 1, j.ID); len(nums) != 2 || rc.Exists(ctx, keys.JobMessages(1, j.ID)).Val() != 0 {
		t.Fatalf("job's messages: %v (and a set of them: %d)", nums, rc.Exists(ctx, keys.JobMessages(1, j.ID)).Val())
	}
	if rc.Exists(ctx, "coord:idx:messages").Val() != 0 {
		t.Fatal("job messages indexed in coord:idx:messages")
	}
	rc.SAdd(ctx, keys.JobMessages(1, j.ID), "message:1:999", "998") // as written before: a key, a number
	rc.HSet(ctx, "message:1:999", "id", 999)
	rc.HSet(ctx, "message:1:998", "id", 998)
	if err := db.DeleteJob(ctx, 1, j.ID, true, "1"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{req, res, "message:1:999", "message:1:998", keys.JobMessages(1, j.ID)} {
		if rc.Exists(ctx, k).Val() != 0 {
			t.Fatalf("%s left after the job's delete", k)
		}
	}
}

// checkNamingMessage: message mk's job field (as a read makes it) is want, it says it names its jobs, it has
// the seed's fields and no empty field beyond them, and Redis keeps it as a listpack
// (its values are ≤ 64 bytes: a longer job list is stored in parts).
func checkNamingMessage(t *testing.T, db *store.DB, mk, want string) {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, 24)
	h := db.MessageHash(ctx, mk) // (a short one as a read makes it)
	job := h["job"]              // past 64 bytes, in parts (lib_state.lua's part_fields)
	n, _ := strconv.Atoi(h["job.n"])
	for k := 2; k <= n; k++ {
		job += h["job."+strconv.Itoa(k)]
	}
	if job != want || h["job_ref"] != "1" || (len(want) > 64) != (n > 1) {
		t.Fatalf("%s: job %s in %d parts (job_ref %q), want %s", mk, job, n, h["job_ref"], want)
	}
	for _, f := range seedMessageFields {
		if _, ok := h[f]; !ok {
			t.Fatalf("%s has no field %s (seed 001): %v", mk, f, h)
		}
	}
	for _, f := range []string{"flow_id", "transport_id", "nodes"} { // beyond the seed's, and empty
		if _, ok := h[f]; ok {
			t.Fatalf("%s stores %s: %v", mk, f, h)
		}
	}
	if enc := rc.ObjectEncoding(ctx, mk).Val(); enc != "listpack" { // a long error too: in parts
		t.Fatalf("%s is a %s", mk, enc)
	}
}

func checkGoneJobsMessage(t *testing.T, db *store.DB) {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, 24)
	rc.HSet(ctx, "message:1:77", "id", 77, "caller_id", 1, "kind", model.KindJobResult, "job", `[{"id":404,"caller_id":1,"attempt":3,"status":"finished"}]`, "job_ref", "1")
	m, err := db.LoadMessageKey(ctx, "message:1:77")
	if err != nil || len(m.Job) != 1 || m.Job[0].ID != 404 || m.Job[0].Attempt != 3 || m.Job[0].ContextID != 24 {
		t.Fatalf("message of a gone job: %+v %v", m, err)
	}
}

// The result of a job that came from another node carries the finished job: it goes
// back there over Mycelium.
func TestResultOfARemoteJobCarriesIt(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 25)
	rc := srv.Client(t, 25)
	j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 25, Script: "true", ScriptType: "sh"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	rc.HSet(ctx, keys.Job(1, j.ID), "origin", `{"pk":"abc","context_id":1,"msg_key":"message:1:5"}`, "status", string(model.JobDispatched))
	rc.LPush(ctx, "queue:sh", keys.Job(1, j.ID))
	cl, _, started, err := db.ClaimStart(ctx, "queue:sh", "w1", time.Minute, "")
	if err != nil || started == nil || started.Origin == nil {
		t.Fatalf("claim: %+v %v", started, err)
	}
	if ok, err := db.FinishJob(ctx, cl, started, store.JobOutcome{Status: model.JobFinished, Result: map[string]string{"k": "v"}}); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	mk := rc.LIndex(ctx, keys.MsgOut, 0).Val()
	h := rc.HGetAll(ctx, mk).Val()
	job := h["job"] // in parts of 64 bytes (lib_state.lua's part_fields)
	n, _ := strconv.Atoi(h["job.n"])
	for k := 2; k <= n; k++ {
		job += h["job."+strconv.Itoa(k)]
	}
	if h["job_ref"] != "" || n < 2 || !strings.Contains(job, `"origin":{"pk":"abc"`) || !strings.Contains(job, `"result":{"k":"v"}`) {
		t.Fatalf("remote job's result message: %v", h)
	}
	if enc := rc.ObjectEncoding(ctx, mk).Val(); enc != "listpack" {
		t.Fatalf("remote job's result message is a %s", enc)
	}
}

// job.submit's job.created event has the fields of every job event, in their order (a
// stream stores an entry's field names only when they differ from its node's first
// entry's), and names the job.
func TestSubmittedJobCreatedEventHasTheJobEventFields(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 26)
	if _, _, err := s.CreateRunner(ctx, 26, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"go"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"go"}); err != nil {
		t.Fatal(err)
	}
	out, err := s.SubmitJobs(ctx, 26, []store.Submission{{Job: &model.Job{CallerID: 1, ContextID: 26, FunctionName: "go#noop"}}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	rc := srv.Client(t, 26)
	evs := rc.Do(ctx, "XRANGE", keys.Events, "-", "+").Val().([]any)
	fieldsOf := func(e any) (names []string, vals map[string]string) {
		kv := e.([]any)[1].([]any)
		vals = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			names = append(names, kv[i].(string))
			vals[kv[i].(string)] = kv[i+1].(string)
		}
		return names, vals
	}
	var created []string
	for _, e := range evs {
		names, vals := fieldsOf(e)
		if model.EventTypeOfStored(vals["type"]) == string(model.EventJobCreated) {
			created = names
			if vals["job_id"] != fmt.Sprint(out[0].Job.ID) || vals["caller_id"] != "1" || vals["detail"] != "" { // (its job's key when read)
				t.Fatalf("job.created: %v", vals)
			}
		}
	}
	// (no time_ms: the id's; no status: the type's; its job.dispatched is in the entry
	// of the call's other events, lua/lib_state.lua's ev_flush)
	if strings.Join(created, ",") != "type,actor,flow_id,job_id,caller_id,detail" {
		t.Fatalf("job.created's fields %v", created)
	}
	// read back: the job's key as its job.created's detail, the type's status
	read, err := db.ReadEvents(ctx, "0", 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range read {
		if e.JobID == out[0].Job.ID {
			got = append(got, e.Type+" "+e.Status+" "+e.Detail)
		}
	}
	if want := "job.created  " + keys.Job(1, out[0].Job.ID) + ",job.dispatched dispatched attempt 1"; strings.Join(got, ",") != want {
		t.Errorf("read: %q; want %q", strings.Join(got, ","), want)
	}
}

// evalCalls is how many scripts the server of db has run (FCALL: the store's scripts
// are functions).
func evalCalls(t *testing.T, db int) int {
	t.Helper()
	return commandCalls(t, db, "fcall")
}

// commandCalls is how many times the server of db has run command cmd (lower case),
// scripts' calls included.
func commandCalls(t *testing.T, db int, cmd string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(srv.Client(t, db).Info(context.Background(), "commandstats").Val(), "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			k := 0
			fmt.Sscan(v, &k)
			n += k
		}
	}
	return n
}

// Runs of standalone jobs that end together are written by one script, each with a
// result message of its own that names its job; a run whose claim is stale is refused.
func TestStandaloneRunsFinishTogether(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 27)
	rc := srv.Client(t, 27)
	var fs []store.Finish
	for i := range 3 {
		j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 27, Script: "true", ScriptType: "sh"}, "1")
		if err != nil {
			t.Fatal(err)
		}
		rc.LPush(ctx, "queue:sh", keys.Job(1, j.ID))
		cl, _, started, err := db.ClaimStart(ctx, "queue:sh", "w1", time.Minute, "")
		if err != nil || started == nil {
			t.Fatalf("claim: %v", err)
		}
		if i == 1 {
			cl = &store.Claim{Queue: cl.Queue, Consumer: cl.Consumer, Item: cl.Item, ID: "stale"}
		}
		fs = append(fs, store.Finish{DB: db, Claim: cl, Job: started, Outcome: store.JobOutcome{Status: model.JobFinished}})
	}
	before, incr := evalCalls(t, 27), commandCalls(t, 27, "incr")
	oks, errs := store.FinishJobs(ctx, fs)
	if n := evalCalls(t, 27) - before; n != 1 {
		t.Fatalf("%d scripts for the ends of 3 standalone runs, want 1", n)
	}
	if n := commandCalls(t, 27, "incr") - incr; n != 0 {
		t.Errorf("%d INCRs for the result messages' ids; want none (one INCRBY for them all)", n)
	}
	if !oks[0] || oks[1] || !oks[2] || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("finish: %v %v", oks, errs)
	}
	mks := rc.LRange(ctx, keys.MsgOut, 0, -1).Val() // newest first
	if len(mks) != 2 {
		t.Fatalf("msg_out %v, want the two results", mks)
	}
	for k, i := range []int{2, 0} {
		h := rc.HGetAll(ctx, mks[k]).Val()
		id := fs[i].Job.ID
		if h["message"] != fmt.Sprintf("result of job 27:1:%d", id) || h["job"] != fmt.Sprintf(`[{"id":%d,"status":"finished"}]`, id) ||
			!slices.Contains(jobMsgs(t, rc, 1, id), strings.TrimPrefix(mks[k], "message:1:")) {
			t.Fatalf("result of job %d: %v", id, h)
		}
	}
}
