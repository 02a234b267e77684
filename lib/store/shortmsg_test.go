package store_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A standalone job routed to a runner here at its submission, whose successful end is
// applied at its finish, has request and result messages that no router or scheduler
// reads: each is stored short (one field), and a read makes of it the hash the scripts
// stored before, field for field, so that message.load answers the same message as
// for that hash — for a job submitted alone and jobs submitted together, finished
// alone and together.
func TestLocalJobMessagesStoredShort(t *testing.T) {
	s, db, rc := applyContext(t, 52)
	ctx := context.Background()
	var ids []uint32
	for _, n := range []int{1, 3} {
		var subs []store.Submission
		for i := range n {
			subs = append(subs, store.Submission{Job: shJob(7, 0, fmt.Sprintf("echo %d", i)), Actor: "7"})
		}
		out, err := s.SubmitGuarded(ctx, 52, subs, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out {
			ids = append(ids, o.Job.ID)
		}
	}
	for _, part := range [][]uint32{ids[:1], ids[1:]} {
		got, err := db.ClaimStarts(ctx, "queue:sh", "w7", time.Minute, make([]string, len(part)), store.Wake{})
		if err != nil || len(got) != len(part) {
			t.Fatalf("claim: %d started, %v", len(got), err)
		}
		fs := make([]store.Finish, len(got))
		for i, st := range got {
			fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: store.JobOutcome{Status: model.JobFinished}, Apply: true}
		}
		oks, errs := store.FinishJobs(ctx, fs)
		for i := range oks {
			if errs[i] != nil || !oks[i] {
				t.Fatalf("finish %d: %v %v", i, oks[i], errs[i])
			}
		}
	}
	for _, id := range ids {
		j, err := db.LoadJob(ctx, 7, id)
		if err != nil || j.Status != model.JobFinished {
			t.Fatalf("job 7:%d: %+v %v", id, j, err)
		}
		nums := jobMsgs(t, rc, 7, id)
		if len(nums) != 2 {
			t.Fatalf("job 7:%d's messages %v", id, nums)
		}
		for k, want := range []map[string]string{storedRequest(j, nums[0]), storedResult(j, nums[1])} {
			mk := "message:7:" + nums[k]
			if raw := rc.HGetAll(ctx, mk).Val(); len(raw) != 1 {
				t.Errorf("%s stored %v; want one field", mk, raw)
			}
			if got := db.MessageHash(ctx, mk); !maps.Equal(got, want) {
				t.Errorf("%s reads\n%v\nwant (as stored before)\n%v", mk, got, want)
			}
			// message.load: the same message as the hash stored before gives
			full := "message:7:" + strconv.Itoa(90000+int(id)*2+k)
			rc.HSet(ctx, full, want)
			short, err1 := db.LoadMessageKey(ctx, mk)
			before, err2 := db.LoadMessageKey(ctx, full)
			rc.Del(ctx, full)
			if err1 != nil || err2 != nil {
				t.Fatalf("load %s: %v %v", mk, err1, err2)
			}
			if !reflect.DeepEqual(short, before) {
				t.Errorf("%s loads\n%+v\nwant\n%+v", mk, short, before)
			}
		}
	}
}

// storedRequest is the request message number n of job j as lua/submit.lua stored it
// before short messages: requestFields', acknowledged.
func storedRequest(j *model.Job, n string) map[string]string {
	want := map[string]string{"id": n}
	kv := store.RequestFields(j.ContextID, 0, j, time.UnixMilli(j.CreatedAtMs), 0)
	for k := 0; k+1 < len(kv); k += 2 {
		want[fmt.Sprint(kv[k])] = fmt.Sprintf("%s", kv[k+1])
	}
	want["status"] = string(model.MessageAcknowledged)
	return want
}

// storedResult is the result message number n of job j's successful end applied at its
// finish, as lua/finish_jobs.lua stored it before short messages: resultFields',
// processed, its text and its run's entry.
func storedResult(j *model.Job, n string) map[string]string {
	ms := strconv.FormatInt(j.FinishedAtUs/1000, 10)
	ref := model.JobRef{ContextID: j.ContextID, CallerID: j.CallerID, ID: j.ID}.String()
	return map[string]string{"id": n, "status": string(model.MessageProcessed), "caller_id": strconv.FormatUint(uint64(j.CallerID), 10),
		"context_id": strconv.FormatUint(uint64(j.ContextID), 10), "message": "result of job " + ref,
		"updated_at": strconv.FormatInt(j.FinishedAtUs/1000000, 10), "kind": model.KindJobResult, "created_at_ms": ms, "job_ref": "1",
		"job": fmt.Sprintf(`[{"id":%d,"attempt":%d,"status":"finished"}]`, j.ID, j.Attempt)}
}

