package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// SubmitJobs (lua/submit.lua) writes, per new job: its hash (dispatched, attempt 1),
// both job indexes, job.created and job.dispatched, one request message tracked for
// the job, acknowledged, and the job on queue:sh with a wake token of runner 1 (a
// runner here serves sh: no router in between), the uniqueness key with its TTL; a
// unique key or a chosen id that names a job returns it; a conflict writes nothing; a
// reserved id that a caller chose is skipped.
func TestSubmitJobsEffects(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 1)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	job := func(id uint32, script string) *model.Job {
		return &model.Job{ID: id, CallerID: 1, Script: script, ScriptType: model.ScriptType("sh")}
	}
	// No runner serves sh yet: refused, nothing stored.
	_, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: job(0, "echo a")}}, "actor:1")
	var ve *model.ValidationError
	if !errors.As(err, &ve) || ve.Field != "script_type" || rdb.Exists(ctx, keys.Job(1, 1)).Val() != 0 {
		t.Fatalf("an unserved script type: %v", err)
	}
	if _, _, err := s.CreateRunner(ctx, 1, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	// A caller chose id 1: the first reserved id meets it and is skipped.
	if _, _, err := s.CreateJob(ctx, &model.Job{ID: 1, CallerID: 1, ContextID: 1, Script: "true", ScriptType: "sh"}, "t"); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, keys.JobSeq(1), 0, 0)
	var out []store.Submitted
	out, err = s.SubmitJobs(ctx, 1, []store.Submission{{Job: job(0, "echo a"), UniqueKey: "k", UniqueTTL: time.Minute}, {Job: job(0, "echo b")}}, "actor:1")
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].Existing || out[1].Existing || out[0].Job.ID == 1 || out[1].Job.ID == 1 || out[0].Job.ID == out[1].Job.ID {
		t.Fatalf("submitted: %+v %+v", out[0], out[1])
	}
	a := out[0].Job
	checkSubmittedWritten(t, db, a.ID)

	// The same unique key: the job it names, nothing written.
	again, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: job(0, "echo other"), UniqueKey: "k", UniqueTTL: time.Minute}}, "actor:1")
	if err != nil || !again[0].Existing || again[0].Job.ID != a.ID || again[0].Job.Script != "echo a" {
		t.Fatalf("unique key again: %+v, %v", again, err)
	}
	if n := rdb.LLen(ctx, "queue:sh").Val(); n != 2 {
		t.Errorf("a unique hit queued a job (queue:sh holds %d)", n)
	}

	// A chosen id with other content refuses the call: nothing of the batch is written.
	before := rdb.DBSize(ctx).Val()
	_, err = s.SubmitJobs(ctx, 1, []store.Submission{{Job: job(0, "echo c")}, {Job: job(1, "false")}}, "actor:1")
	var ee *store.ExistsError
	if !errors.As(err, &ee) || ee.Field != "script" {
		t.Fatalf("conflicting chosen id: %v", err)
	}
	if after := rdb.DBSize(ctx).Val(); after != before || rdb.LLen(ctx, "queue:sh").Val() != 2 {
		t.Errorf("a refused batch wrote: %d keys before, %d after, queue:sh %d", before, after, rdb.LLen(ctx, "queue:sh").Val())
	}
}

// checkSubmittedWritten: what SubmitJobs wrote for job id of context 1, submitted
// as "echo a" with unique key "k" (one minute) in a call of two new jobs: its hash
// (dispatched, attempt 1), both job indexes, one job.created and one
// job.dispatched, its request message tracked for it and acknowledged, the two jobs
// on queue:sh (this one first), two wake tokens for runner 1 and none for the router,
// and the uniqueness key with its TTL.
// submittedEvents counts job 1:id's job.created and job.dispatched events, read as
// the events API reads them (a submission's job.created stores no detail, which a
// read gives back as the job's key).
func submittedEvents(t *testing.T, db *store.DB, id uint32) (created, dispatched int) {
	t.Helper()
	evs, err := db.ReadEvents(context.Background(), "0", 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		switch {
		case e.Type == string(model.EventJobCreated) && e.Detail == keys.Job(1, id):
			created++
		case e.Type == string(model.EventJobDispatched) && e.JobID == id && e.Status == "dispatched":
			dispatched++
		}
	}
	return created, dispatched
}

