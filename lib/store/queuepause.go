package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// Paused queues (docs/scheduling.md, "Pause and resume"): a context's job queue (a
// script type's or an executor's) is paused while it has a field in coord:qpause;
// claim_start takes nothing from it meanwhile (lua/lib_qpause.lua).

// PauseQueue pauses (op "pause") or resumes (op "resume") the context's job queue
// queue:<suffix> (lua/pause_queue.lua): paused, no claim takes its jobs (the runs
// under way go on); resumed, its runners are woken for the jobs it holds.
// changed=false when it was paused (or not paused) already.
func (d *DB) PauseQueue(ctx context.Context, suffix, op, actor, note string) (changed bool, err error) {
	if op != "pause" && op != "resume" {
		return false, fmt.Errorf("queue %s: unknown op %q", suffix, op)
	}
	n, err := (&pauseQueueArgs{PauseKey: keys.QueuePause, QueueKey: keys.Queue(suffix), Ctx: u32str(d.ContextID), Op: op,
		Actor: actor, NowMs: time.Now().UnixMilli(), Note: note, Suffix: suffix}).run(ctx, d)
	if err != nil {
		return false, fmt.Errorf("%s queue %s: %w", op, suffix, err)
	}
	return n == 1, nil
}

// Queues lists the context's job queues: those its runners serve (coord:script_types,
// coord:executors) and the paused ones, each with its depth and pause, in the order of
// their keys.
func (d *DB) Queues(ctx context.Context) ([]model.Queue, error) {
	var types, execs, paused *redis.MapStringStringCmd
	var runners *redis.StringSliceCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		types = p.HGetAll(ctx, keys.ScriptTypes)
		execs = p.HGetAll(ctx, keys.Executors)
		paused = p.HGetAll(ctx, keys.QueuePause)
		runners = p.ZRange(ctx, keys.RunnerIndex, 0, -1)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list the queues of context %d: %w", d.ContextID, err)
	}
	byKey := map[string]*model.Queue{}
	add := func(suffix string) *model.Queue {
		k := keys.Queue(suffix)
		if q := byKey[k]; q != nil {
			return q
		}
		q := &model.Queue{Queue: k}
		if e, ok := strings.CutPrefix(suffix, model.ExecQueueSuffix("")); ok {
			q.Executor = e
		} else {
			q.ScriptType = suffix
		}
		byKey[k] = q
		return q
	}
	for t, n := range types.Val() {
		add(model.ScriptType(t).QueueSuffix()).Runners, _ = strconv.ParseInt(n, 10, 64)
	}
	for e, n := range execs.Val() {
		add(model.ExecQueueSuffix(e)).Runners, _ = strconv.ParseInt(n, 10, 64)
	}
	for k, v := range paused.Val() {
		setPause(add(strings.TrimPrefix(k, keys.QueuePrefix)), v)
	}
	out := make([]model.Queue, 0, len(byKey))
	for _, q := range byKey {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b model.Queue) int { return strings.Compare(a.Queue, b.Queue) })
	return out, d.queueDepths(ctx, out, runners.Val())
}

// Queue is the context's job queue queue:<suffix>, with its depth and pause.
func (d *DB) Queue(ctx context.Context, suffix string) (model.Queue, error) {
	all, err := d.Queues(ctx)
	if err != nil {
		return model.Queue{}, err
	}
	k := keys.Queue(suffix)
	for _, q := range all {
		if q.Queue == k {
			return q, nil
		}
	}
	q := model.Queue{Queue: k}
	if e, ok := strings.CutPrefix(suffix, model.ExecQueueSuffix("")); ok {
		q.Executor = e
	} else {
		q.ScriptType = suffix
	}
	return q, nil
}

// setPause fills q's pause from its coord:qpause value ("<ms>\t<actor>\t<note>").
func setPause(q *model.Queue, v string) {
	q.Paused = true
	at, rest, _ := strings.Cut(v, "\t")
	q.PausedAtMs, _ = strconv.ParseInt(at, 10, 64)
	q.PausedBy, q.PauseNote, _ = strings.Cut(rest, "\t")
}

// queueDepths reads the depth of each queue (its list and priority set) and its jobs
// pinned to each of runners, in one round trip.
func (d *DB) queueDepths(ctx context.Context, qs []model.Queue, runners []string) error {
	if len(qs) == 0 {
		return nil
	}
	lens := make([]*redis.IntCmd, len(qs))
	prios := make([]*redis.IntCmd, len(qs))
	pinned := make([][]*redis.IntCmd, len(qs))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range qs {
			lens[i] = p.LLen(ctx, q.Queue)
			prios[i] = p.ZCard(ctx, keys.Priority(q.Queue))
			suffix := strings.TrimPrefix(q.Queue, keys.QueuePrefix)
			for _, r := range runners {
				pinned[i] = append(pinned[i], p.LLen(ctx, keys.PinnedQueuePrefix+r+":"+suffix))
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("read the depths of the queues of context %d: %w", d.ContextID, err)
	}
	for i := range qs {
		qs[i].Depth = lens[i].Val() + prios[i].Val()
		for _, c := range pinned[i] {
			qs[i].Pinned += c.Val()
		}
	}
	return nil
}
