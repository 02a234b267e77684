package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// priorityCtx makes context 1 with a local runner serving sh.
func priorityCtx(t *testing.T) (*store.Store, *store.DB) {
	t.Helper()
	s := open(t)
	db := mustCtx(t, s, 1)
	ctx := context.Background()
	if _, _, err := s.CreateRunner(ctx, 1, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"sh"}); err != nil {
		t.Fatal(err)
	}
	return s, db
}

// submitPrio submits one job per priority of ps (0: none), in this order, in one call,
// and returns their ids.
func submitPrio(t *testing.T, s *store.Store, ps []uint8) []uint32 {
	t.Helper()
	subs := make([]store.Submission, len(ps))
	for i, p := range ps {
		subs[i] = store.Submission{Job: &model.Job{CallerID: 1, Script: fmt.Sprint("echo ", i), ScriptType: "sh", Priority: p}}
	}
	out, err := s.SubmitJobs(context.Background(), 1, subs, "actor:1")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint32, len(out))
	for i, o := range out {
		ids[i] = o.Job.ID
	}
	return ids
}

// claimAll claims the queue's jobs, n at a time, and returns their ids in claim order.
func claimAll(t *testing.T, db *store.DB, n int) []uint32 {
	t.Helper()
	var got []uint32
	for {
		st, err := db.ClaimStarts(context.Background(), "queue:sh", "w1", time.Minute, make([]string, n), store.Wake{})
		if err != nil {
			t.Fatal(err)
		}
		if len(st) == 0 {
			return got
		}
		for _, x := range st {
			if x.Outcome != store.StartRun {
				t.Fatalf("claimed %s: outcome %v, %v", x.Claim.Item, x.Outcome, x.Err)
			}
			got = append(got, x.Job.ID)
		}
	}
}

// Jobs with priorities are claimed best first (1 … 5; none is 3), each priority in
// submission order, whatever the claim's size; the queue's priority set is gone once
// they are claimed. Without the merge in claim_start the jobs of priority come either
// all last or in id order.
func TestPriorityClaimOrder(t *testing.T) {
	s, db := priorityCtx(t)
	ps := []uint8{5, 0, 1, 3, 4, 2, 1, 0, 5, 2, 4, 3, 1, 0, 5}
	ids := submitPrio(t, s, ps)
	want := slices.Clone(ids)
	eff := func(p uint8) uint8 {
		if p == 0 {
			return model.PriorityDefault
		}
		return p
	}
	pos := map[uint32]int{}
	for i, id := range ids {
		pos[id] = i
	}
	slices.SortStableFunc(want, func(a, b uint32) int { return int(eff(ps[pos[a]])) - int(eff(ps[pos[b]])) })
	got := claimAll(t, db, 4)
	if !slices.Equal(got, want) {
		t.Fatalf("claim order %v, want %v", got, want)
	}
	rdb := srv.Client(t, 1)
	if n := rdb.Exists(context.Background(), keys.Priority("queue:sh")).Val(); n != 0 {
		t.Errorf("the priority set is left after every job was claimed")
	}
	// A job's priority is stored and read back.
	j, err := db.LoadJob(context.Background(), 1, ids[0])
	if err != nil || j.Priority != 5 {
		t.Fatalf("job %d read back with priority %d (%v), want 5", ids[0], j.Priority, err)
	}
}

// Ageing: a job's wait counts against a better priority by the context's
// priority_age_ms per step. A priority-5 job queued over 2 age steps before a
// default job (priority 3) and a priority-4 one goes before both (5−3 = 2 steps: it
// scores like a default job queued 2 steps later), while a priority-1 job queued with
// them still passes it (it is 4 steps better). Without ageing it would go last.
func TestPriorityAgeing(t *testing.T) {
	s, db := priorityCtx(t)
	ctx := context.Background()
	c, err := s.LoadContext(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.PriorityAgeMs = 500
	if _, err := s.UpdateContext(ctx, c, []string{"priority_age_ms"}, "t"); err != nil {
		t.Fatal(err)
	}
	low := submitPrio(t, s, []uint8{5})[0]
	// wait until two age steps have passed (the queue's clock is Redis's)
	rdb := srv.Client(t, 1)
	start, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.Sub(start) > 1050*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis's clock did not move")
		}
		time.Sleep(20 * time.Millisecond) // the clock's next reading, not a wait for an outcome
	}
	later := submitPrio(t, s, []uint8{4, 0, 1})
	got := claimAll(t, db, 1)
	want := []uint32{later[2], low, later[1], later[0]}
	if !slices.Equal(got, want) {
		t.Fatalf("claim order %v, want %v (the aged priority-5 job %d after the priority-1 one only)", got, want, low)
	}
}

