package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Issue 49: the request and result messages of a group of a flow's jobs stay listpacks
// however many jobs they list (their lists in parts of at most 64 bytes; a request's
// by ids alone), and read whole: a load lists every job (its caller and flow, a
// result's end), and the router's claim gets a result's whole list. (A result applied
// by the finish is stored short, one field: TestFlowResultsStoredShort.)
func TestGroupMessagesStayListpacks(t *testing.T) {
	s, db, rc := applyContext(t, 51)
	ctx := context.Background()
	const n = store.FinishApplyRuns // one finish call's runs: one result message
	// the flow's ids of two digits: its request's job_ids over 64 bytes
	for range 10 {
		if _, _, err := s.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 51, Script: "true", ScriptType: "sh"}, "1"); err != nil {
			t.Fatal(err)
		}
	}
	// applied by the finish: the request routed here, the result stored processed
	f, jobs := dagFlow(t, s, db, n, nil)
	ids := jobIDs(jobs)
	req, _ := groupMessages(t, rc, f)
	if req == "" || rc.HExists(ctx, req, "job").Val() || rc.HGet(ctx, req, "job_ids.n").Val() == "" {
		t.Fatalf("the group's request %s: %v", req, rc.HGetAll(ctx, req).Val())
	}
	checkListpackGroup(t, db, rc, req, model.KindJobRequest, ids, "")
	finishApplied(t, db, claimSh(t, db, n))
	_, res := groupMessages(t, rc, f)
	if res == "" || rc.HLen(ctx, res).Val() != 1 {
		t.Fatalf("the group's result %s: %v", res, rc.HGetAll(ctx, res).Val())
	}
	if m, err := db.LoadMessageKey(ctx, res); err != nil || len(m.Job) != n || m.FlowID != f.ID {
		t.Fatalf("%s loaded: %+v, %v", res, m, err)
	}
	claimedResultIsWhole(t, s, db, rc, n)
}

func jobIDs(jobs []*model.Job) []uint32 {
	ids := make([]uint32, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// checkListpackGroup: message mk (of kind, listing the jobs ids, each with status when
// given) is a listpack, and loads with every job, of caller 1 and the message's flow.
func checkListpackGroup(t *testing.T, db *store.DB, rc *redis.Client, mk, kind string, ids []uint32, status model.JobStatus) {
	t.Helper()
	ctx := context.Background()
	if enc := rc.ObjectEncoding(ctx, mk).Val(); enc != "listpack" {
		t.Fatalf("%s (%s of %d jobs) is a %s", mk, kind, len(ids), enc)
	}
	// the seed's fields that hold their default, and created_at, are not stored
	// (issue 49) and read back
	for _, f := range []string{"timeout", "timeout_ack", "timeout_result", "logs", "message_type", "message_format_type", "created_at"} {
		if rc.HExists(ctx, mk, f).Val() {
			t.Fatalf("%s stores %s = %q", mk, f, rc.HGet(ctx, mk, f).Val())
		}
	}
	m, err := db.LoadMessageKey(ctx, mk)
	if err != nil || m.Kind != kind || len(m.Job) != len(ids) || m.FlowID == 0 {
		t.Fatalf("%s loaded: %+v, %v", mk, m, err)
	}
	if m.MessageType != model.MessageTypeJob || m.MessageFormatType != model.FormatText || m.Logs == nil || m.CreatedAt == 0 || m.CreatedAt != m.CreatedAtMs/1000 {
		t.Fatalf("%s loaded without its defaults: %+v", mk, m)
	}
	// a message stored with them, as earlier versions did, reads the same
	rc.HSet(ctx, mk, "timeout", "0", "logs", "[]", "message_type", "job", "message_format_type", "text", "created_at", m.CreatedAt)
	if old, err := db.LoadMessageKey(ctx, mk); err != nil || old.MessageType != m.MessageType || old.MessageFormatType != m.MessageFormatType || len(old.Logs) != 0 || old.CreatedAt != m.CreatedAt {
		t.Fatalf("%s with its defaults stored: %+v, %v", mk, old, err)
	}
	rc.HDel(ctx, mk, "timeout", "logs", "message_type", "message_format_type", "created_at")
	for i, j := range m.Job {
		if !slices.Contains(ids, j.ID) || j.CallerID != 1 || j.FlowID != m.FlowID || (status != "" && j.Status != status) {
			t.Fatalf("%s: job %d listed as %+v", mk, i, j)
		}
	}
}

// groupMessages is flow f's request and result messages shared by its jobs.
func groupMessages(t *testing.T, rc *redis.Client, f *model.Flow) (req, res string) {
	t.Helper()
	ctx := context.Background()
	for _, mk := range rc.SMembers(ctx, keys.FlowMessages(f.ID)).Val() {
		switch rc.HGet(ctx, mk, "kind").Val() {
		case model.KindJobRequest:
			req = mk
		case model.KindJobResult:
			res = mk
		case "":
			if rc.HExists(ctx, mk, "gres").Val() { // a result stored short
				res = mk
			}
		}
	}
	return req, res
}

// claimedResultIsWhole: the result of n runs of a flow, on msg_out for the router, is
// claimed with its whole list (joined from its parts) and its caller and flow.
func claimedResultIsWhole(t *testing.T, s *store.Store, db *store.DB, rc *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	f2, jobs2 := dagFlow(t, s, db, n, nil)
	runs := claimSh(t, db, n)
	fs := make([]store.Finish, len(runs))
	for i, st := range runs {
		fs[i] = store.Finish{DB: db, Claim: st.Claim, Job: st.Job, Outcome: store.JobOutcome{Status: model.JobFinished}}
	}
	if oks, errs, _ := store.FinishJobsApplied(ctx, fs); !oks[0] || errs[0] != nil {
		t.Fatal(oks, errs)
	}
	_, res := groupMessages(t, rc, f2)
	if res == "" || rc.HGet(ctx, res, "job.n").Val() == "" {
		t.Fatalf("the group's result %s: %v", res, rc.HGetAll(ctx, res).Val())
	}
	checkListpackGroup(t, db, rc, res, model.KindJobResult, jobIDs(jobs2), model.JobFinished)
	cms, _, err := db.ClaimMessages(ctx, keys.MsgOut, "r1", time.Minute, 10, store.Wake{}, true)
	if err != nil || len(cms) != 1 || !cms[0].Partial {
		t.Fatalf("claim: %+v, %v", cms, err)
	}
	var ends []struct {
		ID     uint32 `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(cms[0].Msg["job"]), &ends); err != nil || len(ends) != n || cms[0].Msg["caller_id"] != "1" || cms[0].Msg["flow_id"] != fmt.Sprint(f2.ID) {
		t.Fatalf("the claimed result: %v (%v)", cms[0].Msg, err)
	}
	ids2 := jobIDs(jobs2)
	for i, e := range ends {
		if !slices.Contains(ids2, e.ID) || e.Status != string(model.JobFinished) {
			t.Fatalf("the claimed result's job %d: %+v", i, e)
		}
	}
}