func checkSubmittedWritten(t *testing.T, db *store.DB, id uint32) {
	t.Helper()
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	h := rdb.HGetAll(ctx, keys.Job(1, id)).Val()
	if h["status"] != "dispatched" || h["attempt"] != "1" || h["script"] != "echo a" || h["dispatched_at_ms"] == "" {
		t.Fatalf("job hash: %v", h)
	}
	member := "1:" + h["id"]
	for _, idx := range []string{keys.JobIndex, keys.StatusIndex(keys.JobIndex, "dispatched")} {
		if rdb.ZScore(ctx, idx, member).Err() != nil {
			t.Errorf("%s lacks %s", idx, member)
		}
	}
	created, dispatched := submittedEvents(t, db, id)
	if created != 1 || dispatched != 1 {
		t.Errorf("events: %d job.created, %d job.dispatched for job %d; want 1 each", created, dispatched, id)
	}
	if q := rdb.LRange(ctx, "queue:sh", 0, -1).Val(); len(q) != 2 || q[1] != keys.Job(1, id) || rdb.LLen(ctx, keys.MsgOut).Val() != 0 {
		t.Errorf("queue:sh holds %v, msg_out %d; want both jobs queued, this one at the consuming end, msg_out empty", q, rdb.LLen(ctx, keys.MsgOut).Val())
	}
	msgs := jobMsgs(t, rdb, 1, id)
	if len(msgs) != 1 {
		t.Fatalf("job %d tracks %d messages; want 1", id, len(msgs))
	}
	if st := db.MessageHash(ctx, "message:1:"+msgs[0])["status"]; st != "acknowledged" {
		t.Errorf("its request message is %q; want acknowledged (routed by the submission)", st)
	}
	if n, w := wakeTokens(t, 1, "queue:sh"), srv.Client(t, 0).LLen(ctx, keys.WakeMsgOut).Val(); n != 2 || w != 0 {
		t.Errorf("runner 1 holds %d wake tokens, the router %d; want 2 and 0", n, w)
	}
	if v, ttl := rdb.Get(ctx, keys.Unique("k")).Val(), rdb.PTTL(ctx, keys.Unique("k")).Val(); v != member || ttl <= 0 || ttl > time.Minute {
		t.Errorf("unique key: %q ttl %v", v, ttl)
	}
}

// shContext is context 1 with runner 1 serving sh, for SubmitJobs.
func shContext(t *testing.T) (*store.Store, *store.DB) {
	t.Helper()
	return shContextID(t, 1)
}

