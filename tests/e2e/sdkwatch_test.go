package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// The Go SDK's WatchFlow: its first update is the flow's state (no event); every job
// event after that state is applied and given, in order, until the flow's end, and
// the watch returns the final state. The flow's first job waits for a gate the test
// opens at the first update, so its end and its dependent's start and end all come
// after the state the watch began with.
func TestGoSDKWatchFlowEvents(t *testing.T) {
	_, c := newStack(t, harness.StackOptions{})
	gate := filepath.Join(harness.ScratchDir(t), "watch-gate")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc, err := hero.Dial(hero.Config{Addr: c.GRPCAddr, Actor: c.Actor, Key: c.Key, Context: ctx1, TLS: harness.APITLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sc.Close() }()
	sf, err := sc.SubmitFlow(ctx, hero.FlowSpec{Jobs: []hero.FlowJob{
		{Name: "a", Job: model.Job{ScriptType: model.ScriptSh, Script: fmt.Sprintf("while [ ! -e %s ]; do sleep 0.02; done", gate)}},
		{Name: "b", Depends: []string{"a"}, Job: model.Job{ScriptType: model.ScriptSh, Script: "true"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	states := 0
	dag, err := sc.WatchFlow(ctx, sf.Flow.ID, func(u hero.FlowUpdate) {
		if u.Event == nil {
			if states++; states == 1 {
				if err := os.WriteFile(gate, nil, 0o644); err != nil {
					t.Error(err)
				}
			}
			return
		}
		got = append(got, fmt.Sprintf("%d %s", u.Event.JobID, u.Event.Type))
	})
	if err != nil {
		t.Fatal(err)
	}
	if dag.Flow.Status != model.FlowFinished {
		t.Fatalf("the watch returned the flow %s", dag.Flow.Status)
	}
	a, b := sf.Jobs["a"], sf.Jobs["b"]
	at := func(e string) int { return slices.Index(got, e) }
	aEnd, bStart, bEnd := at(fmt.Sprintf("%d job.finished", a)), at(fmt.Sprintf("%d job.started", b)), at(fmt.Sprintf("%d job.finished", b))
	if states != 1 || aEnd < 0 || bStart < aEnd || bEnd < bStart {
		t.Fatalf("%d states and the events %v: want one state, then job %d's end, job %d's start and end in that order", states, got, a, b)
	}
}
