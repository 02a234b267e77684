package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// submitInflight bounds the groups of one Redis server being stored at once (the
// default of --submit-inflight). One: on two shared cores a second group in flight
// halves the groups and costs more CPU per job than it saves in waiting
// (docs/benchmarks.md); a machine whose round trip, not its CPU, bounds the rate may
// set more.
const submitInflight = 1

// submitFunc stores and dispatches jobs of one context in one step (store.SubmitGuarded).
type submitFunc func(ctx context.Context, ctxID uint32, subs []store.Submission, guard *store.ContextGuard) ([]store.Submitted, error)

// errShuttingDown refuses a submission that arrives after shutdown began.
var errShuttingDown = &apiError{Code: codeUnavailable, Msg: "unavailable: supervisor-daemon is shutting down; retry on another replica or after its restart",
	Data: map[string]any{"retry_after_ms": int64(1000)}}

// submitGroups is the group commit of single submissions (job.submit, job.run), on
// lib/groupcommit: concurrent submissions are gathered by one goroutine (per Redis
// server, serverCommits) into groups, and it stores a group, up to maxJobs jobs, in one store call per
// context (one round trip: a run of lua/submit.lua, which takes the jobs in order: a
// unique_key or a chosen id that an earlier job of the group took names that job) as
// soon as fewer than --submit-inflight groups of that server are being stored: no timer,
// no wait when idle; the next group is gathered and its call sent while Redis runs
// the previous one (groups stored side by side have no order between them: their
// callers did not wait for each other). A caller
// is answered only after the call that stored its job returned (kill -9 safe: nothing
// is acknowledged before it is stored). Each caller gets its own outcome: when the store
// refuses a group for one job's sake (a job no runner serves, a chosen id with other
// content), the group's jobs are submitted again one by one.
type submitGroups struct {
	submit   submitFunc
	serverOf func(ctxID uint32) *store.Server
	timeout  time.Duration       // of one group's store calls
	sizes    prometheus.Observer // jobs per store call; nil: not observed
	commits  *serverCommits[*groupedSub, store.Submitted]
}

// groupedSub is one submission of a group.
type groupedSub struct {
	ctxID  uint32
	guard  *store.ContextGuard
	sub    store.Submission
	chosen bool // the caller chose the job's id (else it is reserved at each try)
}

// newSubmitGroups makes the group commit: one per Redis server (serverOf names the
// server of a context), up to maxJobs jobs a group, inflight groups stored at once. shutdown stops it.
func newSubmitGroups(submit submitFunc, serverOf func(ctxID uint32) *store.Server, maxJobs, inflight int, sizes prometheus.Observer) *submitGroups {
	g := &submitGroups{submit: submit, serverOf: serverOf, timeout: 30 * time.Second, sizes: sizes}
	g.commits = newServerCommits(g.store, maxJobs, inflight)
	return g
}

// shutdown stores what was submitted, answers its callers and refuses what comes
// after (errShuttingDown).
func (g *submitGroups) shutdown() { g.commits.shutdown() }

// add submits one job of context ctxID in the next group and returns its outcome.
// ctx bounds the wait to join a group; once in one, the job's outcome is awaited
// (the group's store call has a context of its own).
func (g *submitGroups) add(ctx context.Context, ctxID uint32, guard *store.ContextGuard, sub store.Submission) (store.Submitted, error) {
	return g.commits.do(ctx, g.serverOf(ctxID), &groupedSub{ctxID: ctxID, guard: guard, sub: sub, chosen: sub.Job.ID != 0})
}

// groupEntry is one job of addMany: a submission of context ctxID under guard.
type groupEntry struct {
	ctxID uint32
	guard *store.ContextGuard
	sub   store.Submission
}