// shContextID is shContext of context id.
func shContextID(t *testing.T, id uint32) (*store.Store, *store.DB) {
	t.Helper()
	s := open(t)
	db := mustCtx(t, s, id)
	ctx := context.Background()
	if _, _, err := s.CreateRunner(ctx, id, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	return s, db
}

func shJob(caller, id uint32, script string) *model.Job {
	return &model.Job{ID: id, CallerID: caller, Script: script, ScriptType: model.ScriptType("sh")}
}

// One call of several callers' jobs (supervisor-daemon's grouped submissions): each
// job's events name its own actor; the jobs are taken in order, so that a uniqueness
// key or a chosen id that an earlier job of the call took names that job (one job,
// one message).
func TestSubmitJobsOneCall(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	out, err := s.SubmitGuarded(ctx, 1, []store.Submission{
		{Job: shJob(1, 0, "echo a"), UniqueKey: "u", UniqueTTL: time.Minute, Actor: "1"},
		{Job: shJob(2, 0, "echo b"), UniqueKey: "u", UniqueTTL: time.Minute, Actor: "2"},
		{Job: shJob(2, 7, "echo c"), Actor: "2"},
		{Job: shJob(2, 7, "echo c"), Actor: "3"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Existing || !out[1].Existing || out[1].Job.CallerID != 1 || out[1].Job.ID != out[0].Job.ID || out[1].Job.Script != "echo a" {
		t.Errorf("the same unique key twice in one call: %+v then %+v", out[0].Job, out[1].Job)
	}
	if out[2].Existing || !out[3].Existing || out[3].Job.ID != 7 || out[3].Job.Script != "echo c" {
		t.Errorf("the same chosen id twice in one call: %+v %+v", out[2], out[3])
	}
	if n := rdb.LLen(ctx, "queue:sh").Val(); n != 2 {
		t.Errorf("queue:sh holds %d jobs; want 2 (two jobs created)", n)
	}
	actors := map[string]string{}
	evs, err := db.ReadEvents(ctx, "0", 10000) // a job.created's detail, stored empty, read as its job's key
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == string(model.EventJobCreated) {
			actors[e.Detail] = e.Actor
		}
	}
	if actors[keys.Job(1, out[0].Job.ID)] != "1" || actors[keys.Job(2, 7)] != "2" || len(actors) != 2 {
		t.Errorf("job.created actors: %v", actors)
	}
}

// One call whose jobs choose one id with two contents is refused, nothing written; a
// reserved id that a later job of the call chose is reserved again, both created.
func TestSubmitJobsOneCallIDs(t *testing.T) {
	s, _ := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	before := rdb.DBSize(ctx).Val()
	_, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: shJob(3, 5, "echo d")}, {Job: shJob(3, 5, "echo e")}}, "3")
	var ee *store.ExistsError
	if !errors.As(err, &ee) || ee.Field != "script" || rdb.DBSize(ctx).Val() != before || rdb.Exists(ctx, keys.Job(3, 5)).Val() != 0 {
		t.Fatalf("one id with two contents in one call: %v", err)
	}

	// The same id twice with the same content is one job, whatever stands between
	// them in the call (the second is compared with the first job's fields alone).
	out, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: shJob(3, 6, "echo d")}, {Job: shJob(3, 7, "echo e")}, {Job: shJob(3, 6, "echo d")}}, "3")
	if err != nil || out[0].Existing || out[1].Existing || out[1].Job.Script != "echo e" || !out[2].Existing || out[2].Job.ID != 6 {
		t.Fatalf("one id twice with one content, another job between them: %+v, %v", out, err)
	}

	rdb.Set(ctx, keys.JobSeq(4), 0, 0)
	out, err = s.SubmitJobs(ctx, 1, []store.Submission{{Job: shJob(4, 0, "echo f")}, {Job: shJob(4, 1, "echo g")}}, "4")
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Existing || out[1].Existing || out[0].Job.ID == 1 || out[1].Job.ID != 1 {
		t.Fatalf("a reserved id chosen later in the call: %+v %+v", out[0].Job, out[1].Job)
	}
	for _, j := range out {
		if got := rdb.HGet(ctx, keys.Job(4, j.Job.ID), "script").Val(); got != j.Job.Script {
			t.Errorf("job 4:%d holds %q; want %q", j.Job.ID, got, j.Job.Script)
		}
	}
}

