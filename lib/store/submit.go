package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// submitScript: see lua/submit.lua.
var submitScript = stateScript("submit.lua", "lib_wake.lua", "lib_route.lua")

// Submission is one standalone job for SubmitJobs, with its optional uniqueness key.
type Submission struct {
	Job       *model.Job
	UniqueKey string        // "": none
	UniqueTTL time.Duration // how long UniqueKey names the job (> 0 with a key)
	Actor     string        // who submits it (its events' actor); "": SubmitJobs' actor
}

// ContextGuard holds fields of a context's hash (context:<id>) with the values an
// authorization read from them: a submission under it writes nothing, and returns
// ErrContextChanged, unless the context still holds them when it runs, in the same
// atomic step as its writes. A missing field is "".
type ContextGuard struct {
	Fields []string
	Values []string
}

// NewContextGuard guards fields with their values in h, a context's hash as
// LoadContextHash returned it.
func NewContextGuard(h map[string]string, fields ...string) *ContextGuard {
	g := &ContextGuard{Fields: fields, Values: make([]string, len(fields))}
	for i, f := range fields {
		g.Values[i] = h[f]
	}
	return g
}

// ErrContextChanged: a guarded submission met a context whose guarded fields changed
// since they were read (or a context that was deleted); nothing was written.
var ErrContextChanged = errors.New("the context changed since it was read")

// Submitted is what SubmitJobs did with one Submission.
type Submitted struct {
	Job      *model.Job
	Existing bool // the job existed (its uniqueness key or its chosen id named it); nothing was created
}

// maxReserve bounds the retries of a reservation of ids that met ids callers chose.
const maxReserve = 5

// SubmitJobs creates standalone jobs of one context and dispatches them, in one step
// per call (lua/submit.lua): a job is never stored undispatched. First, in one round
// trip for the batch, ids of 0 are reserved from each caller's counter and each job
// that names no runner is checked to be served (its executor or script type announced
// by a runner: a *model.ValidationError, nothing stored, when not). A job whose unique
// key names a job that still exists, or whose chosen id exists with the same content,
// is returned as it is (Existing); a chosen id with other content refuses the whole
// call (an ExistsError), storing nothing. A Submission without an Actor is actor's.
func (s *Store) SubmitJobs(ctx context.Context, ctxID uint32, subs []Submission, actor string) ([]Submitted, error) {
	own := make([]Submission, len(subs))
	for i, sb := range subs {
		own[i] = sb
		if sb.Actor == "" {
			own[i].Actor = actor
		}
	}
	return s.SubmitGuarded(ctx, ctxID, own, nil)
}

// SubmitGuarded is SubmitJobs with each Submission's Actor, under guard when it is
// not nil (ErrContextChanged when the context no longer holds the guarded values).
func (s *Store) SubmitGuarded(ctx context.Context, ctxID uint32, subs []Submission, guard *ContextGuard) ([]Submitted, error) {
	db, err := s.Ctx(ctxID)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for i, sb := range subs {
		j := sb.Job
		j.ContextID = ctxID
		if err := j.Validate(); err != nil {
			return nil, err
		}
		if sb.UniqueKey != "" && sb.UniqueTTL <= 0 {
			return nil, &model.ValidationError{Object: "job", ID: strconv.Itoa(i), Field: "unique_ttl_seconds", Msg: "a unique_key needs a unique_ttl_seconds above 0"}
		}
		j.CreatedAt, j.UpdatedAt, j.CreatedAtMs = now.Unix(), now.Unix(), now.UnixMilli()
		j.Status, j.Attempt, j.DispatchedMs = model.JobDispatched, 1, now.UnixMilli()
		j.Result, j.Error, j.ExitCode, j.Worker, j.Fatal, j.StopAsked = nil, "", 0, "", false, false
	}
	chosen := make([]bool, len(subs))
	var pending []int // indexes of the jobs whose id is reserved here
	for i, sb := range subs {
		chosen[i] = sb.Job.ID != 0
		if !chosen[i] {
			pending = append(pending, i)
		}
	}
	for try := 0; ; try++ {
		if err := db.reserveJobIDs(ctx, subs, pending); err != nil {
			return nil, err
		}
		out, taken, err := db.submit(ctx, subs, chosen, guard, now)
		if err != nil || taken < 0 {
			return out, err
		}
		if try == maxReserve {
			return nil, fmt.Errorf("submit jobs: reserved ids kept meeting ids chosen by callers (%d tries)", try+1)
		}
		pending = []int{taken}
		for i := range subs {
			if !chosen[i] && i > taken {
				pending = append(pending, i)
			}
		}
	}
}

