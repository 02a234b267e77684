package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// Submission is one standalone job for SubmitJobs, with its optional uniqueness key.
type Submission struct {
	Job       *model.Job
	UniqueKey string        // "": none
	UniqueTTL time.Duration // how long UniqueKey names the job (> 0 with a key)
	Actor     string        // who submits it (its events' actor); "": SubmitJobs' actor
	// RunAt, when after the submission's time, delays the job: it is stored
	// scheduled (no message yet) and the scheduler dispatches it then (coord:delayed).
	RunAt time.Time
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

// SubmitJobs creates standalone jobs of one context and dispatches them, in one step
// per call (lua/submit.lua, one round trip): a job is never stored undispatched. Each
// job that names no runner must be served (its executor or script type announced by a
// runner: a *model.ValidationError, nothing stored, when not); ids of 0 are reserved
// from each caller's counter, skipping ids callers chose. A job whose unique
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
		j.Status, j.Attempt, j.DispatchedMs, j.RunAtMs = model.JobDispatched, 1, now.UnixMilli(), 0
		if sb.RunAt.After(now) {
			j.Status, j.Attempt, j.DispatchedMs, j.RunAtMs = model.JobScheduled, 0, 0, sb.RunAt.UnixMilli()
		}
		j.Result, j.Error, j.ExitCode, j.Worker, j.Fatal, j.StopAsked = nil, "", 0, "", false, false
	}
	return db.submit(ctx, subs, guard, now)
}

// submitWrites are the fields lua/submit.lua writes into every job it creates, with
// the values SubmitGuarded gives them (its dispatched state and its times): they are
// not sent with each job.
var submitWrites = []string{"status", "attempt", "result", "created_at", "updated_at", "created_at_ms", "dispatched_at_ms", "run_at_ms"}

// submitDefaults (jobDefaults but result, which submit.lua's state leaves out too:
// submitWrites) are the seed's fields a job whose id lua/submit.lua reserves is sent
// without when they hold their default: its hash leaves them out, as job.create's do,
// and a read gives them their default (model's decode); caller_id and context_id are
// left out of what is sent too when they are the job's caller and the call's context,
// which the script writes.
var submitDefaults = defaultsBut("result")

// defaultsBut is jobDefaults without the fields named.
func defaultsBut(names ...string) map[string]string {
	out := maps.Clone(jobDefaults)
	for _, n := range names {
		delete(out, n)
	}
	return out
}

// withoutSubmitDefaults drops from fields (field/value items) those at the value the script
// writes for them without them (submitDefaults, the caller, the context), in place.
func withoutSubmitDefaults(fields []any, ctxID, caller uint32) []any {
	out := fields[:0]
	for i := 0; i+1 < len(fields); i += 2 {
		name, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		def, ok := submitDefaults[name]
		switch {
		case name == "caller_id":
			ok, def = true, strconv.FormatUint(uint64(caller), 10)
		case name == "context_id":
			ok, def = true, strconv.FormatUint(uint64(ctxID), 10)
		}
		if ok && v == def {
			continue
		}
		out = append(out, fields[i], fields[i+1])
	}
	return out
}

