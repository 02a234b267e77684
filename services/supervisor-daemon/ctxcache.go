package main

import (
	"context"
	"sync"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// guardedFields are the fields of a context that a submission's authorization reads:
// the context's existence (id), the roles that may submit (admins, executors) and
// the most a job may ask for (job_max, checkLimits).
var guardedFields = []string{"id", "admins", "executors", "job_max"}

// contextCache keeps the contexts that job.submit, job.submit_batch and job.run
// authorize against, so that a submission does not read its context from Redis each
// time. A cached context is never trusted alone: the submission carries a guard of
// the fields its authorization read (guardedFields) and lua/submit.lua checks them in
// the step that writes the jobs; when one changed (an actor removed from executors,
// job_max lowered, the context deleted) nothing is written (store.ErrContextChanged),
// the entry is dropped and the call authorized again against the context as it is.
// A refusal met with a cached context (an actor added since, job_max raised) is also
// checked again against a fresh read. Entries older than maxAge are read again, which
// bounds the cache to the contexts in use.
type contextCache struct {
	load   func(ctx context.Context, id uint32) (*model.Context, map[string]string, error)
	maxAge time.Duration

	mu    sync.Mutex
	m     map[uint32]*cachedContext
	swept time.Time
}

// cachedContext is a context as one read saw it, with the guard of that reading.
type cachedContext struct {
	c     *model.Context // shared: read only
	guard *store.ContextGuard
	at    time.Time
}

func newContextCache(st *store.Store, maxAge time.Duration) *contextCache {
	return &contextCache{load: st.LoadContextHash, maxAge: maxAge, m: map[uint32]*cachedContext{}, swept: time.Now()}
}

// get returns context id, from the cache unless fresh is asked or the entry is older
// than maxAge; loaded says that it was read now.
func (cc *contextCache) get(ctx context.Context, id uint32, fresh bool) (e *cachedContext, loaded bool, err error) {
	now := time.Now()
	cc.mu.Lock()
	if now.Sub(cc.swept) > cc.maxAge {
		for k, v := range cc.m {
			if now.Sub(v.at) > cc.maxAge {
				delete(cc.m, k)
			}
		}
		cc.swept = now
	}
	e = cc.m[id]
	cc.mu.Unlock()
	if e != nil && !fresh && now.Sub(e.at) <= cc.maxAge {
		return e, false, nil
	}
	c, h, err := cc.load(ctx, id)
	if err != nil {
		return nil, false, err
	}
	e = &cachedContext{c: c, guard: store.NewContextGuard(h, guardedFields...), at: now}
	cc.mu.Lock()
	cc.m[id] = e
	cc.mu.Unlock()
	return e, true, nil
}

// drop forgets e, the entry of context id, unless another reading replaced it.
func (cc *contextCache) drop(id uint32, e *cachedContext) {
	cc.mu.Lock()
	if cc.m[id] == e {
		delete(cc.m, id)
	}
	cc.mu.Unlock()
}