// A guarded submission writes only while the context holds the guarded values: after
// an update of them, or the context's deletion, it is refused with ErrContextChanged,
// nothing written.
func TestSubmitGuarded(t *testing.T) {
	s, _ := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	c, h, err := s.LoadContextHash(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	guard := store.NewContextGuard(h, "id", "admins", "executors", "job_max")
	if _, err := s.SubmitGuarded(ctx, 1, []store.Submission{{Job: shJob(1, 0, "echo a"), Actor: "1"}}, guard); err != nil {
		t.Fatalf("an unchanged context: %v", err)
	}
	c.Executors = []uint32{1}
	if _, err := s.UpdateContext(ctx, c, []string{"executors"}, "operator"); err != nil {
		t.Fatal(err)
	}
	before := rdb.DBSize(ctx).Val()
	if _, err := s.SubmitGuarded(ctx, 1, []store.Submission{{Job: shJob(1, 0, "echo b"), Actor: "1"}}, guard); !errors.Is(err, store.ErrContextChanged) {
		t.Fatalf("after an update of executors: %v", err)
	}
	if after := rdb.DBSize(ctx).Val(); after != before || rdb.LLen(ctx, "queue:sh").Val() != 1 {
		t.Errorf("a refused submission wrote: %d keys before, %d after", before, after)
	}
	_, h, err = s.LoadContextHash(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	guard = store.NewContextGuard(h, "id", "admins", "executors", "job_max")
	if _, err := s.SubmitGuarded(ctx, 1, []store.Submission{{Job: shJob(1, 0, "echo c"), Actor: "1"}}, guard); err != nil {
		t.Fatalf("the context read again: %v", err)
	}
	rdb.Del(ctx, keys.Context(1))
	if _, err := s.SubmitGuarded(ctx, 1, []store.Submission{{Job: shJob(1, 0, "echo d"), Actor: "1"}}, guard); !errors.Is(err, store.ErrContextChanged) {
		t.Fatalf("a deleted context: %v", err)
	}
}

// SubmitJobs stores each new job and its request message as the model encodes them,
// the fields lua/submit.lua writes itself included (a job's dispatched state and times;
// a message's caller, text and job list, around the fields the call's jobs share): the
// job hash is HashFields of the job it returns (and msgs), the message requestFields'
// with its id and status. Two callers in one call, one job routed here (its message
// acknowledged), one pinned to a runner (the router's: dispatched).
func TestSubmitStoresTheModelsFields(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	subs := []store.Submission{
		{Job: &model.Job{CallerID: 1, Script: "echo a", ScriptType: "sh", Timeout: 5, Retries: 2, EnvVars: map[string]string{"A": "1"}, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
		{Job: &model.Job{CallerID: 7, Script: "echo b", ScriptType: "sh", RunnerID: 3}},
	}
	out, err := s.SubmitJobs(ctx, 1, subs, "actor:1")
	if err != nil {
		t.Fatal(err)
	}
	for i, status := range []string{"acknowledged", "dispatched"} {
		j := out[i].Job
		h := rdb.HGetAll(ctx, keys.Job(j.CallerID, j.ID)).Val()
		msgs := strings.Fields(h["msgs"])
		delete(h, "msgs")
		checkStoredJob(t, s, j, h)
		if len(msgs) != 1 {
			t.Fatalf("job %d:%d tracks messages %v; want one", j.CallerID, j.ID, msgs)
		}
		m := db.MessageHash(ctx, fmt.Sprintf("message:%d:%s", j.CallerID, msgs[0]))
		want := map[string]string{"id": msgs[0]}
		kv := store.RequestFields(1, 0, j, time.UnixMilli(j.CreatedAtMs), 0)
		for k := 0; k+1 < len(kv); k += 2 {
			want[fmt.Sprint(kv[k])] = fmt.Sprintf("%s", kv[k+1])
		}
		want["status"] = status
		if !maps.Equal(m, want) {
			t.Errorf("job %d:%d's request message stored\n%v\nwant\n%v", j.CallerID, j.ID, m, want)
		}
	}
}

// A job whose id the script reserves is sent without the fields at their defaults
// (caller_id, context_id, an empty script, timeout 0, …), which the script writes
// itself: each stored hash is still HashFields of the job, for a job at the defaults,
// one with other values, one of a chosen id (sent whole) and a delayed one (stored
// scheduled, in the other HSET).
func TestSubmitWritesTheDefaults(t *testing.T) {
	s, _ := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	subs := []store.Submission{
		{Job: &model.Job{CallerID: 3, Script: "echo a", ScriptType: "sh"}},
		{Job: &model.Job{CallerID: 3, Script: "echo b", ScriptType: "sh", Timeout: 9, Retries: 1, EnvVars: map[string]string{"B": "2"}, Prerequisites: []string{"x"}}},
		{Job: &model.Job{ID: 77, CallerID: 3, Script: "echo c", ScriptType: "sh"}},
		{Job: &model.Job{CallerID: 3, Script: "echo d", ScriptType: "sh"}, RunAt: time.Now().Add(time.Hour)},
	}
	out, err := s.SubmitJobs(ctx, 1, subs, "actor:3")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		j := o.Job
		h := rdb.HGetAll(ctx, keys.Job(j.CallerID, j.ID)).Val()
		delete(h, "msgs")
		if j.Status == model.JobScheduled && h["attempt"] == "0" { // as before: a delayed job's attempt 0 is written
			delete(h, "attempt")
		}
		checkStoredJob(t, s, j, h)
	}
	if h := rdb.HGetAll(ctx, keys.Job(3, 77)).Val(); h["timeout"] != "0" || h["env_vars"] != "{}" {
		t.Errorf("a chosen id's job, sent whole, stored %v; want its fields at their defaults too", h)
	}
}

// checkStoredJob checks that job j's hash h (msgs aside) is HashFields of j less the
// fields a hash leaves out (the seed's fields at their default and created_at, which
// a read derives from created_at_ms), and that the job reads back (LoadJob) as j:
// what the API shows is what it showed when the hash held them all.
func checkStoredJob(t *testing.T, s *store.Store, j *model.Job, h map[string]string) {
	t.Helper()
	want := model.HashMap(j)
	for k, v := range h {
		if want[k] != v {
			t.Errorf("job %d:%d stores %s=%q; want %q", j.CallerID, j.ID, k, v, want[k])
		}
	}
	defaults := map[string]string{"script": "", "script_type": "", "timeout": "0", "retries": "0",
		"env_vars": "{}", "result": "{}", "prerequisites": "[]", "dependends": "[]"}
	for k, v := range want {
		if _, ok := h[k]; !ok && k != "created_at" && defaults[k] != v {
			t.Errorf("job %d:%d lacks %s (%q), not at its default", j.CallerID, j.ID, k, v)
		}
	}
	db, err := s.Ctx(j.ContextID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := db.LoadJob(context.Background(), j.CallerID, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := model.HashMap(got), model.HashMap(j); !maps.Equal(g, w) {
		t.Errorf("job %d:%d reads back\n%v\nwant\n%v", j.CallerID, j.ID, g, w)
	}
}

// Ids reserved in the script: the jobs of one caller take the next ids of its counter,
// skipping every id a job holds (two in a row, past the block the call took), and a
// caller whose ids are used up is refused with nothing created.
func TestSubmitReservesIDsPastHeldOnes(t *testing.T) {
	s, _ := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	for _, id := range []uint32{3, 4} {
		if _, _, err := s.CreateJob(ctx, &model.Job{ID: id, CallerID: 5, ContextID: 1, Script: "true", ScriptType: "sh"}, "t"); err != nil {
			t.Fatal(err)
		}
	}
	rdb.Set(ctx, keys.JobSeq(5), 1, 0)
	out, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: shJob(5, 0, "echo a")}, {Job: shJob(5, 0, "echo b")}}, "5")
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Job.ID != 2 || out[1].Job.ID != 5 || rdb.Get(ctx, keys.JobSeq(5)).Val() != "5" {
		t.Fatalf("ids %d and %d, counter %s; want 2 and 5 (3 and 4 held), counter 5", out[0].Job.ID, out[1].Job.ID, rdb.Get(ctx, keys.JobSeq(5)).Val())
	}
	for _, j := range out {
		if got := rdb.HGet(ctx, keys.Job(5, j.Job.ID), "script").Val(); got != j.Job.Script {
			t.Errorf("job 5:%d holds %q; want %q", j.Job.ID, got, j.Job.Script)
		}
	}

	rdb.Set(ctx, keys.JobSeq(6), 4294967295, 0)
	before := rdb.DBSize(ctx).Val()
	if _, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: shJob(6, 0, "echo c")}}, "6"); err == nil || !strings.Contains(err.Error(), "id space exhausted") {
		t.Fatalf("caller 6 with no ids left: %v", err)
	}
	if n := rdb.DBSize(ctx).Val(); n != before {
		t.Fatalf("%d keys after the refusal, %d before", n, before)
	}
}