// A priority out of 1…5 is refused with the field named.
func TestPriorityValidation(t *testing.T) {
	j := &model.Job{ID: 1, CallerID: 1, ContextID: 1, Script: "x", ScriptType: "sh", Priority: 6}
	err := j.Validate()
	var ve *model.ValidationError
	if err == nil || !errors.As(err, &ve) || ve.Field != "priority" {
		t.Fatalf("priority 6: %v", err)
	}
	c := &model.Context{ID: 1, Admins: []uint32{1}, PriorityAgeMs: -1}
	if err := c.Validate(); err == nil || !errors.As(err, &ve) || ve.Field != "priority_age_ms" {
		t.Fatalf("priority_age_ms -1: %v", err)
	}
	c = &model.Context{ID: 1, Admins: []uint32{1}, Weight: model.MaxWeight + 1}
	if err := c.Validate(); err == nil || !errors.As(err, &ve) || ve.Field != "weight" {
		t.Fatalf("weight %d: %v", c.Weight, err)
	}
}

// serveRounds plays a runner on runner 1's wake list of queue:sh: it pops a token (a
// context id), claims one job of that context holding it, and returns the contexts in
// the order they were served, n claims long.
func serveRounds(t *testing.T, s *store.Store, n int) []string {
	t.Helper()
	ctx := context.Background()
	wk := keys.WakeRunner(1, "queue:sh")
	var order []string
	for len(order) < n {
		tok, err := srv.Client(t, 0).LPop(ctx, wk).Result()
		if err != nil {
			t.Fatalf("wake list %s after %v: %v", wk, order, err)
		}
		id, _ := strconv.ParseUint(tok, 10, 32)
		db, err := s.Ctx(uint32(id))
		if err != nil {
			t.Fatal(err)
		}
		got, err := db.ClaimStarts(ctx, "queue:sh", "w1", time.Minute, make([]string, 1), store.Wake{Key: wk, Token: tok, Held: true})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim of context %s: %v, %v", tok, got, err)
		}
		order = append(order, tok)
	}
	return order
}

// Fairness between contexts on one runner: with a deep backlog in context 1, a job of
// context 2 is claimed at the next turn (round-robin by the wake list); with weights
// 3 and 1 the runner serves them 3:1, in rounds (1 1 1 2 1 1 1 2 …). Without the
// weight's head token the order stays 1 2 1 2.
func TestFairnessWeights(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	for _, id := range []uint32{1, 2} {
		db := mustCtx(t, s, id)
		if _, _, err := s.CreateRunner(ctx, id, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
			t.Fatal(err)
		}
		if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"sh"}); err != nil {
			t.Fatal(err)
		}
	}
	sub := func(id uint32, n int) {
		subs := make([]store.Submission, n)
		for i := range subs {
			subs[i] = store.Submission{Job: &model.Job{CallerID: 1, Script: "true", ScriptType: "sh"}}
		}
		if _, err := s.SubmitJobs(ctx, id, subs, "actor:1"); err != nil {
			t.Fatal(err)
		}
	}
	sub(1, 200)
	if got := serveRounds(t, s, 3); !slices.Equal(got, []string{"1", "1", "1"}) {
		t.Fatalf("context 1 alone: %v", got)
	}
	sub(2, 1)
	// context 1 keeps up to 8 tokens at the list's tail: context 2's one is behind
	// them until context 1's next claim moves them behind it
	got := serveRounds(t, s, 3)
	if !slices.Contains(got[:2], "2") {
		t.Fatalf("context 2's job was not claimed within 2 claims of context 1's backlog: %v", got)
	}
	sub(2, 100)
	c, err := s.LoadContext(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.Weight = 3
	if _, err := s.UpdateContext(ctx, c, []string{"weight"}, "operator"); err != nil {
		t.Fatal(err)
	}
	got = serveRounds(t, s, 40)
	n1 := 0
	for _, g := range got[8:] { // after the first rounds settle
		if g == "1" {
			n1++
		}
	}
	if n1 != 24 {
		t.Fatalf("weights 3:1: context 1 served %d of 32 claims, want 24: %v", n1, got)
	}
	for i := 8; i+3 < len(got); i++ {
		if got[i] == "2" && got[i+1] == "2" {
			t.Fatalf("context 2 served twice in a row under weights 3:1: %v", got)
		}
	}
}
