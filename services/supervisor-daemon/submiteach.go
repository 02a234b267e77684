package main

import (
	"context"
	"errors"
	"slices"

	"github.com/hero-coordinator/hero/lib/store"
)

// eachSubmit is one submission of a batch that submitEach handles as if it came alone.
type eachSubmit struct {
	ctx   context.Context // the submission's own
	tp    string          // its traceparent ("" when none)
	ctxID uint32
	item  submitItem
}

// submitEach submits each of in as jobSubmit would, one by one (method's checks, the
// group commit, an outcome of its own: one refused leaves the others as they are), but
// together: each context is authorized once for all its submissions (from the context
// cache, as each alone would be), and the jobs join the group commit together
// (addMany: the caller waits once for them all, not once per job). The submissions
// that submit would try again (their context changed under them, or a refusal met with
// a cached context) are tried again together, against their context read afresh, up to
// submitTries. It returns each submission's result or error, in order.
func (s *service) submitEach(ctx context.Context, p Principal, in []eachSubmit, method string) ([]*submitResult, []error) {
	out, errs := make([]*submitResult, len(in)), make([]error, len(in))
	pending := make([]int, len(in))
	for i := range pending {
		pending[i] = i
	}
	for try, fresh := 1, false; len(pending) > 0; try, fresh = try+1, true {
		pending = s.submitTry(ctx, p, in, pending, method, fresh, try, out, errs)
	}
	return out, errs
}

// submitTry is one try of submitEach for the submissions of in at pending, as submit's
// try number try (fresh: the contexts read now): their outcomes into out and errs, and
// the submissions to try again.
func (s *service) submitTry(ctx context.Context, p Principal, in []eachSubmit, pending []int, method string, fresh bool, try int,
	out []*submitResult, errs []error) (again []int) {
	type authorized struct {
		e      *cachedContext
		db     *store.DB
		loaded bool
		err    error
	}
	auths := map[uint32]*authorized{}
	entries := make([]groupEntry, 0, len(pending))
	at := make([]int, 0, len(pending)) // the submission of each entry
	for _, i := range pending {
		it := in[i]
		a := auths[it.ctxID]
		if a == nil {
			a = &authorized{}
			a.e, a.db, a.loaded, a.err = s.authorizeCached(ctx, p, it.ctxID, RoleExecutor, method, fresh)
			auths[it.ctxID] = a
		}
		err := a.err
		var sub store.Submission
		if err == nil {
			sub, err = submission(it.ctx, p, a.e.c, a.db, it.ctxID, it.item, 0, "", it.tp)
		}
		switch {
		case err != nil && !a.loaded && !fresh: // a refusal met with a cached context
			again = append(again, i)
		case err != nil:
			errs[i] = err
		default:
			entries = append(entries, groupEntry{ctxID: it.ctxID, guard: a.e.guard, sub: sub})
			at = append(at, i)
		}
	}
	res, rerrs := s.storeEach(ctx, entries)
	results := make([]submitResult, len(at)) // what out points to: one allocation for them all
	for n, i := range at {
		it, a, err := in[i], auths[in[i].ctxID], rerrs[n]
		switch {
		case err != nil && refusedForOneJob(err) && !a.loaded && !fresh:
			again = append(again, i)
		case errors.Is(err, store.ErrContextChanged):
			s.contexts.drop(it.ctxID, a.e)
			if try < submitTries {
				again = append(again, i)
			} else {
				errs[i] = contextChanged(it.ctxID, try)
			}
		case err != nil:
			errs[i] = err
		default:
			r := []store.Submitted{res[n]}
			if err := s.debounce(ctx, a.db, []submitItem{it.item}, r, p.Name()); err != nil {
				errs[i] = err
				continue
			}
			s.countSubmitted(r)
			results[n] = submitResult{Job: r[0].Job, Existing: r[0].Existing}
			out[i] = &results[n]
		}
	}
	slices.Sort(again) // in their order, as the group commit takes them
	return again
}

// storeEach stores each entry as storeSubmissions stores one job: through the group
// commit (all of them together), each with its own outcome.
func (s *service) storeEach(ctx context.Context, entries []groupEntry) ([]store.Submitted, []error) {
	if s.groups != nil {
		return s.groups.addMany(ctx, entries)
	}
	res, errs := make([]store.Submitted, len(entries)), make([]error, len(entries))
	for n, e := range entries {
		r, err := s.store.SubmitGuarded(ctx, e.ctxID, []store.Submission{e.sub}, e.guard)
		if err == nil {
			res[n] = r[0]
		}
		errs[n] = err
	}
	return res, errs
}
