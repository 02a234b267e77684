package main

import (
	"context"
	"errors"
	"sync"

	"github.com/hero-coordinator/hero/lib/groupcommit"
	"github.com/hero-coordinator/hero/lib/store"
)

// serverCommits keeps one lib/groupcommit per Redis server, started at the server's
// first item, so that a slow server holds back only its own contexts' items; the
// group commits of single submissions (submitGroups) and of job.run's reads
// (endedLoads) run on it. shutdown handles what was handed in and refuses what comes
// after (errShuttingDown).
type serverCommits[T, R any] struct {
	fn       groupcommit.Func[T, R]
	max      int // items per group
	inflight int // groups handled at once per server

	mu       sync.Mutex
	byServer map[*store.Server]*groupcommit.Committer[T, R]
	closed   bool
}

func newServerCommits[T, R any](fn groupcommit.Func[T, R], max, inflight int) *serverCommits[T, R] {
	return &serverCommits[T, R]{fn: fn, max: max, inflight: inflight, byServer: map[*store.Server]*groupcommit.Committer[T, R]{}}
}

// do hands item in to the next group of server srv and returns its result. ctx bounds
// the wait to join a group; once in one, its result is awaited.
func (s *serverCommits[T, R]) do(ctx context.Context, srv *store.Server, item T) (R, error) {
	var zero R
	c := s.committer(srv)
	if c == nil {
		return zero, errShuttingDown
	}
	out, err := c.Do(ctx, item)
	if errors.Is(err, groupcommit.ErrClosed) {
		return zero, errShuttingDown
	}
	return out, err
}

// doMany is do for several items of server srv at once (groupcommit's DoMany: they
// join the same group, and their caller waits once): each its own result and error.
func (s *serverCommits[T, R]) doMany(ctx context.Context, srv *store.Server, items []T) ([]R, []error) {
	c := s.committer(srv)
	if c == nil {
		errs := make([]error, len(items))
		for i := range errs {
			errs[i] = errShuttingDown
		}
		return make([]R, len(items)), errs
	}
	out, errs := c.DoMany(ctx, items)
	for i, err := range errs {
		if errors.Is(err, groupcommit.ErrClosed) {
			errs[i] = errShuttingDown
		}
	}
	return out, errs
}

// committer is the group commit of server srv, started at its first item; nil after
// shutdown.
func (s *serverCommits[T, R]) committer(srv *store.Server) *groupcommit.Committer[T, R] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	c := s.byServer[srv]
	if c == nil {
		c = groupcommit.New(groupcommit.Params[T, R]{Fn: s.fn, Max: s.max, Inflight: s.inflight})
		s.byServer[srv] = c
	}
	return c
}

func (s *serverCommits[T, R]) shutdown() {
	s.mu.Lock()
	s.closed = true
	all := make([]*groupcommit.Committer[T, R], 0, len(s.byServer))
	for _, c := range s.byServer {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}