// One call's new jobs take their request messages' ids in one INCRBY, skipping an id
// another message holds (one INCR for it), and add their index entries in one ZADD per
// index: every job gets a message of its own and both index entries.
func TestSubmitJobsShareCounterAndIndexCalls(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	next := rdb.Get(ctx, keys.MessageSeq).Val()
	held := uint32(1)
	if next != "" {
		n, err := strconv.ParseUint(next, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		held = uint32(n) + 2
	}
	rdb.HSet(ctx, keys.Message(1, held), "id", held, "message", "held")
	var subs []store.Submission
	for i := range 8 {
		subs = append(subs, store.Submission{Job: shJob(1, 0, fmt.Sprintf("echo %d", i)), Actor: "1"})
	}
	incrby, incr, zadd := commandCalls(t, 1, "incrby"), commandCalls(t, 1, "incr"), commandCalls(t, 1, "zadd")
	out, err := s.SubmitGuarded(ctx, 1, subs, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range out {
		member := fmt.Sprintf("1:%d", o.Job.ID)
		mid := rdb.HGet(ctx, keys.Job(1, o.Job.ID), "msgs").Val()
		if mid == "" || seen[mid] || mid == strconv.FormatUint(uint64(held), 10) {
			t.Errorf("job %s: request message %q (held %d, taken %v)", member, mid, held, seen)
		}
		seen[mid] = true
		if m := db.MessageHash(ctx, keys.MessagePrefix+"1:"+mid)["message"]; m != "job 1:"+member {
			t.Errorf("message %s of job %s: %q", mid, member, m)
		}
		for _, idx := range []string{keys.JobIndex, keys.JobIndex + ":dispatched"} {
			if rdb.ZScore(ctx, idx, member).Err() != nil {
				t.Errorf("job %s not in %s", member, idx)
			}
		}
	}
	if m := rdb.HGet(ctx, keys.Message(1, held), "message").Val(); m != "held" {
		t.Errorf("the held message was overwritten: %q", m)
	}
	// one INCRBY for the ids (and one for the jobs' ids), one INCR past the held id
	if n := commandCalls(t, 1, "incrby") - incrby; n != 2 {
		t.Errorf("INCRBY calls: %d; want 2 (the jobs' ids, their messages' ids)", n)
	}
	if n := commandCalls(t, 1, "incr") - incr; n != 1 {
		t.Errorf("INCR calls: %d; want 1 (the id past the held message's)", n)
	}
	if n := commandCalls(t, 1, "zadd") - zadd; n != 3 {
		t.Errorf("ZADD calls: %d; want 3 (one per index, and coord:busy's)", n)
	}
}

// A standalone job stored in the old format (every seed field written, created_at
// too) reads as the same job as one stored without its defaults; a chosen id that
// names a job stored without them, submitted again with the same content (its
// defaults sent), is that job (Existing), not a conflict over timeout or retries.
func TestSubmitOldAndNewFormatsReadAlike(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	out, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: shJob(4, 0, "echo new")}}, "actor:4")
	if err != nil {
		t.Fatal(err)
	}
	j := out[0].Job
	checkFirstDispatchDetail(t, db, j.ID)
	h := rdb.HGetAll(ctx, keys.Job(4, j.ID)).Val()
	for _, f := range []string{"timeout", "retries", "env_vars", "result", "created_at", "script_type"} {
		if _, ok := h[f]; ok && f != "script_type" {
			t.Errorf("a new job stores %s (%q), its default", f, h[f])
		}
	}
	// the old format: the same job with every field HashFields writes
	rdb.Del(ctx, keys.Job(4, j.ID))
	if err := rdb.HSet(ctx, keys.Job(4, j.ID), append(model.HashFields(j), "msgs", h["msgs"])...).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := db.LoadJob(ctx, 4, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, keys.Job(4, j.ID))
	if err := rdb.HSet(ctx, keys.Job(4, j.ID), mapItems(h)...).Err(); err != nil {
		t.Fatal(err)
	}
	cur, err := db.LoadJob(ctx, 4, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if o, c := model.HashMap(old), model.HashMap(cur); !maps.Equal(o, c) {
		t.Errorf("the old format reads\n%v\nthe new\n%v", o, c)
	}
	again, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: shJob(4, j.ID, "echo new")}}, "actor:4")
	if err != nil {
		t.Fatalf("the same job submitted again with its id: %v", err)
	}
	if !again[0].Existing || again[0].Job.ID != j.ID {
		t.Errorf("the same job submitted again with its id: %+v; want the job existing", again[0])
	}
	if _, err := s.SubmitJobs(ctx, 1, []store.Submission{{Job: &model.Job{ID: j.ID, CallerID: 4, Script: "echo new", ScriptType: "sh", Timeout: 3}}}, "actor:4"); err == nil {
		t.Error("a chosen id with another timeout: no conflict")
	}
}

