package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
)

// createLayers creates a flow of caller 1 in context ctxID of layers × width sh jobs,
// each job of a layer after the first depending on two of the layer before (widths[l]
// overrides width for layer l when given), and returns the flow and its jobs' ids by
// layer.
func createLayers(t *testing.T, s *store.Store, ctxID uint32, widths ...int) (*model.Flow, [][]uint32) {
	t.Helper()
	ctx := context.Background()
	var layers [][]uint32
	var all []uint32
	for l, w := range widths {
		jobs := make([]*model.Job, w)
		for i := range jobs {
			jobs[i] = &model.Job{CallerID: 1, ContextID: ctxID, Script: "true", ScriptType: "sh"}
			if l > 0 {
				prev := layers[l-1]
				jobs[i].Dependends = []uint32{prev[i%len(prev)], prev[(i+1)%len(prev)]}
				if len(prev) == 1 {
					jobs[i].Dependends = prev
				}
			}
		}
		var ids []uint32
		for _, r := range s.CreateJobs(ctx, jobs, "1") {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			ids = append(ids, r.Job.ID)
		}
		layers = append(layers, ids)
		all = append(all, ids...)
	}
	f, _, err := s.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: ctxID, Jobs: all}, "1")
	if err != nil {
		t.Fatal(err)
	}
	return f, layers
}

// checkStarted checks a started flow's DAG and jobs: every node of the first layer
// ready, every other pending with its job waiting for its prerequisites, the counters
// and no start token left; and that the flow is started and active.
func checkStarted(t *testing.T, db *store.DB, f *model.Flow, layers [][]uint32) {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, int(db.ContextID))
	dag := rc.HGetAll(ctx, keys.DAG(f.ID)).Val()
	if dag["total"] != fmt.Sprint(len(f.Jobs)) || dag["terminal"] != "0" || dag["starting"] != "" {
		t.Fatalf("the DAG's counters: total %q terminal %q starting %q", dag["total"], dag["terminal"], dag["starting"])
	}
	for l, ids := range layers {
		for _, id := range ids {
			st, js := dag[fmt.Sprint("s:", id)], rc.HGet(ctx, keys.Job(1, id), "status").Val()
			if l == 0 && st != string(model.NodeReady) || l > 0 && (st != string(model.NodePending) || js != string(model.JobWaitingForPrerequisites)) {
				t.Fatalf("layer %d, job %d: node %q, job %q", l, id, st, js)
			}
		}
	}
	if g, err := db.LoadFlow(ctx, f.ID); err != nil || g.Status != model.FlowStarted {
		t.Fatalf("the flow after its start: %+v, %v", g, err)
	}
	if !srv.Client(t, 0).SIsMember(ctx, keys.ActiveFlows, fmt.Sprintf("%d:%d", db.ContextID, f.ID)).Val() {
		t.Fatal("the started flow is not active")
	}
}

// A flow of more than StartChunk jobs is started in chunks: one call to begin, one per
// StartChunk nodes, one to mark it started; never one call over the whole flow. A
// start interrupted midway leaves the flow dispatched, and starting it again starts
// it whole; a call of a start that another start took over changes nothing.
func TestBigFlowStartedInChunks(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 31)
	ctx := context.Background()
	widths := []int{store.StartChunk, store.StartChunk, store.StartChunk, store.StartChunk/2 + 1}
	f, layers := createLayers(t, s, 31, widths...)
	n := len(f.Jobs)

	// interrupted after its first chunk
	jobs, err := db.LoadStartJobs(ctx, 1, f.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := store.PlanDAG(f, jobs)
	if err != nil {
		t.Fatal(err)
	}
	late, err := db.StartPart(ctx, f, jobs, deps, "first")
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := db.LoadFlow(ctx, f.ID); g.Status != model.FlowDispatched {
		t.Fatalf("a start interrupted midway: the flow is %s, want dispatched", g.Status)
	}

	before := fcalls(t)
	_, ready := storetest.StartFlow(t, db, f)
	chunks := (n + store.StartChunk - 1) / store.StartChunk
	if calls := fcalls(t) - before; calls != chunks+2 {
		t.Errorf("%d script calls to start a flow of %d jobs, want %d (begin, %d chunks, commit)", calls, n, chunks+2, chunks)
	}
	if !slices.Equal(ready, layers[0]) {
		t.Fatalf("ready at the start: %d nodes, want the first layer's %d", len(ready), len(layers[0]))
	}
	checkStarted(t, db, f, layers)

	// the interrupted start's late chunk changes nothing
	if ok, err := late(); err != nil || ok != 0 {
		t.Fatalf("a chunk of a start taken over: %d, %v", ok, err)
	}
	checkStarted(t, db, f, layers)
}

