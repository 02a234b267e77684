package store_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// fcalls is how many FCALLs the server ran so far (INFO commandstats).
func fcalls(t *testing.T) int {
	t.Helper()
	info := srv.Client(t, 0).Info(context.Background(), "commandstats").Val()
	for _, l := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(l, "cmdstat_fcall:calls="); ok {
			n := 0
			for _, c := range rest {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return 0
}

// A flow of 1,207 jobs is deleted in chunks of 100 jobs a Redis call (13, then
// one for its messages and the last that removes the flow), never one call over the
// whole flow; every job and the flow go, another flow's job stays.
func TestBigFlowDeletedInChunks(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 3)
	ctx := context.Background()
	const n = 1207
	st, err := db.BeginFlow(ctx, 12, n, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	for from := st.FirstJob; from <= st.LastJob; from += 1000 {
		var part []uint32
		for id := from; id < from+1000 && id <= st.LastJob; id++ {
			part = append(part, id)
		}
		for _, r := range stageJobs(t, s, st.FlowID, part...) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		ids = append(ids, part...)
	}
	if _, _, err := s.CreateFlow(ctx, &model.Flow{ID: st.FlowID, CallerID: 12, ContextID: 3, Jobs: ids}, "12"); err != nil {
		t.Fatal(err)
	}
	other, _, err := s.CreateJob(ctx, &model.Job{CallerID: 12, ContextID: 3, Script: "true", ScriptType: "sh"}, "12")
	if err != nil {
		t.Fatal(err)
	}
	before := fcalls(t)
	if err := db.DeleteFlow(ctx, st.FlowID, false, "12"); err != nil {
		t.Fatal(err)
	}
	if calls := fcalls(t) - before; calls != 15 {
		t.Errorf("%d script calls to delete a flow of %d jobs, want 15 (13 chunks, the messages, the flow)", calls, n)
	}
	if got := countJobs(t); got != 1 {
		t.Fatalf("%d jobs left, want 1 (another flow's)", got)
	}
	if _, err := db.LoadJob(ctx, 12, other.ID); err != nil {
		t.Fatal(err)
	}
	if srv.Client(t, 3).Exists(ctx, keys.Flow(st.FlowID)).Val() != 0 {
		t.Fatal("the flow is left")
	}
}

// A flow's head is the flow as LoadFlow reads it but its job list, which
// LoadFlowJobs reads alone (flow.dag's pages read the two apart).
func TestFlowHeadAndJobs(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 3)
	ctx := context.Background()
	var ids []uint32
	for range 3 {
		j, _, err := s.CreateJob(ctx, &model.Job{CallerID: 12, ContextID: 3, Script: "true", ScriptType: "sh"}, "12")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	f, _, err := s.CreateFlow(ctx, &model.Flow{ID: 40, CallerID: 12, ContextID: 3, Jobs: ids, EnvVars: map[string]string{"A": "b"}}, "12")
	if err != nil {
		t.Fatal(err)
	}
	head, err := db.LoadFlowHead(ctx, 40)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := db.LoadFlowJobs(ctx, 40)
	if err != nil {
		t.Fatal(err)
	}
	head.Jobs = jobs
	if !reflect.DeepEqual(head, f) {
		t.Fatalf("head and jobs:\n%+v\nthe flow:\n%+v", head, f)
	}
	if _, err := db.LoadFlowHead(ctx, 41); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a missing flow's head: %v", err)
	}
}
