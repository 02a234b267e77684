package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// Run and rate limits (limit.set, docs/scheduling.md): a context's limits are the
// hash coord:limits, which the claim reads (lua/lib_limit.lua) once the context uses
// them (coord:features "limit"). Setting or removing one wakes the queues that limits
// parked (lua/limit_set.lua), so a change holds from the next claim: no restart.

// SetLimit stores the limit of l's scope (checked: l.Check), replacing the one there.
func (d *DB) SetLimit(ctx context.Context, l *model.RunLimit) error {
	if err := l.Check(); err != nil {
		return err
	}
	if _, err := (&limitSetArgs{LimitsKey: keys.Limits, Ctx: u32str(d.ContextID), Scope: l.Scope, Spec: l.Spec()}).run(ctx, d); err != nil {
		return fmt.Errorf("set limit %s of context %d: %w", l.Scope, d.ContextID, err)
	}
	return nil
}

// DeleteLimit removes the limit of a scope; false when there was none.
func (d *DB) DeleteLimit(ctx context.Context, scope string) (bool, error) {
	scope, err := model.CheckRunLimitScope(scope)
	if err != nil {
		return false, err
	}
	n, err := (&limitSetArgs{LimitsKey: keys.Limits, Ctx: u32str(d.ContextID), Scope: scope, Spec: ""}).run(ctx, d)
	if err != nil {
		return false, fmt.Errorf("delete limit %s of context %d: %w", scope, d.ContextID, err)
	}
	return n == 1, nil
}

// Limits returns the context's limits by scope, each with the runs its max_running
// counts now (a concurrency key's: its jobs in flight).
func (d *DB) Limits(ctx context.Context) ([]*model.RunLimit, error) {
	all, err := d.HGetAll(ctx, keys.Limits)
	if err != nil {
		return nil, fmt.Errorf("read the limits of context %d: %w", d.ContextID, err)
	}
	out := make([]*model.RunLimit, 0, len(all))
	for scope, spec := range all {
		l, err := model.ParseRunLimit(scope, spec)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *model.RunLimit) int { return strings.Compare(a.Scope, b.Scope) })
	counts := make([]*redis.IntCmd, len(out))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, l := range out {
			counts[i] = p.SCard(ctx, runningKey(l.Scope))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count the limited runs of context %d: %w", d.ContextID, err)
	}
	for i, c := range counts {
		out[i].Running = c.Val()
	}
	return out, nil
}

// runningKey is the set that counts the runs of a scope: a concurrency key's jobs in
// flight, else the claims under the scope (lua/lib_limit.lua).
func runningKey(scope string) string {
	if k, ok := strings.CutPrefix(scope, "key:"); ok {
		return keys.ConcurrencyRunning(k)
	}
	return keys.LimitRunning(scope)
}

// Debounce makes job j, just submitted with debounce key key and scheduled at the end
// of its window, the key's pending job, and cancels the job it replaces while that
// one still waits (lua/debounce.lua). It returns the job cancelled ("<caller>:<id>"),
// or "".
func (d *DB) Debounce(ctx context.Context, key string, j *model.Job, window time.Duration, actor string) (string, error) {
	now := time.Now()
	res, err := (&debounceArgs{PendingKey: keys.Debounce(key), Ctx: u32str(d.ContextID), Caller: u32str(j.CallerID), ID: u32str(j.ID), Dkey: key,
		TTLMs: (2*window + time.Minute).Milliseconds(), Actor: actor, NowS: i64s(now.Unix()), NowMs: i64s(now.UnixMilli())}).run(ctx, d)
	if err != nil {
		return "", fmt.Errorf("debounce job %d:%d (debounce_key %s): %w", j.CallerID, j.ID, key, err)
	}
	vals, _ := res.([]any)
	if len(vals) == 2 {
		prev, _ := vals[1].(string)
		return prev, nil
	}
	return "", nil
}
