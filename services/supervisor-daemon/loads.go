package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hero-coordinator/hero/lib/groupcommit"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// endedLoads reads the jobs that job.run calls return once their jobs ended, on
// lib/groupcommit: the calls that one done notice wakes (a runner's finish tells the
// ends of the runs it wrote together in one notice) read their jobs in one round trip
// per context (a pipeline of HGETALLs) instead of one each. One group commit per
// Redis server, started at its first read; no timer: a read alone goes at once.
type endedLoads struct {
	st      *store.Store
	timeout time.Duration // of one group's reads

	mu       sync.Mutex
	byServer map[*store.Server]*groupcommit.Committer[model.JobRef, *model.Job]
	closed   bool
}

func newEndedLoads(st *store.Store) *endedLoads {
	return &endedLoads{st: st, timeout: 30 * time.Second, byServer: map[*store.Server]*groupcommit.Committer[model.JobRef, *model.Job]{}}
}

// load reads job ref, in the next group of its server's reads.
func (l *endedLoads) load(ctx context.Context, ref model.JobRef) (*model.Job, error) {
	srv := l.st.ServerFor(ref.ContextID)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errShuttingDown
	}
	c := l.byServer[srv]
	if c == nil {
		c = groupcommit.New(groupcommit.Params[model.JobRef, *model.Job]{Fn: l.read, Max: maxGroupJobs})
		l.byServer[srv] = c
	}
	l.mu.Unlock()
	j, err := c.Do(ctx, ref)
	if errors.Is(err, groupcommit.ErrClosed) {
		return nil, errShuttingDown
	}
	return j, err
}

// read reads a group's jobs: one pipeline per context.
func (l *endedLoads) read(ctx context.Context, refs []model.JobRef) ([]*model.Job, []error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	out, errs := make([]*model.Job, len(refs)), make([]error, len(refs))
	byCtx := map[uint32][]int{}
	var order []uint32
	for i, r := range refs {
		if byCtx[r.ContextID] == nil {
			order = append(order, r.ContextID)
		}
		byCtx[r.ContextID] = append(byCtx[r.ContextID], i)
	}
	for _, c := range order {
		idx := byCtx[c]
		db, err := l.st.Ctx(c)
		if err != nil {
			for _, i := range idx {
				errs[i] = err
			}
			continue
		}
		part := make([]model.JobRef, len(idx))
		for n, i := range idx {
			part[n] = refs[i]
		}
		jobs, jerrs := db.LoadJobRefs(ctx, part)
		for n, i := range idx {
			out[i], errs[i] = jobs[n], jerrs[n]
		}
	}
	return out, errs
}

// shutdown answers the reads waiting and refuses what comes after (errShuttingDown).
func (l *endedLoads) shutdown() {
	l.mu.Lock()
	l.closed = true
	all := make([]*groupcommit.Committer[model.JobRef, *model.Job], 0, len(l.byServer))
	for _, c := range l.byServer {
		all = append(all, c)
	}
	l.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}