// A node with more than ReleaseChunk dependents makes the first ReleaseChunk ready at
// its completion and leaves the others to ReleaseDependents, which the scheduler is
// asked for (coord:due's release member): it makes them ready and dispatches them, a
// ReleaseBatch a call (the first call alone, the others in one round trip), each
// chunk's jobs in one request message; the node's rel: field goes, and a release with
// none left changes nothing. A paused flow's dependents are made ready, not dispatched.
func TestManyDependentsReleasedInChunks(t *testing.T) {
	s := open(t)
	releaseMany(t, s, 32, false)
	releaseMany(t, s, 34, true)
}

// releaseMany is TestManyDependentsReleasedInChunks in context ctxID, its flow paused
// or not.
func releaseMany(t *testing.T, s *store.Store, ctxID uint32, paused bool) {
	ctx := context.Background()
	{
		db := mustCtx(t, s, ctxID)
		rc := srv.Client(t, int(ctxID))
		n := store.ReleaseChunk + 2*store.ReleaseBatch + 88
		f, layers := createLayers(t, s, ctxID, 1, n)
		jobs, ready := storetest.StartFlow(t, db, f)
		if !slices.Equal(ready, layers[0]) {
			t.Fatalf("ready at the start: %v", ready)
		}
		if _, err := db.DispatchStarted(ctx, f.ID, 1, jobs[:1], "scheduler", time.Now()); err != nil {
			t.Fatal(err)
		}
		if paused {
			if _, err := db.PauseFlow(ctx, f.ID, "pause", "op", ""); err != nil {
				t.Fatal(err)
			}
		}
		root := layers[0][0]
		res, errs := db.CompleteNodes(ctx, []store.JobEnd{{FlowID: f.ID, CallerID: 1, JobID: root, Attempt: 1, Status: model.JobFinished, Retries: -1, Actor: "scheduler"}})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		if got := res[0].Ready; !res[0].Applied || !slices.Equal(got, layers[1][:store.ReleaseChunk]) {
			t.Fatalf("the completion made %d ready, want the first %d", len(got), store.ReleaseChunk)
		}
		due := srv.Client(t, 0).ZRange(ctx, keys.Due, 0, -1).Val()
		if want := fmt.Sprintf("release:%d:%d:1:%d", ctxID, f.ID, root); !slices.Contains(due, want) {
			t.Fatalf("coord:due %v, want %s", due, want)
		}
		msgs0 := rc.SCard(ctx, keys.FlowMessages(f.ID)).Val()
		before := fcalls(t)
		r, err := db.ReleaseDependents(ctx, f.ID, 1, root)
		if err != nil {
			t.Fatal(err)
		}
		if calls := fcalls(t) - before; calls != 3 || r.Calls != 3 {
			t.Errorf("%d script calls (%d reported) released %d dependents, want 3 of at most %d", calls, r.Calls, n-store.ReleaseChunk, store.ReleaseBatch)
		}
		if !slices.Equal(r.Ready, layers[1][store.ReleaseChunk:]) {
			t.Fatalf("the releases made %d ready, want the other %d in order", len(r.Ready), n-store.ReleaseChunk)
		}
		if rc.HExists(ctx, keys.DAG(f.ID), fmt.Sprint("rel:", root)).Val() {
			t.Fatal("rel: left once every dependent is released")
		}
		checkReleased(t, db, f, r, paused, msgs0)
		if r, err := db.ReleaseDependents(ctx, f.ID, 1, root); err != nil || r.Calls != 1 || len(r.Ready) != 0 || r.Dispatched != 0 {
			t.Fatalf("a release with none left: %+v %v", r, err)
		}
	}
}

