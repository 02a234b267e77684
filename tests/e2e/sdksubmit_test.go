package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// The Go client's concurrent Submits, coalesced into shared stream messages and group
// commits, against the real stack (signed once per connection, TLS): each of
// goroutines × each submissions gets its own job, which holds what that caller
// submitted; a job refused by the API's checks (an unknown script type) or by the
// store (a script type no runner serves, which refuses the store call of its whole
// group: the group is then stored job by job) fails its own caller only; a Submit
// whose context ended before it was sent stores nothing. The submissions did share
// messages (hero_api_stream_batch_items).
func TestGoClientSubmitCoalesced(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sc.Close() }()
	batches0, _ := harness.Metric(s.API, "hero_api_stream_batch_items_sum", `direction="received"`)
	const goroutines, each = 16, 40
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make([][]coalescedOutcome, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				st := model.ScriptSh
				if b := coalescedBad(g, k); b != "" {
					st = b
				}
				script := fmt.Sprintf("echo %d-%d", g, k)
				r, err := sc.Submit(ctx, &model.Job{ScriptType: st, Script: script}, hero.SubmitOptions{})
				o := coalescedOutcome{script: script, err: err}
				if err == nil {
					o.job = r.Job
				}
				got[g] = append(got[g], o)
			}
		}()
	}
	wg.Wait()
	ids := checkCoalescedOutcomes(t, got)
	if want := goroutines*each - 2*(each/10); len(ids) != want {
		t.Fatalf("%d jobs for %d good submissions", len(ids), want)
	}
	// each job holds what its caller submitted (the store's copy, not only the answer)
	for id, script := range ids {
		if j, err := sc.GetJob(ctx, 0, id); err != nil || j.Script != script {
			t.Fatalf("job %d: %+v %v; want the script %q", id, j, err, script)
		}
	}
	if n, err := harness.Metric(s.API, "hero_api_stream_batch_items_sum", `direction="received"`); err != nil || n <= batches0 {
		t.Errorf("submissions received in batch messages: %v (%v); want some (the Submits were not coalesced)", n-batches0, err)
	}
	checkCancelledSubmit(t, ctx, sc)
}

// coalescedBad is the script type of TestGoClientSubmitCoalesced's bad submissions
// (every 10th of goroutine 3: an unknown one; of goroutine 5: one no runner of the
// context serves), "" for the others.
func coalescedBad(g, k int) model.ScriptType {
	switch {
	case g == 3 && k%10 == 0:
		return "no-such-type"
	case g == 5 && k%10 == 0:
		return model.ScriptRust
	}
	return ""
}

// coalescedOutcome is one Submit of TestGoClientSubmitCoalesced.
type coalescedOutcome struct {
	script string
	job    *model.Job
	err    error
}

// checkCoalescedOutcomes checks each goroutine's Submits (got[g][k]): the bad ones
// refused with their own error, the others each with a job of its own holding its
// script. It returns the jobs' scripts by id.
func checkCoalescedOutcomes(t *testing.T, got [][]coalescedOutcome) map[uint32]string {
	t.Helper()
	ids := map[uint32]string{}
	for g, outs := range got {
		for k, o := range outs {
			switch b := coalescedBad(g, k); {
			case b == "no-such-type":
				if !errors.Is(o.err, hero.ErrInvalidArgument) || !strings.Contains(o.err.Error(), "script_type") {
					t.Errorf("%s (unknown script type): %v; want an invalid argument naming script_type", o.script, o.err)
				}
			case b != "":
				if !errors.Is(o.err, hero.ErrInvalidArgument) || !strings.Contains(o.err.Error(), "no runner") {
					t.Errorf("%s (script type %s, served by no runner): %v; want an invalid argument saying no runner serves it", o.script, b, o.err)
				}
			case o.err != nil:
				t.Errorf("%s: %v", o.script, o.err)
			case o.job.ID == 0 || o.job.Script != o.script || o.job.Status != model.JobDispatched:
				t.Errorf("%s answered with job %d %q (%s)", o.script, o.job.ID, o.job.Script, o.job.Status)
			case ids[o.job.ID] != "":
				t.Errorf("%s and %s answered with the same job %d", ids[o.job.ID], o.script, o.job.ID)
			default:
				ids[o.job.ID] = o.script
			}
		}
	}
	return ids
}

// checkCancelledSubmit: a Submit whose context ended is not sent (no job), and the
// client goes on.
func checkCancelledSubmit(t *testing.T, ctx context.Context, sc *hero.Client) {
	t.Helper()
	before := jobCount(t)
	gone, stop := context.WithCancel(context.Background())
	stop()
	if _, err := sc.Submit(gone, &model.Job{ScriptType: model.ScriptSh, Script: "echo never"}, hero.SubmitOptions{}); !errors.Is(err, hero.ErrCancelled) {
		t.Errorf("Submit with a cancelled context: %v; want it cancelled", err)
	}
	if _, err := sc.Submit(ctx, &model.Job{ScriptType: model.ScriptSh, Script: "echo after"}, hero.SubmitOptions{}); err != nil {
		t.Fatalf("a Submit after the cancelled one: %v", err)
	}
	if n := jobCount(t); n != before+1 {
		t.Errorf("%d jobs after a cancelled Submit and a good one, %d before; want one more", n, before)
	}
}

// jobCount is the number of jobs of context 1 (its job index).
func jobCount(t *testing.T) int64 {
	t.Helper()
	return redisSrv.Client(t, int(ctx1)).ZCard(context.Background(), keys.JobIndex).Val()
}