// checkFirstDispatchDetail: job id's (caller 4) job.dispatched of its first attempt
// stores no detail, which a read gives back ("attempt 1").
func checkFirstDispatchDetail(t *testing.T, db *store.DB, id uint32) {
	t.Helper()
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	j := &model.Job{ID: id}
	for _, e := range rdb.XRange(ctx, keys.Events, "-", "+").Val() {
		if e.Values["type"] == model.EventJobDispatched.Stored() && e.Values["job_id"] == u32(j.ID) && e.Values["caller_id"] == "4" && e.Values["detail"] != "" {
			t.Errorf("job.dispatched of a first attempt stores detail %q", e.Values["detail"])
		}
	}
	evs, err := db.ReadEvents(ctx, "0", 10000)
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, e := range evs {
		if e.Type == string(model.EventJobDispatched) && e.JobID == j.ID && e.CallerID == 4 {
			read++
			if e.Detail != "attempt 1" || e.Status != "dispatched" {
				t.Errorf("job.dispatched reads %q, %q; want dispatched, attempt 1", e.Status, e.Detail)
			}
		}
	}
	if read != 1 {
		t.Errorf("%d job.dispatched events read; want 1", read)
	}
}

func mapItems(m map[string]string) []any {
	var kv []any
	for k, v := range m {
		kv = append(kv, k, v)
	}
	return kv
}