// checkReleased checks what ReleaseDependents did (r) to releaseMany's flow: every
// dependent released dispatched (its node and job, attempt 1), in one request message
// a call (msgs0: the flow's messages before), or, paused, ready and not dispatched.
func checkReleased(t *testing.T, db *store.DB, f *model.Flow, r store.Released, paused bool, msgs0 int64) {
	ctx := context.Background()
	rc := srv.Client(t, int(db.ContextID))
	{
		wantNode, wantDispatched, wantMsgs := model.NodeDispatched, len(r.Ready), int64(3)
		if paused {
			wantNode, wantDispatched, wantMsgs = model.NodeReady, 0, 0
		}
		if r.Dispatched != wantDispatched {
			t.Fatalf("paused %v: %d dispatched, want %d", paused, r.Dispatched, wantDispatched)
		}
		// one request message a call, of at most ReleaseBatch jobs
		if got := rc.SCard(ctx, keys.FlowMessages(f.ID)).Val() - msgs0; got != wantMsgs {
			t.Fatalf("paused %v: %d request messages, want %d", paused, got, wantMsgs)
		}
		for _, id := range r.Ready {
			st := rc.HGet(ctx, keys.DAG(f.ID), fmt.Sprint("s:", id)).Val()
			j := rc.HMGet(ctx, keys.Job(1, id), "status", "dispatched_at_ms", "attempt").Val()
			if st != string(wantNode) || j[0] != string(model.JobDispatched) || !paused && (j[1] == nil || j[2] != "1") || paused && j[1] != nil {
				t.Fatalf("paused %v: dependent %d: node %s, job %v", paused, id, st, j)
			}
		}
	}
}

// The event stream's cap scales with the jobs the context keeps: with more events
// than the old fixed cap (EventsMaxLen) written, the events the scripts add keep
// them all, and a reader that resumes from an id in the middle reads every event
// after it, none trimmed.
func TestEventsCapScalesWithTheJobs(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 33)
	ctx := context.Background()
	rc := srv.Client(t, 33)
	// jobs enough for a cap of EventsPerJob each over EventsMaxLen + 1,500; the stream
	// filled to EventsMaxLen + 500, past the old cap by five stream nodes of 100
	target := store.EventsMaxLen + 500
	n := (target+1000)/store.EventsPerJob + 1
	for from := 0; from < n; from += 1000 {
		jobs := make([]*model.Job, min(1000, n-from))
		for i := range jobs {
			jobs[i] = &model.Job{CallerID: 1, ContextID: 33, Script: "true", ScriptType: "sh"}
		}
		for _, r := range s.CreateJobs(ctx, jobs, "1") {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	// as many events as the old cap, then a flow's
	for sent := int(rc.XLen(ctx, keys.Events).Val()); sent < target; sent += 5000 {
		p := rc.Pipeline()
		for range min(5000, target-sent) {
			store.AddEvent(ctx, p, &store.Event{Type: "job.started", Actor: "test"})
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// the 10th entry: the old cap trimmed whole stream nodes of 100 entries from the
	// start (an entry may hold several events: a creation's, store.EntryEvents)
	first := rc.XRangeN(ctx, keys.Events, "-", "+", 10).Val()
	mid, upto := first[9].ID, int64(len(store.EntryEvents(33, first)))
	events := func() int64 { return int64(len(store.EntryEvents(33, rc.XRange(ctx, keys.Events, "-", "+").Val()))) }
	total := events()
	f, layers := createLayers(t, s, 33, 20, 20)
	storetest.StartFlow(t, db, f)
	after := events()
	if after < total+int64(len(layers[1])) {
		t.Fatalf("the stream holds %d events after %d and the flow's, want them all", after, total)
	}
	if err := db.CheckEventPosition(ctx, mid); err != nil {
		t.Fatalf("a reader at the 10th event: %v", err)
	}
	read := 0
	for pos := mid; ; {
		evs, err := db.ReadEvents(ctx, pos, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		read += len(evs)
		pos = evs[len(evs)-1].ID
	}
	if int64(read) != after-upto {
		t.Fatalf("read %d events after the 10th entry, want %d", read, after-upto)
	}
}
