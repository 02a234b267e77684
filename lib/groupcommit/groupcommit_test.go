package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitFor waits until cond holds (it watches another goroutine's progress) or fails.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Items that arrive while a group is being handled make up the next group, whole.
func TestItemsArrivingDuringAGroupJoinTheNext(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	c := New(Params[int, int]{Max: 64, Fn: func(_ context.Context, items []int) ([]int, []error) {
		mu.Lock()
		groups = append(groups, append([]int(nil), items...))
		first := len(groups) == 1
		mu.Unlock()
		if first {
			<-release
		}
		out := make([]int, len(items))
		for i, v := range items {
			out[i] = v * 10
		}
		return out, make([]error, len(items))
	}})
	defer c.Close()

	var wg sync.WaitGroup
	results := make([]int, 11)
	do := func(i int) {
		defer wg.Done()
		v, err := c.Do(context.Background(), i)
		if err != nil {
			t.Errorf("item %d: %v", i, err)
		}
		results[i] = v
	}
	wg.Add(1)
	go do(0)
	waitFor(t, "the first group", func() bool { mu.Lock(); defer mu.Unlock(); return len(groups) == 1 })
	for i := 1; i <= 10; i++ {
		wg.Add(1)
		go do(i)
	}
	waitFor(t, "ten queued items", func() bool { return len(c.ch) == 10 })
	close(release)
	wg.Wait()
	if len(groups) != 2 || len(groups[0]) != 1 || len(groups[1]) != 10 {
		t.Fatalf("groups %v: want [0] then the ten others together", groups)
	}
	for i, v := range results {
		if v != i*10 {
			t.Fatalf("item %d got %d: results went to the wrong caller", i, v)
		}
	}
}

// Items handed in at the same moment (callers woken together) go in one group, not a
// group each: the committer lets the callers ready to run hand theirs in before it
// takes the group.
func TestItemsHandedInTogetherMakeOneGroup(t *testing.T) {
	// One P: the callers run one after the other, as on a busy service (a committer
	// that took its group at once would leave the first item alone in it).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var mu sync.Mutex
	var sizes []int
	c := New(Params[int, int]{Max: 64, Fn: func(_ context.Context, items []int) ([]int, []error) {
		mu.Lock()
		sizes = append(sizes, len(items))
		mu.Unlock()
		return items, make([]error, len(items))
	}})
	defer c.Close()
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range 16 {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			if _, err := c.Do(context.Background(), i); err != nil {
				t.Error(err)
			}
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	// Mostly one group; the committer may resume before the last callers ran (the
	// scheduler's fairness), and that leaves them a second (without the yield: 16).
	if len(sizes) > 3 {
		t.Fatalf("16 items handed in together made groups of %v, want one to three", sizes)
	}
}

// A group never exceeds Max; per-item errors reach their own callers; a short answer
// fails the items it leaves out.
func TestMaxErrorsAndShortAnswers(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	c := New(Params[int, string]{Max: 3, Fn: func(_ context.Context, items []int) ([]string, []error) {
		mu.Lock()
		sizes = append(sizes, len(items))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release
		}
		out := make([]string, 0, len(items))
		errs := make([]error, len(items))
		for i, v := range items {
			if v == 99 {
				return out, errs[:i] // stop short at 99
			}
			if v%2 == 1 {
				errs[i] = fmt.Errorf("odd %d", v)
			}
			out = append(out, fmt.Sprint(v))
		}
		return out, errs
	}})
	defer c.Close()
	var wg sync.WaitGroup
	type answer struct {
		v   string
		err error
	}
	answers := sync.Map{}
	do := func(i int) {
		defer wg.Done()
		v, err := c.Do(context.Background(), i)
		answers.Store(i, answer{v, err})
	}
	wg.Add(1)
	go do(0)
	waitFor(t, "the first group", func() bool { mu.Lock(); defer mu.Unlock(); return len(sizes) == 1 })
	for _, i := range []int{1, 2, 3, 4, 6} {
		wg.Add(1)
		go do(i)
	}
	waitFor(t, "five queued items", func() bool { return len(c.ch) == 5 })
	wg.Add(1)
	go do(99) // last in the queue: the answer that stops short at it leaves out no other
	waitFor(t, "six queued items", func() bool { return len(c.ch) == 6 })
	close(release)
	wg.Wait()
	for _, n := range sizes {
		if n > 3 {
			t.Fatalf("group sizes %v exceed Max 3", sizes)
		}
	}
	for _, i := range []int{0, 1, 2, 3, 4, 6, 99} {
		a, _ := answers.Load(i)
		got := a.(answer)
		switch {
		case i == 99:
			if got.err == nil {
				t.Fatalf("item 99 (left out of the answer) got %q and no error", got.v)
			}
		case i%2 == 1:
			if got.err == nil || got.err.Error() != fmt.Sprintf("odd %d", i) {
				t.Fatalf("item %d: error %v, want its own", i, got.err)
			}
		default:
			if got.err != nil || got.v != fmt.Sprint(i) {
				t.Fatalf("item %d: %q %v", i, got.v, got.err)
			}
		}
	}
}

// Close handles what was queued; Do after Close fails; a caller's context bounds its
// wait to get into a group.
func TestCloseAndContext(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	handled := 0
	c := New(Params[int, int]{Max: 1, Fn: func(_ context.Context, items []int) ([]int, []error) {
		select {
		case started <- struct{}{}:
			<-release
		default:
		}
		handled += len(items)
		return items, make([]error, len(items))
	}})
	go func() { _, _ = c.Do(context.Background(), 1) }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	// Fill the queue, then one more caller that gives up.
	queued := make(chan error, cap(c.ch))
	for i := 0; i < cap(c.ch); i++ {
		go func() { _, err := c.Do(context.Background(), 2); queued <- err }()
	}
	waitFor(t, "a full queue", func() bool { return len(c.ch) == cap(c.ch) })
	blocked := make(chan error, 1)
	go func() { _, err := c.Do(ctx, 3); blocked <- err }()
	cancel()
	if err := <-blocked; !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller whose context ended: %v", err)
	}
	close(release)
	for i := 0; i < cap(c.ch); i++ {
		if err := <-queued; err != nil {
			t.Fatalf("queued item: %v", err)
		}
	}
	c.Close()
	if handled != 1+cap(c.ch) {
		t.Fatalf("handled %d items, want %d", handled, 1+cap(c.ch))
	}
	if _, err := c.Do(context.Background(), 4); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
}