// The jobs of one submission that name a function each go to the queue of their
// function's executor, or, for a function that names none ("#<handler>"), of their
// script type: one call's jobs of one function but different script types go to
// different queues (submit.lua finds a queue once per function and script type).
func TestSubmitRoutesEachFunctionAndScriptType(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 54)
	if _, _, err := s.CreateRunner(ctx, 54, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh", "python"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"sh", "python"}); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceExecutors(ctx, 1, []string{"go"}); err != nil {
		t.Fatal(err)
	}
	jobs := []*model.Job{
		{CallerID: 7, FunctionName: "#h", ScriptType: "sh"},
		{CallerID: 7, FunctionName: "#h", ScriptType: "python"},
		{CallerID: 7, FunctionName: "go#noop"},
		{CallerID: 7, FunctionName: "#h", ScriptType: "python"},
		{CallerID: 7, FunctionName: "go#other"},
	}
	var subs []store.Submission
	for _, j := range jobs {
		subs = append(subs, store.Submission{Job: j, Actor: "7"})
	}
	out, err := s.SubmitGuarded(ctx, 54, subs, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := srv.Client(t, 54)
	for i, want := range []string{"queue:sh", "queue:python", "queue:exec:go", "queue:python", "queue:exec:go"} {
		jk := keys.Job(7, out[i].Job.ID)
		if q := rc.LRange(ctx, want, 0, -1).Val(); !slices.Contains(q, jk) {
			t.Errorf("job %d (%s, %s) not on %s: %v", i, jobs[i].FunctionName, jobs[i].ScriptType, want, q)
		}
	}
}

// The result message of a flow's runs whose successful ends a finish applies together
// (processed at once, no router's or scheduler's to read) is stored short, one field,
// and a read makes of it the hash the finish stored before, field for field — its
// text, the flow, the runs of the call and their list — so that message.load answers
// the same message; the result message of a call's runs that fail (pushed for the
// router) is stored whole, as before.
func TestFlowResultsStoredShort(t *testing.T) {
	s, db, rc := applyContext(t, 58)
	ctx := context.Background()
	f, _ := dagFlow(t, s, db, 4, nil)
	runs := claimSh(t, db, 4)
	finishApplied(t, db, runs, runs[3].Job.ID)
	var applied, failed string
	for _, mk := range rc.SMembers(ctx, keys.FlowMessages(f.ID)).Val() {
		h := db.MessageHash(ctx, mk)
		if h["kind"] != model.KindJobResult {
			continue
		}
		if h["status"] == string(model.MessageProcessed) {
			applied = mk
		} else {
			failed = mk
		}
	}
	if applied == "" || failed == "" {
		t.Fatalf("flow %d's messages %v: want one applied here, one pushed", f.ID, rc.SMembers(ctx, keys.FlowMessages(f.ID)).Val())
	}
	if raw := rc.HGetAll(ctx, failed).Val(); len(raw) < 2 {
		t.Errorf("%s (pushed) stored %v; want it whole", failed, raw)
	}
	raw := rc.HGetAll(ctx, applied).Val()
	if len(raw) != 1 {
		t.Fatalf("%s stored %v; want one field", applied, raw)
	}
	ms, _, _ := strings.Cut(raw["gres"], " ")
	n, _ := strconv.ParseInt(ms, 10, 64)
	_, num, _ := strings.Cut(strings.TrimPrefix(applied, "message:"), ":")
	var list []string
	for _, r := range runs[:3] {
		list = append(list, fmt.Sprintf(`{"id":%d,"attempt":1,"status":"finished"}`, r.Job.ID))
	}
	// as the finish stored it before: resultFields' (the call's text), processed, the list
	want := map[string]string{"id": num, "status": string(model.MessageProcessed), "caller_id": "1", "context_id": "58",
		"message": fmt.Sprintf("results of 4 jobs of flow %d", f.ID), "updated_at": strconv.FormatInt(n/1000, 10),
		"flow_id": itoa(f.ID), "kind": model.KindJobResult, "created_at_ms": ms, "job_ref": "1", "job": "[" + strings.Join(list, ",") + "]"}
	if got := db.MessageHash(ctx, applied); !maps.Equal(got, want) {
		t.Fatalf("%s reads\n%v\nwant (as stored before)\n%v", applied, got, want)
	}
	full := "message:1:99001"
	before := map[string]string{}
	for k, v := range want {
		before[k] = v
	}
	before["id"] = "99001"
	rc.HSet(ctx, full, before)
	defer rc.Del(ctx, full)
	short, err1 := db.LoadMessageKey(ctx, applied)
	whole, err2 := db.LoadMessageKey(ctx, full)
	if err1 != nil || err2 != nil {
		t.Fatalf("load: %v %v", err1, err2)
	}
	whole.ID = short.ID
	if !reflect.DeepEqual(short, whole) {
		t.Errorf("%s loads\n%+v\nwant\n%+v", applied, short, whole)
	}
}