// reserveJobIDs checks that some runner of the context serves each job of subs that
// names no runner (its executor, or its script type: a *model.ValidationError naming
// the first that none serves) and gives the jobs at idx fresh ids from their callers'
// counters (one INCRBY per caller), all in one round trip.
func (d *DB) reserveJobIDs(ctx context.Context, subs []Submission, idx []int) error {
	count := map[uint32]int64{}
	var callers []uint32
	for _, i := range idx {
		c := subs[i].Job.CallerID
		if count[c] == 0 {
			callers = append(callers, c)
		}
		count[c]++
	}
	type served struct {
		key, field, what string
		job              *model.Job
		cmd              *redis.StringCmd
	}
	var checks []*served
	seen := map[string]bool{}
	for _, sb := range subs {
		j := sb.Job
		if j.RunnerID != 0 {
			continue
		}
		c := &served{key: keys.ScriptTypes, field: string(j.ScriptType), what: "script_type", job: j}
		if exec, _ := j.Handler(); exec != "" {
			c = &served{key: keys.Executors, field: exec, what: "function_name", job: j}
		}
		if !seen[c.key+"\n"+c.field] {
			seen[c.key+"\n"+c.field] = true
			checks = append(checks, c)
		}
	}
	cmds := make(map[uint32]*redis.IntCmd, len(callers))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range checks {
			c.cmd = p.HGet(ctx, c.key, c.field)
		}
		for _, c := range callers {
			cmds[c] = p.IncrBy(ctx, keys.JobSeq(c), count[c])
		}
		return nil
	}); err != nil {
		return fmt.Errorf("reserve job ids: %w", err)
	}
	for _, c := range checks {
		if n, _ := strconv.Atoi(c.cmd.Val()); n <= 0 {
			msg := fmt.Sprintf("no runner in context %d serves script_type %q", d.ContextID, c.field)
			if c.what == "function_name" {
				msg = fmt.Sprintf("no runner in context %d has executor %q", d.ContextID, c.field)
			}
			return &model.ValidationError{Object: "job", ID: strconv.FormatUint(uint64(c.job.ID), 10), Field: c.what, Msg: msg}
		}
	}
	next := map[uint32]int64{}
	for _, c := range callers {
		last := cmds[c].Val()
		if last > math.MaxUint32 {
			return fmt.Errorf("reserve job ids of caller %d: id space exhausted", c)
		}
		next[c] = last - count[c] + 1
	}
	for _, i := range idx {
		j := subs[i].Job
		j.ID = uint32(next[j.CallerID])
		next[j.CallerID]++
	}
	return nil
}

// submitWrites are the fields lua/submit.lua writes into every job it creates, with
// the values SubmitGuarded gives them (its dispatched state and its times): they are
// not sent with each job.
var submitWrites = []string{"status", "attempt", "result", "created_at", "updated_at", "created_at_ms", "dispatched_at_ms"}

// submit runs lua/submit.lua once. taken is the index of a job whose reserved id a
// caller had chosen (nothing was written), else -1.
func (d *DB) submit(ctx context.Context, subs []Submission, chosen []bool, guard *ContextGuard, now time.Time) ([]Submitted, int, error) {
	ks := make([]string, 0, 2*len(subs))
	args := []any{d.ContextID, now.Unix(), now.UnixMilli(), EventsMaxLen, 0}
	if guard != nil {
		args[4] = len(guard.Fields)
		for _, f := range guard.Fields {
			args = append(args, f)
		}
		for _, v := range guard.Values {
			args = append(args, v)
		}
	}
	msg := requestTemplate(d.ContextID, now)
	args = append(append(args, len(msg)), msg...)
	for i, sb := range subs {
		j := sb.Job
		uk := ""
		if sb.UniqueKey != "" {
			uk = keys.Unique(sb.UniqueKey)
		}
		ks = append(ks, keys.Job(j.CallerID, j.ID), uk)
		cmp, ini := splitFields(j, jobInitialOnly)
		ini = withoutFields(ini, submitWrites...)
		args = append(args, boolArg(chosen[i]), j.CallerID, j.ID, sb.UniqueTTL.Milliseconds(), sb.Actor, len(cmp)/2, len(cmp)+len(ini))
		args = append(args, cmp...)
		args = append(args, ini...)
	}
	res, err := d.Eval(ctx, submitScript, ks, args...)
	if err != nil {
		return nil, -1, fmt.Errorf("submit %d job(s) to context %d: %w", len(subs), d.ContextID, err)
	}
	vals, _ := res.([]any)
	if len(vals) == 0 {
		return nil, -1, fmt.Errorf("submit jobs: unexpected reply %v", res)
	}
	switch vals[0] {
	case "changed":
		return nil, -1, ErrContextChanged
	case "taken":
		n, _ := vals[1].(int64)
		return nil, int(n) - 1, nil
	case "conflict":
		n, _ := vals[1].(int64)
		field, _ := vals[2].(string)
		j := subs[n-1].Job
		return nil, -1, &ExistsError{What: "job " + keys.Job(j.CallerID, j.ID), Field: field}
	}
	if len(vals) != len(subs)+1 {
		return nil, -1, fmt.Errorf("submit jobs: %d replies for %d jobs", len(vals)-1, len(subs))
	}
	out := make([]Submitted, len(subs))
	for i, v := range vals[1:] {
		r, _ := v.([]any)
		if len(r) < 2 {
			return nil, -1, fmt.Errorf("submit jobs: unexpected reply %v", v)
		}
		if code, _ := r[0].(int64); code == 1 {
			out[i] = Submitted{Job: subs[i].Job}
			continue
		}
		member, _ := r[1].(string)
		var hash []any
		if len(r) > 2 {
			hash, _ = r[2].([]any)
		}
		j, err := d.jobFromPairs(member, hash)
		if err != nil {
			return nil, -1, err
		}
		out[i] = Submitted{Job: j, Existing: true}
	}
	return out, -1, nil
}

// jobFromPairs decodes a job hash that a script returned as field/value items, the job
// named by its index member "<caller>:<id>".
func (d *DB) jobFromPairs(member string, pairs []any) (*model.Job, error) {
	c, id, ok := strings.Cut(member, ":")
	if !ok {
		return nil, fmt.Errorf("submit jobs: %q is not <caller>:<id>", member)
	}
	h := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		k, _ := pairs[i].(string)
		v, _ := pairs[i+1].(string)
		h[k] = v
	}
	return d.JobFromHash(parseU32(c), parseU32(id), h)
}