// DoMany's items go in one group when they fit (with the items queued before them),
// beyond Max in the next ones, each result and error to its own item, in order.
func TestDoManyGroupsItsItemsTogether(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	c := New(Params[int, int]{Max: 8, Fn: func(_ context.Context, items []int) ([]int, []error) {
		mu.Lock()
		groups = append(groups, append([]int(nil), items...))
		first := len(groups) == 1
		mu.Unlock()
		if first {
			<-release
		}
		out, errs := make([]int, len(items)), make([]error, len(items))
		for i, v := range items {
			out[i] = v * 10
			if v%5 == 0 {
				errs[i] = fmt.Errorf("five %d", v)
			}
		}
		return out, errs
	}})
	defer c.Close()
	go func() { _, _ = c.Do(context.Background(), -1) }()
	waitFor(t, "the first group", func() bool { mu.Lock(); defer mu.Unlock(); return len(groups) == 1 })
	items := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	type answer struct {
		res  []int
		errs []error
	}
	done := make(chan answer, 1)
	go func() { res, errs := c.DoMany(context.Background(), items); done <- answer{res, errs} }()
	waitFor(t, "twelve queued items", func() bool { return len(c.ch) == 12 })
	close(release)
	a := <-done
	for i, v := range items {
		if v%5 == 0 {
			if a.errs[i] == nil || a.errs[i].Error() != fmt.Sprintf("five %d", v) {
				t.Errorf("item %d: error %v, want its own", v, a.errs[i])
			}
			continue
		}
		if a.errs[i] != nil || a.res[i] != v*10 {
			t.Errorf("item %d: %d %v, want %d", v, a.res[i], a.errs[i], v*10)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(groups) != "[[-1] [1 2 3 4 5 6 7 8] [9 10 11 12]]" {
		t.Errorf("groups %v: want the twelve in two groups of at most 8, in order", groups)
	}
}

// A DoMany whose context ended while the queue is full hands nothing in: each item
// gets the context's error at once (nothing is left waiting); after Close, ErrClosed.
func TestDoManyContextAndClose(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	var handled []int
	c := New(Params[int, int]{Max: 1, Fn: func(_ context.Context, items []int) ([]int, []error) {
		select {
		case started <- struct{}{}:
			<-release
		default:
		}
		mu.Lock()
		handled = append(handled, items...)
		mu.Unlock()
		return items, make([]error, len(items))
	}})
	go func() { _, _ = c.Do(context.Background(), 0) }()
	<-started
	queued := make(chan error, cap(c.ch))
	for range cap(c.ch) {
		go func() { _, err := c.Do(context.Background(), 1); queued <- err }()
	}
	waitFor(t, "a full queue", func() bool { return len(c.ch) == cap(c.ch) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, errs := c.DoMany(ctx, []int{7, 8, 9})
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) || res[i] != 0 {
			t.Errorf("item %d of a DoMany whose context ended: %d %v, want the context's error", i, res[i], err)
		}
	}
	close(release)
	for range cap(c.ch) {
		if err := <-queued; err != nil {
			t.Fatalf("queued item: %v", err)
		}
	}
	c.Close()
	mu.Lock()
	for _, v := range handled {
		if v > 1 {
			t.Errorf("handled %v: an item of the DoMany that gave up was handled", handled)
		}
	}
	mu.Unlock()
	if _, errs := c.DoMany(context.Background(), []int{1, 2}); !errors.Is(errs[0], ErrClosed) || !errors.Is(errs[1], ErrClosed) {
		t.Errorf("DoMany after Close: %v", errs)
	}
}

// With Inflight 2, a second group is handled while the first is (each answered when
// its own call returns, the second first here); the items that arrive while both are
// wait for a free slot.
func TestInflightGroupsSideBySide(t *testing.T) {
	entered := make(chan []int, 6)
	release := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var mu sync.Mutex
	calls := 0
	c := New(Params[int, int]{Max: 64, Inflight: 2, Fn: func(_ context.Context, items []int) ([]int, []error) {
		mu.Lock()
		n := calls
		calls++
		mu.Unlock()
		entered <- append([]int(nil), items...)
		if n < len(release) {
			<-release[n]
		}
		out := make([]int, len(items))
		for i, v := range items {
			out[i] = v * 10
		}
		return out, make([]error, len(items))
	}})
	defer c.Close()
	results := make(chan [2]int, 6)
	do := func(i int) {
		v, err := c.Do(context.Background(), i)
		if err != nil {
			t.Errorf("item %d: %v", i, err)
		}
		results <- [2]int{i, v}
	}
	timeout := time.After(time.Minute)
	next := func(what string) []int {
		t.Helper()
		select {
		case g := <-entered:
			return g
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
		return nil
	}
	go do(0)
	if g := next("the first group"); fmt.Sprint(g) != "[0]" {
		t.Fatalf("first group %v; want [0]", g)
	}
	go do(1)
	if g := next("a second group beside the first"); fmt.Sprint(g) != "[1]" {
		t.Fatalf("second group %v; want [1]", g)
	}
	var wg sync.WaitGroup
	for i := 2; i <= 5; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); do(i) }()
	}
	// the four wait for a free slot; the second group's call returns first, and its
	// item is answered while the first group's call still waits
	close(release[1])
	got := map[int]int{}
	for got[1] == 0 {
		r := <-results
		if r[0] == 0 {
			t.Fatal("item 0 answered before its group's call returned")
		}
		got[r[0]] = r[1]
	}
	close(release[0])
	for len(got) < 6 {
		r := <-results
		got[r[0]] = r[1]
	}
	wg.Wait()
	for i := 0; i <= 5; i++ {
		if got[i] != i*10 {
			t.Fatalf("item %d got %d: results went to the wrong caller (%v)", i, got[i], got)
		}
	}
}