// submit runs lua/submit.lua once; a created job whose caller chose no id gets the
// one the script reserved.
func (d *DB) submit(ctx context.Context, subs []Submission, guard *ContextGuard, now time.Time) ([]Submitted, error) {
	if err := d.markOrderFeatures(ctx, submittedJobs(subs)); err != nil {
		return nil, err
	}
	a := &submitArgs{JobsKeys: make([]string, 0, 2*len(subs)), Ctx: int64(d.ContextID), NowS: now.Unix(), NowMs: now.UnixMilli(),
		Msg: requestTemplate(d.ContextID, now), Jobs: make([]submitJob, len(subs))}
	if guard != nil {
		a.GuardFields, a.GuardValues = guard.Fields, guard.Values
	}
	for i, sb := range subs {
		j := sb.Job
		uk := ""
		if sb.UniqueKey != "" {
			uk = keys.Unique(sb.UniqueKey)
		}
		// A job whose id the script reserves names job:<caller>:0, which it does not
		// use: Redis checks every key of an FCALL against the caller's ACL user, and
		// an empty key matches none of a restricted user's patterns (the scheduler's
		// runs of schedules were refused: lib/redisacl).
		a.JobsKeys = append(a.JobsKeys, keys.Job(j.CallerID, j.ID), uk)
		cmp, ini := splitFields(j, jobInitialOnly)
		ini = withoutFields(ini, submitWrites...)
		fields := append(cmp, ini...)
		if j.ID == 0 { // nothing to compare: the fields at their defaults go without (the script writes them)
			fields, cmp = withoutSubmitDefaults(fields, d.ContextID, j.CallerID), nil
		}
		a.Jobs[i] = submitJob{Chosen: j.ID != 0, Caller: int64(j.CallerID), ID: int64(j.ID), TTL: sb.UniqueTTL.Milliseconds(),
			Actor: sb.Actor, RunAt: j.RunAtMs, Ncmp: int64(len(cmp) / 2), Fields: fields}
	}
	res, err := a.run(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("submit %d job(s) to context %d: %w", len(subs), d.ContextID, err)
	}
	if err := d.submitRefused(subs, res); err != nil {
		return nil, err
	}
	if len(res.Jobs) != len(subs) {
		return nil, fmt.Errorf("submit jobs: %d replies for %d jobs", len(res.Jobs), len(subs))
	}
	out := make([]Submitted, len(subs))
	for i, r := range res.Jobs {
		if r.Code == 1 {
			// created: its id, reserved by the script when the caller chose none
			j := subs[i].Job
			_, id, _ := strings.Cut(r.Member, ":")
			if j.ID = parseU32(id); j.ID == 0 {
				return nil, fmt.Errorf("submit jobs: unexpected reply %+v", r)
			}
			out[i] = Submitted{Job: j}
			continue
		}
		j, err := d.jobFromPairs(r.Member, r.Hash)
		if err != nil {
			return nil, err
		}
		out[i] = Submitted{Job: j, Existing: true}
	}
	return out, nil
}

// submitRefused is the error of a submit call that wrote nothing (or, for
// "exhausted", moved only a counter): nil when its status is "ok".
func (d *DB) submitRefused(subs []Submission, res submitOutcome) error {
	job := func() (*model.Job, error) {
		if res.Index < 1 || int(res.Index) > len(subs) {
			return nil, fmt.Errorf("submit jobs: unexpected reply %q for job %d of %d", res.Status, res.Index, len(subs))
		}
		return subs[res.Index-1].Job, nil
	}
	switch res.Status {
	case "ok":
		return nil
	case "changed":
		return ErrContextChanged
	case "unserved":
		j, err := job()
		if err != nil {
			return err
		}
		return d.unserved(j)
	case "exhausted":
		return fmt.Errorf("reserve job ids of caller %s: id space exhausted", res.Detail)
	case "conflict":
		j, err := job()
		if err != nil {
			return err
		}
		return &ExistsError{What: "job " + keys.Job(j.CallerID, j.ID), Field: res.Detail}
	}
	return fmt.Errorf("submit jobs: unexpected reply status %q", res.Status)
}

// unserved is the refusal of job j, which names no runner, when no runner of the
// context has its executor or serves its script type.
func (d *DB) unserved(j *model.Job) error {
	field, msg := "script_type", fmt.Sprintf("no runner in context %d serves script_type %q", d.ContextID, j.ScriptType)
	if exec, _ := j.Handler(); exec != "" {
		field, msg = "function_name", fmt.Sprintf("no runner in context %d has executor %q", d.ContextID, exec)
	}
	return &model.ValidationError{Object: "job", ID: strconv.FormatUint(uint64(j.ID), 10), Field: field, Msg: msg}
}

// jobFromPairs decodes a job hash that a script returned as field/value items, the job
// named by its index member "<caller>:<id>".
func (d *DB) jobFromPairs(member string, pairs []string) (*model.Job, error) {
	c, id, ok := strings.Cut(member, ":")
	if !ok {
		return nil, fmt.Errorf("submit jobs: %q is not <caller>:<id>", member)
	}
	h := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		h[pairs[i]] = pairs[i+1]
	}
	return d.JobFromHash(parseU32(c), parseU32(id), h)
}

// submittedJobs are the jobs of subs.
func submittedJobs(subs []Submission) []*model.Job {
	js := make([]*model.Job, len(subs))
	for i, sb := range subs {
		js[i] = sb.Job
	}
	return js
}
