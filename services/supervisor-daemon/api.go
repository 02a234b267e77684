package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The service and what every API area shares: the authorization of a call in a
// context, the parameters of several areas and one page of a list. Each area's
// methods and their gRPC adapters are in its file (actors.go, contexts.go,
// runners.go, jobs.go, jobcreate.go, submit.go, flows.go, dlq.go, messages.go,
// events.go, stream.go, operator.go, dispatcher.go); jsonrpc.go holds the one
// method table.

// service implements the public API once: JSON-RPC (the method table in jsonrpc.go)
// and gRPC (each area's adapters) decode requests into its parameter types and call
// it.
type service struct {
	store     *store.Store
	scheduler herov1.SchedulerClient
	waiter    *waiter
	// jobDone: coord:jobdone, followed while job.run calls wait (nil: always, by
	// whoever feeds waiter)
	jobDone    *onDemandChannel
	logs       *waiter // appends to the logs the console tails (coord:logappend)
	log        zerolog.Logger
	runMargin  time.Duration
	dispatcher *dispatcherService
	secrets    *operatorSecrets
	metrics    *apiMetrics
	contexts   *contextCache // the submissions' authorizations (guarded: contextCache)
	groups     *submitGroups // the group commit of single submissions; nil: none
	loads      *endedLoads   // job.run's reads of ended jobs, grouped; nil: one read each
	// maxFlowJobs is --max-flow-jobs: the most jobs of one flow (flow.begin,
	// flow.create), checked before anything is stored.
	maxFlowJobs int
	jobLists    *jobListCache // flow.dag's pages: the job lists of large flows; nil: read each time
}

type idParams struct {
	ID uint32 `json:"id"`
}

type ctxIDParams struct {
	ContextID uint32 `json:"context_id"`
	ID        uint32 `json:"id"`
}

type jobRefParams struct {
	ContextID uint32 `json:"context_id"`
	CallerID  uint32 `json:"caller_id"`
	ID        uint32 `json:"id"`
	Offset    int64  `json:"offset"`
}

type deleteParams struct {
	ContextID uint32 `json:"context_id"`
	ID        uint32 `json:"id"`
	Force     bool   `json:"force"`
}

type deleteResult struct {
	Deleted bool `json:"deleted"`
}

type noParams struct{}

type listParams struct {
	ContextID uint32 `json:"context_id"`
	Limit     int    `json:"limit"`
	Cursor    string `json:"cursor"`
	Status    string `json:"status"`
}

type listResult[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

func requireOperator(p Principal, method string) error {
	if !p.Operator {
		return permissionDenied("%s needs the operator secret (Authorization: Bearer <secret>)", method)
	}
	return nil
}

// authorize loads a context and checks the principal's role in it.
func (s *service) authorize(ctx context.Context, p Principal, ctxID uint32, need Role, method string) (*model.Context, *store.DB, error) {
	db, err := contextDB(s.store, ctxID)
	if err != nil {
		return nil, nil, err
	}
	c, err := s.store.LoadContext(ctx, ctxID)
	if err != nil {
		return nil, nil, err
	}
	if err := checkRole(p, c, need, method); err != nil {
		return nil, nil, err
	}
	return c, db, nil
}

// authorizeCached is authorize against the context cache (fresh: read it now); the
// caller guards what it writes with the entry's guard (contextCache). loaded says
// that the context was read now.
func (s *service) authorizeCached(ctx context.Context, p Principal, ctxID uint32, need Role, method string, fresh bool) (*cachedContext, *store.DB, bool, error) {
	db, err := contextDB(s.store, ctxID)
	if err != nil {
		return nil, nil, true, err
	}
	e, loaded, err := s.contexts.get(ctx, ctxID, fresh)
	if err != nil {
		return nil, nil, true, err
	}
	if err := checkRole(p, e.c, need, method); err != nil {
		return nil, nil, loaded, err
	}
	return e, db, loaded, nil
}

// contextDB is the DB of context ctxID, or why there is none.
func contextDB(st *store.Store, ctxID uint32) (*store.DB, error) {
	if ctxID == 0 {
		return nil, invalidParams("context_id", "context_id must be at least 1 (context 0 would share DB 0 with the actors)")
	}
	db, err := st.Ctx(ctxID)
	if err != nil {
		return nil, invalidParams("context_id", "%v", err)
	}
	return db, nil
}

// checkRole refuses a principal below need in context c.
func checkRole(p Principal, c *model.Context, need Role, method string) error {
	if r := role(p, c); r < need {
		return permissionDenied("actor %d is %s in context %d; %s needs %s", p.Actor, roleName(r), c.ID, method, need)
	}
	return nil
}

func roleName(r Role) string {
	if r == RoleNone {
		return "not a member"
	}
	return "a " + r.String()
}

// callerFor checks the caller_id of a created object: it must be the requesting actor
// (operators may name any actor). 0 means the requester.
func callerFor(p Principal, callerID uint32, object string) (uint32, error) {
	if callerID == 0 {
		if p.Actor == 0 {
			return 0, invalidParams("caller_id", "%s.caller_id must be set when an operator without an actor creates it", object)
		}
		return p.Actor, nil
	}
	if p.Actor != 0 && callerID != p.Actor && !p.Operator {
		return 0, permissionDenied("%s.caller_id %d is not the requesting actor %d", object, callerID, p.Actor)
	}
	return callerID, nil
}

func nilIfZero(l *model.JobLimits) *model.JobLimits {
	if l.IsZero() {
		return nil
	}
	return l
}

// listPage answers a list method (runner.list, job.list, flow.list, dlq.list): the
// caller a reader of the context, one page of index, newest first, from in.Cursor,
// and its members loaded (load: a method of store.DB, or one like it; a member gone
// meanwhile is left out). index names the sorted set to page, or why in.Status names
// none (byStatus).
func listPage[T any](ctx context.Context, s *service, p Principal, in listParams, method string, index func() (string, error),
	load func(db *store.DB, ctx context.Context, members []string) ([]T, error)) (*listResult[T], error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, method)
	if err != nil {
		return nil, err
	}
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return nil, err
	}
	set, err := index()
	if err != nil {
		return nil, err
	}
	members, next, err := db.Page(ctx, set, in.Cursor, limit)
	if err != nil {
		return nil, invalidParams("cursor", "%v", err)
	}
	items, err := load(db, ctx, members)
	if err != nil {
		return nil, err
	}
	if items == nil {
		items = []T{}
	}
	return &listResult[T]{Items: items, NextCursor: next}, nil
}

// allOf is the index of a list without a status filter.
func allOf(index string) func() (string, error) {
	return func() (string, error) { return index, nil }
}

// byStatus is the index of a list filtered by status (parse checks it), or the whole
// index when status is empty.
func byStatus[S ~string](index, status string, parse func(string) (S, error)) func() (string, error) {
	return func() (string, error) {
		if status == "" {
			return index, nil
		}
		st, err := parse(status)
		if err != nil {
			return "", invalidParams("status", "%v", err)
		}
		return keys.StatusIndex(index, string(st)), nil
	}
}

// pbItems converts a page's items for a gRPC list response.
func pbItems[T, P any](items []T, conv func(T) P) []P {
	var out []P
	for _, it := range items {
		out = append(out, conv(it))
	}
	return out
}

func pageLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return 100, nil
	case limit < 0 || limit > 1000:
		return 0, invalidParams("limit", "limit %d is not between 1 and 1000", limit)
	}
	return limit, nil
}
