package main

import (
	"context"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// endedLoads reads the jobs that job.run calls return once their jobs ended, on a
// group commit per Redis server (serverCommits): the calls that one done notice wakes
// (a runner's finish tells the ends of the runs it wrote together in one notice) read
// their jobs in one round trip per context (a pipeline of HGETALLs) instead of one
// each; no timer: a read alone goes at once.
type endedLoads struct {
	st      *store.Store
	timeout time.Duration // of one group's reads
	commits *serverCommits[model.JobRef, *model.Job]
}

func newEndedLoads(st *store.Store) *endedLoads {
	l := &endedLoads{st: st, timeout: 30 * time.Second}
	l.commits = newServerCommits(l.read, maxGroupJobs, 1)
	return l
}

// load reads job ref, in the next group of its server's reads.
func (l *endedLoads) load(ctx context.Context, ref model.JobRef) (*model.Job, error) {
	return l.commits.do(ctx, l.st.ServerFor(ref.ContextID), ref)
}

// read reads a group's jobs: one pipeline per context.
func (l *endedLoads) read(ctx context.Context, refs []model.JobRef) ([]*model.Job, []error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	out, errs := make([]*model.Job, len(refs)), make([]error, len(refs))
	for _, idx := range partsBy(len(refs), func(i int) uint32 { return refs[i].ContextID }) {
		db, err := l.st.Ctx(refs[idx[0]].ContextID)
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
func (l *endedLoads) shutdown() { l.commits.shutdown() }