// With Beside, a group starts beside the ones being handled only while they hold at
// most Beside items: a small group goes at once; beside a large one the next group
// waits for it to return (a free slot is not enough) and takes in the items that
// arrive meanwhile.
func TestBesideStartsAGroupOnlyBesideSmallOnes(t *testing.T) {
	// One P: a caller hands in all its items before the committer runs, and a group
	// the committer admits is entered before the test goes on.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	type entry struct {
		items    []int
		returned int // groups whose call had returned when this one's began
	}
	entered := make(chan entry, 8)
	release := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	var mu sync.Mutex
	calls, returned := 0, 0
	c := New(Params[int, int]{Max: 64, Inflight: 2, Beside: 1, Fn: func(_ context.Context, items []int) ([]int, []error) {
		mu.Lock()
		n := calls
		calls++
		entered <- entry{append([]int(nil), items...), returned}
		mu.Unlock()
		if n < len(release) {
			<-release[n]
		}
		mu.Lock()
		returned++
		mu.Unlock()
		return items, make([]error, len(items))
	}})
	defer c.Close()
	freed := make([]bool, len(release))
	free := func(n int) { freed[n] = true; close(release[n]) }
	defer func() { // a failed check leaves no call waiting (Close waits for them)
		for n := range release {
			if !freed[n] {
				free(n)
			}
		}
	}()
	answered := make(chan int, 8)
	// handIn hands items in (one DoMany) from a goroutine of its own and returns once
	// that goroutine runs.
	handIn := func(items ...int) {
		running := make(chan struct{})
		go func() {
			close(running)
			_, errs := c.DoMany(context.Background(), items)
			for i, err := range errs {
				if err != nil {
					t.Errorf("item %d: %v", items[i], err)
				}
				answered <- items[i]
			}
		}()
		<-running
	}
	timeout := time.After(time.Minute)
	next := func(what string) entry {
		t.Helper()
		select {
		case e := <-entered:
			return e
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
		return entry{}
	}
	handIn(0)
	if e := next("the first group"); fmt.Sprint(e.items) != "[0]" {
		t.Fatalf("first group %v; want [0]", e.items)
	}
	// beside one item: at once
	handIn(1)
	if e := next("a group beside a small one"); fmt.Sprint(e.items) != "[1]" || e.returned != 0 {
		t.Fatalf("second group %+v; want [1] beside [0]", e)
	}
	// both slots taken: 2, 3 and 4 wait together, and go beside [0] when [1] returns
	handIn(2, 3, 4)
	waitFor(t, "the three taken", func() bool { return len(c.ch) == 0 })
	free(1)
	if e := next("the waiting group"); fmt.Sprint(e.items) != "[2 3 4]" || e.returned != 1 {
		t.Fatalf("third group %+v; want [2 3 4] beside [0], after [1] returned", e)
	}
	// beside [2 3 4] (three items) item 5 waits, even once [0]'s slot is free
	handIn(5)
	waitFor(t, "item 5 taken", func() bool { return len(c.ch) == 0 })
	free(0)
	for i := -1; i != 0; {
		select {
		case i = <-answered:
		case <-timeout:
			t.Fatal("timed out waiting for item 0's answer")
		}
	}
	// the committer saw the free slot (or, wrongly, started [5] in it)
	waitFor(t, "the committer to see [0]'s slot free", func() bool { return len(c.freed) == 0 || len(entered) > 0 })
	free(2)
	if e := next("the group after the large one"); fmt.Sprint(e.items) != "[5]" || e.returned != 3 {
		t.Fatalf("fourth group %+v; want [5] once [2 3 4] returned (3 calls returned)", e)
	}
}

// goroutineID is the id of the calling goroutine (the header of its stack trace).
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// With Inflight 2, the groups are handled on two goroutines that live as long as the
// Committer, not on a new goroutine per group (whose stack grew again in each call:
// the runner's finish spent ~4% of its CPU copying stacks).
func TestInflightGroupsOnLastingGoroutines(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	c := New(Params[int, int]{Max: 4, Inflight: 2, Fn: func(_ context.Context, items []int) ([]int, []error) {
		mu.Lock()
		seen[goroutineID()]++
		mu.Unlock()
		return make([]int, len(items)), make([]error, len(items))
	}})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if _, err := c.Do(context.Background(), w*100+i); err != nil {
					t.Errorf("item %d: %v", w*100+i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	c.Close()
	groups := 0
	for _, n := range seen {
		groups += n
	}
	if groups < 20 || len(seen) > 2 {
		t.Fatalf("%d groups handled on %d goroutines; want at least 20 groups on at most 2", groups, len(seen))
	}
}
