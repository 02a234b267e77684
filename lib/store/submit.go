package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
		submittedState(j, sb.RunAt, now)
	}
	return db.submit(ctx, subs, guard, now)
}

// submittedState gives job j the state a submission at now stores it in: dispatched,
// or scheduled when runAt is after now, and no run yet.
func submittedState(j *model.Job, runAt, now time.Time) {
	j.CreatedAt, j.UpdatedAt, j.CreatedAtMs = now.Unix(), now.Unix(), now.UnixMilli()
	j.Status, j.Attempt, j.DispatchedMs, j.RunAtMs = model.JobDispatched, 1, now.UnixMilli(), 0
	if runAt.After(now) {
		j.Status, j.Attempt, j.DispatchedMs, j.RunAtMs = model.JobScheduled, 0, 0, runAt.UnixMilli()
	}
	j.Result, j.Error, j.ExitCode, j.Worker, j.Fatal, j.StopAsked = nil, "", 0, "", false, false
}

// submitWrites are the fields lua/submit.lua writes into every job it creates, with
// the values SubmitGuarded gives them (its dispatched state and its times): they are
// not sent with each job.
var submitWrites = []string{"status", "attempt", "result", "created_at", "updated_at", "created_at_ms", "dispatched_at_ms", "run_at_ms"}

// newJobFields are the field/value items of a job whose id lua/submit.lua reserves
// (of context ctxID): what HashFields gives it, its compared fields then its initial
// ones (splitFields, jobInitialOnly), without id and submitWrites, and without those at
// the value the script writes for them without them (jobDefaults but result, its
// caller, the context), in that order and spelled as HashFields spells them; built directly,
// without encoding the fields it leaves out (TestNewJobFieldsMatchSplit checks it
// against that way of making them, for every field of a job). They are appended to
// buf (the items of the jobs before it in the call: one array for all of them), and
// returned as a slice of their own, with buf grown.
func newJobFields(buf []any, j *model.Job, ctxID uint32) (all, fields []any) {
	f := jobFieldList{out: buf}
	start := len(buf)
	if j.ContextID != ctxID {
		f.uint("context_id", uint64(j.ContextID))
	}
	f.str("script", &j.Script)
	if st, ok := scriptTypeValues[j.ScriptType]; ok {
		f.out = append(f.out, "script_type", st)
	} else if j.ScriptType != "" {
		f.out = append(f.out, "script_type", string(j.ScriptType))
	}
	f.uint("timeout", uint64(j.Timeout))
	f.uint("retries", uint64(j.Retries))
	if len(j.EnvVars) != 0 {
		f.json("env_vars", j.EnvVars)
	}
	if len(j.Prerequisites) != 0 {
		f.json("prerequisites", j.Prerequisites)
	}
	if len(j.Dependends) != 0 {
		f.json("dependends", j.Dependends)
	}
	f.str("function_name", &j.FunctionName)
	f.raw("args", j.Args)
	f.raw("kwargs", j.Kwargs)
	f.uint("runner_id", uint64(j.RunnerID))
	f.uint("priority", uint64(j.Priority))
	f.str("concurrency_key", &j.ConcurrencyKey)
	f.uint("concurrency_limit", uint64(j.ConcurrencyLimit))
	f.str("concurrency_policy", &j.ConcurrencyPolicy)
	f.str("held", &j.Held)
	f.str("debounce_key", &j.DebounceKey)
	f.flag("limited", j.Limited)
	if j.Limits != nil {
		f.json("limits", j.Limits)
	}
	newJobInitialFields(&f, j)
	return f.out, f.out[start:len(f.out):len(f.out)]
}

// scriptTypeValues are the known script types as field values, made once (a value
// made per job is an allocation of its own).
var scriptTypeValues = func() map[model.ScriptType]any {
	m := make(map[model.ScriptType]any)
	for _, st := range model.ScriptTypes() {
		m[st] = string(st)
	}
	return m
}()

// newJobInitialFields appends to f the initial fields of newJobFields.
func newJobInitialFields(f *jobFieldList, j *model.Job) {
	f.raw("result_json", j.ResultJSON)
	f.flag("awaited", j.Awaited)
	f.uint("flow_id", uint64(j.FlowID))
	f.str("error", &j.Error)
	f.int("exit_code", int64(j.ExitCode))
	f.str("worker", &j.Worker)
	f.flag("fatal", j.Fatal)
	f.str("trace_id", &j.TraceID)
	f.str("traceparent", &j.Traceparent)
	f.int("retry_after_ms", j.RetryAfterMs)
	f.int("dlq_at_ms", j.DLQAtMs)
	if j.Origin != nil {
		f.json("origin", j.Origin)
	}
	if j.DepResults != nil {
		f.json("dep_results", j.DepResults)
	}
	f.flag("stop_requested", j.StopAsked)
	f.int("started_at", j.StartedAt)
	f.int("finished_at", j.FinishedAt)
	f.int("ready_at_ms", j.ReadyAtMs)
	f.int("started_at_ms", j.StartedAtMs)
	f.int("finished_at_ms", j.FinishedAtMs)
	f.str("schedule_id", &j.ScheduleID)
	f.int("schedule_tick_ms", j.ScheduleTickMs)
	f.int("started_at_us", j.StartedAtUs)
	f.int("finished_at_us", j.FinishedAtUs)
}

// jobFieldList appends a job's field/value items but those at their zero value
// (for a job's hash: "", 0, false, nil), each encoded as model.HashFields encodes it.
type jobFieldList struct{ out []any }

