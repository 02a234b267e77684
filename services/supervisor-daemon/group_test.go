package main

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// recordingSubmit wraps store.SubmitGuarded: it records the jobs of each call, and
// its first call closes entered and waits for gate when gate is not nil.
type recordingSubmit struct {
	st      *store.Store
	gate    chan struct{}
	entered chan struct{}
	once    sync.Once
	opened  sync.Once
	mu      sync.Mutex
	calls   []int
}

// heldSubmit is a recordingSubmit whose first call is held until open.
func heldSubmit(st *store.Store) *recordingSubmit {
	return &recordingSubmit{st: st, gate: make(chan struct{}), entered: make(chan struct{})}
}

// open lets the held call go (once).
func (r *recordingSubmit) open() { r.opened.Do(func() { close(r.gate) }) }

func (r *recordingSubmit) submit(ctx context.Context, ctxID uint32, subs []store.Submission, guard *store.ContextGuard) ([]store.Submitted, error) {
	r.mu.Lock()
	r.calls = append(r.calls, len(subs))
	r.mu.Unlock()
	if r.gate != nil {
		r.once.Do(func() {
			close(r.entered)
			<-r.gate
		})
	}
	return r.st.SubmitGuarded(ctx, ctxID, subs, guard)
}

func (r *recordingSubmit) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.calls...)
}

func shSub(actor string, script string) store.Submission {
	return store.Submission{Job: &model.Job{CallerID: 2, Script: script, ScriptType: "sh"}, Actor: actor}
}

// addConcurrently submits jobs "echo <i>" for i below n, each from its own goroutine;
// wait waits for their outcomes, started is closed once every goroutine is under way.
func addConcurrently(g *submitGroups, n int) (out []store.Submitted, errs []error, started <-chan struct{}, wait func()) {
	out, errs = make([]store.Submitted, n), make([]error, n)
	var wg, begun sync.WaitGroup
	for i := range n {
		wg.Add(1)
		begun.Add(1)
		go func() {
			defer wg.Done()
			begun.Done()
			out[i], errs[i] = g.add(context.Background(), 1, nil, shSub("2", "echo "+strconv.Itoa(i)))
		}()
	}
	all := make(chan struct{})
	go func() { begun.Wait(); close(all) }()
	return out, errs, all, wg.Wait
}

// Many concurrent single submissions: each caller gets its own job, every job is
// stored with its own script, and submissions that arrive while a store call runs
// share the next one.
func TestSubmitGroupsConcurrent(t *testing.T) {
	srv, st := submitStore(t)
	rec := heldSubmit(st)
	g := newSubmitGroups(rec.submit, st.ServerFor, maxGroupJobs, 1, nil)
	defer g.shutdown()
	defer rec.open() // before shutdown, which waits for the held call
	const n = 200
	out, errs, started, wait := addConcurrently(g, n)
	// The first call is held until every caller is under way: the others gather.
	waitClosed(t, "the first store call", rec.entered)
	waitClosed(t, "every caller", started)
	rec.open()
	wait()
	rdb := srv.Client(t, 1)
	ids := map[uint32]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("submission %d: %v", i, errs[i])
		}
		j := out[i].Job
		if out[i].Existing || ids[j.ID] {
			t.Fatalf("submission %d: job %d (existing %v) is not its own", i, j.ID, out[i].Existing)
		}
		ids[j.ID] = true
		if got := rdb.HGet(context.Background(), keys.Job(2, j.ID), "script").Val(); got != "echo "+strconv.Itoa(i) {
			t.Errorf("job 2:%d holds %q; want %q", j.ID, got, "echo "+strconv.Itoa(i))
		}
	}
	sizes, total, largest := rec.sizes(), 0, 0
	for _, s := range sizes {
		total += s
		largest = max(largest, s)
	}
	if total != n || largest < 2 || largest > maxGroupJobs {
		t.Errorf("store calls of %v jobs: want %d jobs in all, groups of 2 to %d", sizes, n, maxGroupJobs)
	}
	if l := rdb.LLen(context.Background(), keys.Queue("sh")).Val(); l != n {
		t.Errorf("queue:sh holds %d jobs; want %d", l, n)
	}
}