// addMany is add for several jobs at once (a stream's batch message): they join the
// next group together, each with its own outcome, in order; the jobs of several Redis
// servers go to each server's group commit side by side.
func (g *submitGroups) addMany(ctx context.Context, in []groupEntry) ([]store.Submitted, []error) {
	out, errs := make([]store.Submitted, len(in)), make([]error, len(in))
	byServer := partsBy(len(in), func(i int) *store.Server { return g.serverOf(in[i].ctxID) })
	one := func(idx []int) {
		items, subs := make([]*groupedSub, len(idx)), make([]groupedSub, len(idx)) // one allocation for the items
		for n, i := range idx {
			e := in[i]
			subs[n] = groupedSub{ctxID: e.ctxID, guard: e.guard, sub: e.sub, chosen: e.sub.Job.ID != 0}
			items[n] = &subs[n]
		}
		res, rerrs := g.commits.doMany(ctx, g.serverOf(in[idx[0]].ctxID), items)
		for n, i := range idx {
			out[i], errs[i] = res[n], rerrs[n]
		}
	}
	if len(byServer) == 1 {
		one(byServer[0])
		return out, errs
	}
	var wg sync.WaitGroup
	for _, idx := range byServer {
		wg.Add(1)
		go func() { defer wg.Done(); one(idx) }()
	}
	wg.Wait()
	return out, errs
}

// store stores a group: one store call per context and guard, those of several
// contexts side by side.
func (g *submitGroups) store(ctx context.Context, items []*groupedSub) ([]store.Submitted, []error) {
	out, errs := make([]store.Submitted, len(items)), make([]error, len(items))
	parts := splitGroup(items)
	if len(parts) == 1 {
		g.flush(ctx, items, parts[0], out, errs)
		return out, errs
	}
	var wg sync.WaitGroup
	for _, idx := range parts {
		wg.Add(1)
		go func() { defer wg.Done(); g.flush(ctx, items, idx, out, errs) }()
	}
	wg.Wait()
	return out, errs
}

// splitGroup parts a group by context and guard: the indexes of each part, in order.
func splitGroup(items []*groupedSub) [][]int {
	type part struct {
		ctxID uint32
		guard *store.ContextGuard
	}
	return partsBy(len(items), func(i int) part { return part{items[i].ctxID, items[i].guard} })
}

// partsBy parts the indexes 0..n-1 by key: each part's indexes in order, the parts in
// the order of their first index. All of one key (the usual case: one context, one
// Redis server) they are one part, made without a map (its growing buckets were ~10
// allocations a call).
func partsBy[K comparable](n int, key func(i int) K) [][]int {
	if n > 0 { // one key (a stream's batch of one context, a group of one): no map
		first, one := key(0), true
		for i := 1; i < n && one; i++ {
			one = key(i) == first
		}
		if one {
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			return [][]int{all}
		}
	}
	var order []K
	byKey := map[K][]int{}
	for i := range n {
		k := key(i)
		if byKey[k] == nil {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	parts := make([][]int, len(order))
	for i, k := range order {
		parts[i] = byKey[k]
	}
	return parts
}

// flush stores the items at idx (one context, one guard) in one call, their outcomes
// into out and errs.
func (g *submitGroups) flush(ctx context.Context, items []*groupedSub, idx []int, out []store.Submitted, errs []error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	first := items[idx[0]]
	subs := make([]store.Submission, len(idx))
	for n, i := range idx {
		subs[n] = items[i].sub
	}
	if g.sizes != nil {
		g.sizes.Observe(float64(len(subs)))
	}
	res, err := g.submit(ctx, first.ctxID, subs, first.guard)
	if err != nil && len(idx) > 1 && refusedForOneJob(err) {
		// Nothing of the group was stored: each job on its own, for its own outcome.
		for _, i := range idx {
			it := items[i]
			if !it.chosen {
				it.sub.Job.ID = 0
			}
			one, err := g.submit(ctx, it.ctxID, []store.Submission{it.sub}, it.guard)
			if err == nil {
				out[i] = one[0]
			}
			errs[i] = err
		}
		return
	}
	for n, i := range idx {
		if err == nil {
			out[i] = res[n]
		}
		errs[i] = err
	}
}

// refusedForOneJob: the store refused a whole call, storing nothing, because of one
// of its jobs (a job no runner serves, a chosen id with other content, a job that
// does not validate).
func refusedForOneJob(err error) bool {
	var ve *model.ValidationError
	var ee *store.ExistsError
	return errors.As(err, &ve) || errors.As(err, &ee)
}