// str appends a string field as a pointer to the job's own (go-redis writes it as
// its value): a string put in an interface is an allocation of its own, one or two a
// job. The job must not change until the call is written.
func (f *jobFieldList) str(name string, v *string) {
	if *v != "" {
		f.out = append(f.out, name, v)
	}
}

func (f *jobFieldList) uint(name string, v uint64) {
	if v != 0 {
		f.out = append(f.out, name, strconv.FormatUint(v, 10))
	}
}

func (f *jobFieldList) int(name string, v int64) {
	if v != 0 {
		f.out = append(f.out, name, strconv.FormatInt(v, 10))
	}
}

func (f *jobFieldList) flag(name string, v bool) {
	if v {
		f.out = append(f.out, name, "true")
	}
}

// raw appends a raw JSON field when it is not nil, compacted as json.Marshal writes it.
func (f *jobFieldList) raw(name string, v json.RawMessage) {
	if v != nil {
		f.json(name, v)
	}
}

// json appends v as JSON ("" when it does not marshal, as model's encoding).
func (f *jobFieldList) json(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = nil
	}
	f.out = append(f.out, name, string(b))
}

// submitFields are the field/value items job j is sent with to lua/submit.lua (of
// context ctxID), and how many of them (pairs, the first) the script compares with an
// existing job of a chosen id. A job whose id the script reserves has nothing to
// compare, and is sent without the fields at their defaults (newJobFields).
// New jobs' items are appended to buf, all of the call's: it is returned.
func submitFields(buf []any, j *model.Job, ctxID uint32) (all, fields []any, ncmp int) {
	if j.ID == 0 {
		all, fields = newJobFields(buf, j, ctxID)
		return all, fields, 0
	}
	cmp, ini := splitFields(j, jobInitialOnly)
	ini = withoutFields(ini, submitWrites...)
	return buf, append(cmp, ini...), len(cmp) / 2
}

// requestTemplate are the fields of a standalone job's request message that every job
// of a submission shares: requestFields' but for caller_id, message and job, which
// lua/submit.lua writes for each job as requestFields would. They are what
// localMessageFields makes of requestMessage(ctxID, 0, now, 0) without caller_id and
// message, built directly (it reflects over the message, a fifth of a submission's
// allocations): its context, times, kind and the job_ref mark; the rest of the
// message holds the defaults a read gives back (TestRequestTemplateMatchesMessage).
func requestTemplate(ctxID uint32, now time.Time) []any {
	nowS, nowMs := now.Unix(), now.UnixMilli()
	out := make([]any, 0, 14)
	out = append(out, "status", string(model.MessageDispatched), "context_id", strconv.FormatUint(uint64(ctxID), 10))
	if nowMs == 0 || nowS != nowMs/1000 { // else a read derives created_at from created_at_ms (localDefault)
		out = append(out, "created_at", strconv.FormatInt(nowS, 10))
	}
	out = append(out, "updated_at", strconv.FormatInt(nowS, 10), "kind", model.KindJobRequest)
	if nowMs != 0 {
		out = append(out, "created_at_ms", strconv.FormatInt(nowMs, 10))
	}
	return append(out, fieldJobRef, "1")
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
	buf := make([]any, 0, 6*len(subs)) // a new job's fields: a script and its type, mostly
	var unused string                  // the key job:<caller>:0 of unusedCaller's jobs, made once
	var unusedCaller uint32
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
		k := unused
		if j.ID != 0 || unused == "" || unusedCaller != j.CallerID {
			k = keys.Job(j.CallerID, j.ID)
		}
		if j.ID == 0 {
			unused, unusedCaller = k, j.CallerID
		}
		a.JobsKeys = append(a.JobsKeys, k, uk)
		var fields []any
		var ncmp int
		buf, fields, ncmp = submitFields(buf, j, d.ContextID)
		a.Jobs[i] = submitJob{Chosen: j.ID != 0, Caller: int64(j.CallerID), ID: int64(j.ID), TTL: sb.UniqueTTL.Milliseconds(),
			Actor: sb.Actor, RunAt: j.RunAtMs, Ncmp: int64(ncmp), Fields: fields}
	}
	res, err := a.run(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("submit %d job(s) to context %d: %w", len(subs), d.ContextID, err)
	}
	if err := d.submitRefused(subs, res); err != nil {
		return nil, err
	}
	// each job's member, "<caller>:<id>", in one string (substrings of it: no
	// allocation a job)
	var few [32]string
	members := few[:0]
	if len(subs) > len(few) {
		members = make([]string, 0, len(subs))
	}
	for rest, more := res.Members, res.Members != ""; more; {
		var m string
		m, rest, more = strings.Cut(rest, " ")
		members = append(members, m)
	}
	if len(members) != len(subs) {
		return nil, fmt.Errorf("submit jobs: %d replies for %d jobs", len(members), len(subs))
	}
	out := make([]Submitted, len(subs))
	for _, f := range res.Found {
		if f.Index < 1 || int(f.Index) > len(subs) || out[f.Index-1].Job != nil {
			return nil, fmt.Errorf("submit jobs: unexpected reply: job %d found, of %d", f.Index, len(subs))
		}
		j, err := d.jobFromPairs(members[f.Index-1], f.Hash)
		if err != nil {
			return nil, err
		}
		out[f.Index-1] = Submitted{Job: j, Existing: true}
	}
	for i, member := range members {
		if out[i].Job != nil {
			continue // found
		}
		// created: its id, reserved by the script when the caller chose none
		j := subs[i].Job
		_, id, _ := strings.Cut(member, ":")
		if j.ID = parseU32(id); j.ID == 0 {
			return nil, fmt.Errorf("submit jobs: unexpected reply %q for job %d", member, i+1)
		}
		out[i] = Submitted{Job: j}
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