// A call of several new jobs of one caller, all routed here: the caller (in both
// scratch hashes) and the messages' status (acknowledged, in the message's) are
// written once a call, not with each job and message; each job and each request
// message is still stored as the model encodes it, and a call of two callers (one
// job pinned: its message for the router) still writes each its own, and so does a
// call of one caller with a pinned job (its caller in the scratch hashes, the
// messages' status each its own).
func TestSubmitSharesOneCallersFields(t *testing.T) {
	s, db := shContext(t)
	ctx := context.Background()
	rdb := srv.Client(t, 1)
	for _, subs := range [][]store.Submission{
		{{Job: shJob(2, 0, "echo a")}, {Job: shJob(2, 0, "echo b")}, {Job: shJob(2, 0, "echo c")}},
		{{Job: shJob(2, 0, "echo d")}, {Job: shJob(6, 0, "echo e")}, {Job: &model.Job{CallerID: 6, Script: "echo f", ScriptType: "sh", RunnerID: 3}}},
		{{Job: shJob(5, 0, "echo g")}, {Job: &model.Job{CallerID: 5, Script: "echo h", ScriptType: "sh", RunnerID: 3}}, {Job: shJob(5, 0, "echo i")}},
	} {
		out, err := s.SubmitJobs(ctx, 1, subs, "actor:2")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out {
			j := o.Job
			h := rdb.HGetAll(ctx, keys.Job(j.CallerID, j.ID)).Val()
			mid := h["msgs"]
			delete(h, "msgs")
			checkStoredJob(t, s, j, h)
			m := db.MessageHash(ctx, fmt.Sprintf("message:%d:%s", j.CallerID, mid))
			want := map[string]string{"id": mid}
			kv := store.RequestFields(1, 0, j, time.UnixMilli(j.CreatedAtMs), 0)
			for k := 0; k+1 < len(kv); k += 2 {
				want[fmt.Sprint(kv[k])] = fmt.Sprintf("%s", kv[k+1])
			}
			want["status"] = "acknowledged"
			if j.RunnerID != 0 {
				want["status"] = "dispatched" // for the router
			}
			if !maps.Equal(m, want) {
				t.Errorf("job %d:%d's request message stored\n%v\nwant\n%v", j.CallerID, j.ID, m, want)
			}
		}
	}
}

// A submission of 16 jobs (supervisor-daemon's group commit under load) makes few
// allocations in this process: its FCALL's arguments in one slice, the jobs' strings
// as pointers to them, its reply's members in one string, the unused key
// job:<caller>:0 of a caller's jobs made once. 41 now: 56 with a key made a job, 88
// with a reply string a job.
func TestSubmitAllocations(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	servedContext(t, s, 9, []model.ScriptType{"sh"})
	const size = 16
	subs := make([]store.Submission, size)
	jobs := make([]model.Job, size)
	n := testing.AllocsPerRun(20, func() {
		for i := range subs {
			jobs[i] = model.Job{CallerID: 2, Script: "true", ScriptType: "sh"}
			subs[i] = store.Submission{Job: &jobs[i], Actor: "2"}
		}
		if _, err := s.SubmitGuarded(ctx, 9, subs, nil); err != nil {
			t.Fatal(err)
		}
	})
	if n > 48 {
		t.Fatalf("a submission of %d jobs made %.0f allocations, want at most 48", size, n)
	}
}