// One group: a job no runner serves fails alone (the others are stored, each with its
// own outcome), and two jobs with one unique_key in one store call are one job.
func TestSubmitGroupsOutcomes(t *testing.T) {
	srv, st := submitStore(t)
	rec := &recordingSubmit{st: st}
	g := newSubmitGroups(rec.submit, st.ServerFor, maxGroupJobs, 1, nil)
	defer g.shutdown()
	ctx := context.Background()
	item := func(sub store.Submission) *groupedSub {
		return &groupedSub{ctxID: 1, sub: sub, chosen: sub.Job.ID != 0}
	}
	unique := func(s store.Submission, key string) store.Submission {
		s.UniqueKey, s.UniqueTTL = key, time.Minute
		return s
	}
	py := shSub("2", "print(1)")
	py.Job.ScriptType = "py"
	chosen := shSub("2", "echo chosen")
	chosen.Job.ID = 4242
	out, errs := g.store(ctx, []*groupedSub{item(shSub("2", "echo a")), item(py), item(unique(shSub("2", "echo u1"), "u")),
		item(unique(shSub("2", "echo u2"), "u")), item(chosen)})
	var ve *model.ValidationError
	if !errors.As(errs[1], &ve) || ve.Field != "script_type" {
		t.Errorf("the job no runner serves: %v", errs[1])
	}
	for _, i := range []int{0, 2, 3, 4} {
		if errs[i] != nil {
			t.Fatalf("job %d of the group: %v", i, errs[i])
		}
	}
	if out[0].Existing || out[2].Existing || !out[3].Existing || out[3].Job.ID != out[2].Job.ID || out[4].Job.ID != 4242 {
		t.Errorf("outcomes: %+v %+v %+v %+v", out[0], out[2], out[3], out[4])
	}
	if got := rec.sizes(); len(got) != 6 || got[0] != 5 {
		t.Errorf("store calls %v; want the group of 5, then each job alone", got)
	}

	// Without a refusal: one store call, in which the second job of a unique_key
	// names the first.
	out, errs = g.store(ctx, []*groupedSub{item(unique(shSub("2", "echo v1"), "v")), item(unique(shSub("2", "echo v2"), "v"))})
	if errs[0] != nil || errs[1] != nil || out[0].Existing || !out[1].Existing || out[1].Job.ID != out[0].Job.ID || out[1].Job.Script != "echo v1" {
		t.Fatalf("one unique_key twice in one call: %+v %v, %+v %v", out[0], errs[0], out[1], errs[1])
	}
	if got := rec.sizes(); len(got) != 7 || got[6] != 2 {
		t.Errorf("store calls %v; want the last of 2 jobs", got)
	}
	if n := srv.Client(t, 1).LLen(ctx, keys.Queue("sh")).Val(); n != 4 {
		t.Errorf("queue:sh holds %d jobs; want 4 (a, u1, 4242, v1)", n)
	}
}

// shutdown answers every submission that joined before it (stored) and refuses those
// after it; a refused submission stored nothing.
func TestSubmitGroupsShutdown(t *testing.T) {
	srv, st := submitStore(t)
	rec := heldSubmit(st)
	g := newSubmitGroups(rec.submit, st.ServerFor, maxGroupJobs, 1, nil)
	const n = 50
	_, errs, _, wait := addConcurrently(g, n)
	waitClosed(t, "the first store call", rec.entered)
	closed := make(chan struct{})
	go func() { g.shutdown(); close(closed) }()
	rec.open()
	<-closed
	wait()
	stored := 0
	for i := range n {
		switch {
		case errs[i] == nil:
			stored++
		case errors.Is(errs[i], errShuttingDown):
		default:
			t.Errorf("submission %d: %v", i, errs[i])
		}
	}
	if stored == 0 {
		t.Error("nothing was stored: the held call's job at least was")
	}
	if l := srv.Client(t, 1).LLen(context.Background(), keys.Queue("sh")).Val(); l != int64(stored) {
		t.Errorf("queue:sh holds %d jobs; %d submissions were answered as stored", l, stored)
	}
	if _, err := g.add(context.Background(), 1, nil, shSub("2", "echo late")); !errors.Is(err, errShuttingDown) {
		t.Errorf("a submission after shutdown: %v", err)
	}
}

// Each Redis server has its own group commit: while a store call to one server is
// held, a submission to a context of another server is stored and answered.
func TestSubmitGroupsPerServer(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{URL: a.URL, Placement: "2-2=" + b.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []uint32{1, 2} {
		if _, _, err := st.CreateContext(ctx, &model.Context{ID: id, Admins: []uint32{1}}, "t"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.CreateRunner(ctx, id, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "t"); err != nil {
			t.Fatal(err)
		}
		db, err := st.Ctx(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.AnnounceScriptTypes(ctx, 1, []model.ScriptType{"sh"}); err != nil {
			t.Fatal(err)
		}
	}
	held, release := make(chan struct{}), make(chan struct{})
	g := newSubmitGroups(func(ctx context.Context, ctxID uint32, subs []store.Submission, guard *store.ContextGuard) ([]store.Submitted, error) {
		if ctxID == 1 {
			close(held)
			<-release
		}
		return st.SubmitGuarded(ctx, ctxID, subs, guard)
	}, st.ServerFor, maxGroupJobs, 1, nil)
	defer g.shutdown()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free() // before shutdown, which waits for the held call
	first := make(chan error, 1)
	go func() {
		_, err := g.add(ctx, 1, nil, shSub("1", "echo on a"))
		first <- err
	}()
	<-held
	done := make(chan error, 1)
	go func() {
		_, err := g.add(ctx, 2, nil, shSub("1", "echo on b"))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a submission to another server waited for the held one")
	}
	free()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := b.Client(t, 2).LLen(ctx, keys.Queue("sh")).Val(); n != 1 {
		t.Errorf("context 2 (server b) has %d requests; want 1", n)
	}
}

// partsBy parts indexes by key, each part in order, the parts in the order of their
// first index; all of one key (a stream's batch of one context) in two allocations,
// without a map.
func TestPartsBy(t *testing.T) {
	keys := []string{"a", "b", "a", "c", "b", "a"}
	got := partsBy(len(keys), func(i int) string { return keys[i] })
	if want := [][]int{{0, 2, 5}, {1, 4}, {3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("parts %v, want %v", got, want)
	}
	if got := partsBy(0, func(i int) string { return keys[i] }); len(got) != 0 {
		t.Fatalf("no indexes: parts %v", got)
	}
	one := func(int) uint32 { return 7 }
	if got := partsBy(16, one); len(got) != 1 || len(got[0]) != 16 || got[0][15] != 15 {
		t.Fatalf("one key: parts %v", got)
	}
	if n := testing.AllocsPerRun(50, func() { _ = partsBy(16, one) }); n > 2 {
		t.Fatalf("16 indexes of one key: %.0f allocations, want 2", n)
	}
}
