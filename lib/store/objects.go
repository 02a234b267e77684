package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

type createSpec struct {
	what       string // "job 12" for errors, filled with the id
	object     string // "job"
	prefix     string // "job:12:"
	seq        string
	index      string
	member     string // index member prefix, e.g. "12:" for jobs
	id         uint32
	compare    []any // field/value pairs compared on re-create
	initial    []any // field/value pairs written only on creation
	eventType  string
	eventActor string
	events     bool   // whether the DB has an event stream (context DBs)
	statusIdx  string // per-status index prefix (objects with a status)
	// createdMs is the object's created_at_ms, the score of its index entries (0: now).
	// A job's status changes carry its score from created_at_ms into the per-status
	// index (lib_state's reindex), so the two must be one clock reading.
	createdMs int64
	// registry, when set, is a DB-0 set ("%d" stands for the id) that gets
	// registryMember in the same step (keys.RunnerContexts for runners).
	registry, registryMember string
	// defaults are the compared fields left out of a job's hash as default
	// (withoutDefaults), compared in Go with an existing job's (defaultsDiffer).
	defaults []string
}

type createResult struct {
	id      uint32
	created bool
}

// runCreate creates the object c in one run of lua/create.lua on r.
func runCreate(ctx context.Context, r luaRunner, c createSpec) (createResult, error) {
	a := createCall(c)
	res, err := a.run(ctx, r)
	if err != nil {
		return createResult{}, fmt.Errorf("create %s: %w", c.object, err)
	}
	return createReply(c, res, 0)
}

// createCall is one run of the create script for the objects cs, which share their
// kind and caller (prefix, counter, indexes, event, registry: cs[0]'s).
func createCall(cs ...createSpec) *createArgs {
	c := cs[0]
	evType := model.EventType(c.eventType).Stored() // the stream's code of the type
	if !c.events {
		evType = ""
	}
	a := &createArgs{EventsKey: keys.Events, Prefix: c.prefix, Seqkey: c.seq, Idxkey: c.index, MemberPrefix: c.member,
		EvType: evType, EvActor: c.eventActor, Reg: c.registry, RegMember: c.registryMember, Objects: make([]createObject, len(cs))}
	for i, o := range cs {
		nowMs := o.createdMs
		if nowMs == 0 {
			nowMs = time.Now().UnixMilli()
		}
		fields := make([]any, 0, len(o.compare)+len(o.initial))
		a.Objects[i] = createObject{ID: int64(o.id), NowMs: nowMs, Ncmp: int64(len(o.compare) / 2), Stidx: statusIndex(o),
			Fields: append(append(fields, o.compare...), o.initial...)}
	}
	return a
}

// sameCreateCall reports whether the objects a and b can share a create call.
func sameCreateCall(a, b createSpec) bool {
	return a.prefix == b.prefix && a.seq == b.seq && a.index == b.index && a.member == b.member && a.eventType == b.eventType &&
		a.eventActor == b.eventActor && a.events == b.events && a.registry == b.registry && a.registryMember == b.registryMember
}

// statusIndex is the per-status index key that the object c creates enters (its
// statusIdx and the status it is created with; "": none).
func statusIndex(c createSpec) string {
	if c.statusIdx == "" {
		return ""
	}
	for _, kv := range [][]any{c.initial, c.compare} {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == "status" {
				if st, _ := kv[i+1].(string); st != "" {
					return c.statusIdx + ":" + st
				}
			}
		}
	}
	return ""
}

// createReply reads the create script's outcome for the object c, the k-th of the
// call (res, its decoded reply).
func createReply(c createSpec, res []createOutcome, k int) (createResult, error) {
	if k >= len(res) {
		return createResult{}, fmt.Errorf("create %s: %d outcomes in the reply, none for object %d", c.object, len(res), k+1)
	}
	o := res[k]
	switch o.Status {
	case 1:
		return createResult{uint32(o.ID), true}, nil
	case 2:
		return createResult{uint32(o.ID), false}, nil
	case 3:
		return createResult{}, fmt.Errorf("create %s: %s", c.object, o.Field)
	case 0:
		return createResult{}, &ExistsError{What: fmt.Sprintf("%s %d", c.object, o.ID), Field: o.Field}
	}
	return createResult{}, fmt.Errorf("create %s: unexpected status %d in the reply", c.object, o.Status)
}

// splitFields separates an object's hash fields into the compared content and the
// fields written only at creation (id, timestamps, status and runtime extensions).
func splitFields(obj any, initialOnly map[string]bool) (compare, initial []any) {
	kv := model.HashFields(obj)
	// the compared ones in place, in kv (HashFields' own): one slice fewer an object
	compare, initial = kv[:0], make([]any, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		name := kv[i].(string)
		if name == "id" {
			continue
		}
		if initialOnly[name] {
			initial = append(initial, kv[i], kv[i+1])
		} else {
			compare = append(compare, kv[i], kv[i+1])
		}
	}
	return compare, initial
}

var timestampFields = map[string]bool{"created_at": true, "updated_at": true, "created_at_ms": true}

func withFields(m map[string]bool, extra ...string) map[string]bool {
	out := make(map[string]bool, len(m)+len(extra))
	for k := range m {
		out[k] = true
	}
	for _, k := range extra {
		out[k] = true
	}
	return out
}

func stamp(created, updated *int64) {
	now := time.Now().Unix()
	*created, *updated = now, now
}

// ---- Actors (DB 0) ----

// CreateActor stores an actor (id 0: the server assigns one).
func (s *Store) CreateActor(ctx context.Context, a *model.Actor) (*model.Actor, bool, error) {
	if err := a.Validate(); err != nil {
		return nil, false, err
	}
	stamp(&a.CreatedAt, &a.UpdatedAt)
	cmp, ini := splitFields(a, timestampFields)
	res, err := runCreate(ctx, cmdRunner{s.G()}, createSpec{object: "actor", prefix: "actor:", seq: keys.ActorSeq, index: keys.ActorIndex, id: a.ID, compare: cmp, initial: ini})
	if err != nil {
		return nil, false, err
	}
	out, err := s.LoadActor(ctx, res.id)
	return out, res.created, err
}

// LoadActor reads actor:<id> from DB 0.
func (s *Store) LoadActor(ctx context.Context, id uint32) (*model.Actor, error) {
	h, err := s.G().HGetAll(ctx, keys.Actor(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("load actor %d: %w", id, err)
	}
	if len(h) == 0 {
		return nil, notFound("actor %d", id)
	}
	var a model.Actor
	if err := model.FromHash(keys.Actor(id), h, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// ---- Contexts ----

// CreateContext stores context:<id> in the context's own DB and registers it in DB 0.
func (s *Store) CreateContext(ctx context.Context, c *model.Context, actor string) (*model.Context, bool, error) {
	if err := c.Validate(); err != nil {
		return nil, false, err
	}
	db, err := s.Ctx(c.ID)
	if err != nil {
		return nil, false, err
	}
	if err := db.probe(ctx); err != nil {
		return nil, false, err
	}
	stamp(&c.CreatedAt, &c.UpdatedAt)
	cmp, ini := splitFields(c, timestampFields)
	res, err := runCreate(ctx, db, createSpec{object: "context", prefix: "context:", id: c.ID, compare: cmp, initial: ini, eventType: string(model.EventContextCreated), eventActor: actor, events: true})
	if err != nil {
		return nil, false, err
	}
	if err := s.G().ZAddNX(ctx, keys.Contexts, redis.Z{Score: float64(time.Now().UnixMilli()), Member: strconv.FormatUint(uint64(c.ID), 10)}).Err(); err != nil {
		return nil, false, fmt.Errorf("register context %d: %w", c.ID, err)
	}
	if res.created {
		s.G().Publish(ctx, keys.Control, "context:"+strconv.FormatUint(uint64(c.ID), 10))
	}
	out, err := s.LoadContext(ctx, c.ID)
	return out, res.created, err
}

// probe checks that the DB can be selected (a server that did not report its
// databases setting would otherwise fail late).
func (d *DB) probe(ctx context.Context) error {
	_, err := d.Pipelined(ctx, func(p redis.Pipeliner) error { p.Ping(ctx); return nil })
	if err != nil {
		return fmt.Errorf("context %d: redis at %s cannot select DB %d: %v", d.ContextID, d.srv.Name, d.n, err)
	}
	return nil
}

// LoadContext reads context:<id> from DB <id>.
func (s *Store) LoadContext(ctx context.Context, id uint32) (*model.Context, error) {
	c, _, err := s.LoadContextHash(ctx, id)
	return c, err
}

// LoadContextHash is LoadContext that also returns the hash as stored (for a
// ContextGuard).
func (s *Store) LoadContextHash(ctx context.Context, id uint32) (*model.Context, map[string]string, error) {
	db, err := s.Ctx(id)
	if err != nil {
		return nil, nil, err
	}
	h, err := db.HGetAll(ctx, keys.Context(id))
	if err != nil {
		return nil, nil, fmt.Errorf("load context %d: %w", id, err)
	}
	if len(h) == 0 {
		return nil, nil, notFound("context %d", id)
	}
	var c model.Context
	if err := model.FromHash(keys.Context(id), h, &c); err != nil {
		return nil, nil, err
	}
	return &c, h, nil
}

// ContextLimits reads the job limits of this DB's context: the defaults its jobs get
// and the most they may ask for (nil where not set).
func (d *DB) ContextLimits(ctx context.Context) (defaults, max *model.JobLimits, err error) {
	var read func() (*model.JobLimits, *model.JobLimits, error)
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		read = d.QueueContextLimits(ctx, p)
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("load context %d limits: %w", d.ContextID, err)
	}
	return read()
}

// QueueContextLimits queues the read of the context's job defaults and maxima on p (a
// pipeline with other reads: one round trip in all); read decodes them once p ran
// without error.
func (d *DB) QueueContextLimits(ctx context.Context, p redis.Pipeliner) (read func() (defaults, max *model.JobLimits, err error)) {
	cmd := p.HMGet(ctx, keys.Context(d.ContextID), "job_defaults", "job_max")
	return func() (*model.JobLimits, *model.JobLimits, error) {
		var defaults, max string
		if v := cmd.Val(); len(v) == 2 {
			defaults, _ = v[0].(string)
			max, _ = v[1].(string)
		}
		return d.DecodeContextLimits(defaults, max)
	}
}

// DecodeContextLimits decodes a context's job limits from its fields job_defaults and
// job_max as stored ("": none), e.g. StartReads'.
func (d *DB) DecodeContextLimits(defaults, max string) (*model.JobLimits, *model.JobLimits, error) {
	var c model.Context
	h := map[string]string{}
	if defaults != "" {
		h["job_defaults"] = defaults
	}
	if max != "" {
		h["job_max"] = max
	}
	if err := model.FromHash(keys.Context(d.ContextID), h, &c); err != nil {
		return nil, nil, err
	}
	return c.JobDefaults, c.JobMax, nil
}

// UpdateContext changes the named fields of a context (their hash names: what a
// context.update gives) to c's values, a field c leaves empty removed, and no other
// field (lua/update_context.lua): c is the context as its caller read it and changed
// it, and its other fields may have changed since. ErrNotFound: no such context.
func (s *Store) UpdateContext(ctx context.Context, c *model.Context, fields []string, actor string) (*model.Context, error) {
	db, err := s.Ctx(c.ID)
	if err != nil {
		return nil, err
	}
	c.UpdatedAt = time.Now().Unix()
	has := map[string]string{}
	kv := model.HashFields(c)
	for i := 0; i+1 < len(kv); i += 2 {
		has[kv[i].(string)] = fmt.Sprint(kv[i+1])
	}
	a := &updateContextArgs{ContextKey: keys.Context(c.ID), Actor: actor, NowMs: time.Now().UnixMilli(), UpdatedAt: c.UpdatedAt,
		Detail: fmt.Sprintf("context %d", c.ID), Set: []string{}, Del: []string{}}
	for _, f := range fields {
		switch v, ok := has[f]; {
		case f == "id" || f == "created_at" || f == "updated_at":
			return nil, fmt.Errorf("update context %d: field %s is not one an update changes", c.ID, f)
		case ok:
			a.Set = append(a.Set, f, v)
		default:
			a.Del = append(a.Del, f)
		}
	}
	n, err := a.run(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("update context %d: %w", c.ID, err)
	}
	if n == 0 {
		return nil, notFound("context %d", c.ID)
	}
	return s.LoadContext(ctx, c.ID)
}

// ContextIDs returns every registered context id (the registry in DB 0).
func (s *Store) ContextIDs(ctx context.Context) ([]uint32, error) {
	vals, err := s.G().ZRange(ctx, keys.Contexts, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list contexts: %w", err)
	}
	return contextIDs(vals), nil
}

// contextIDs parses the members of keys.Contexts (a member that is no context id is
// skipped).
func contextIDs(vals []string) []uint32 {
	out := make([]uint32, 0, len(vals))
	for _, v := range vals {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil && n > 0 {
			out = append(out, uint32(n))
		}
	}
	return out
}

// ContextPage returns up to n (at least 1) context ids from the rank from on, in the
// order of keys.Contexts (a page of a sweep that visits a few contexts at a time; fewer
// than n: the last page), and how many contexts there are, in one round trip.
func (s *Store) ContextPage(ctx context.Context, from int64, n int) ([]uint32, int64, error) {
	var rng *redis.StringSliceCmd
	var count *redis.IntCmd
	if _, err := s.G().Pipelined(ctx, func(p redis.Pipeliner) error {
		count = p.ZCard(ctx, keys.Contexts)
		rng = p.ZRange(ctx, keys.Contexts, from, from+int64(max(n, 1))-1)
		return nil
	}); err != nil {
		return nil, 0, fmt.Errorf("list contexts: %w", err)
	}
	return contextIDs(rng.Val()), count.Val(), nil
}

// ---- Runners ----

// CreateRunner stores runner:<id> in a context.
func (s *Store) CreateRunner(ctx context.Context, ctxID uint32, r *model.Runner, actor string) (*model.Runner, bool, error) {
	if r.Topic == "" && r.ID != 0 {
		r.Topic = "runner" + strconv.FormatUint(uint64(r.ID), 10)
	}
	if err := r.Validate(); err != nil {
		return nil, false, err
	}
	db, err := s.Ctx(ctxID)
	if err != nil {
		return nil, false, err
	}
	stamp(&r.CreatedAt, &r.UpdatedAt)
	declared, declaredExecs := r.ScriptTypes, r.Executors
	r.ScriptTypes, r.Executors = nil, nil // announced below, so that coord:script_types and coord:executors count them
	cmp, ini := splitFields(r, withFields(timestampFields, "script_types", "executors"))
	res, err := runCreate(ctx, db, createSpec{object: "runner", prefix: "runner:", seq: keys.RunnerSeq, index: keys.RunnerIndex, id: r.ID, compare: cmp, initial: ini, eventType: string(model.EventRunnerCreated), eventActor: actor, events: true,
		registry: keys.RunnerContextsFormat, registryMember: strconv.FormatUint(uint64(ctxID), 10)})
	if err != nil {
		return nil, false, err
	}
	if res.created && r.Topic == "" {
		// Server-assigned id: the default topic follows it (seed: runner<id>).
		_, _ = db.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, keys.Runner(res.id), "topic", "runner"+strconv.FormatUint(uint64(res.id), 10))
			return nil
		})
	}
	// Declared at creation (a remote runner announces nothing itself): handler jobs
	// naming an executor are accepted for it at once. A retried create announces them
	// too (an announce merges): one whose announce failed, or whose process ended
	// before it, left a runner whose jobs were refused as unserved.
	if err := db.AnnounceExecutors(ctx, res.id, declaredExecs); err != nil {
		return nil, false, err
	}
	if len(declared) > 0 {
		if err := db.AnnounceScriptTypes(ctx, res.id, declared); err != nil {
			return nil, false, err
		}
	}
	if res.created {
		s.G().Publish(ctx, keys.Control, fmt.Sprintf("runner:%d:%d", ctxID, res.id))
	}
	out, err := s.LoadRunner(ctx, ctxID, res.id)
	return out, res.created, err
}

// LoadRunner reads runner:<id> with its live processes.
func (s *Store) LoadRunner(ctx context.Context, ctxID, id uint32) (*model.Runner, error) {
	db, err := s.Ctx(ctxID)
	if err != nil {
		return nil, err
	}
	return db.LoadRunner(ctx, id)
}

// ProcessTTL is how long a runner process counts as alive after its last heartbeat.
const ProcessTTL = 15 * time.Second

// LoadRunner reads runner:<id> with its live processes: those that heartbeat on the
// context's server (keys.RunnerProcsOf, in DB 0 there; one heartbeat per server).
func (d *DB) LoadRunner(ctx context.Context, id uint32) (*model.Runner, error) {
	var h *redis.MapStringStringCmd
	var procs *redis.ZSliceCmd
	minScore := strconv.FormatInt(time.Now().Add(-ProcessTTL).UnixMilli(), 10)
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HGetAll(ctx, keys.Runner(id))
		p.Select(ctx, 0) // the next use of the connection selects its own DB again
		procs = p.ZRangeByScoreWithScores(ctx, keys.RunnerProcsOf(id), &redis.ZRangeBy{Min: minScore, Max: "+inf"})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load runner %d: %w", id, err)
	}
	if len(h.Val()) == 0 {
		return nil, notFound("runner %d in context %d", id, d.ContextID)
	}
	var r model.Runner
	if err := model.FromHash(keys.Runner(id), h.Val(), &r); err != nil {
		return nil, err
	}
	for _, z := range procs.Val() {
		r.Processes = append(r.Processes, model.RunnerProcess{ID: fmt.Sprint(z.Member), LastHeartbeat: int64(z.Score)})
	}
	return &r, nil
}

// AnnounceScriptTypes records that a runner serves these script types.
func (d *DB) AnnounceScriptTypes(ctx context.Context, runnerID uint32, types []model.ScriptType) error {
	_, err := (&announceArgs{RunnerKey: keys.Runner(runnerID), CountsKey: keys.ScriptTypes, Names: json.RawMessage(model.EncodeField(types)),
		NowS: time.Now().Unix(), Field: "script_types", Prefix: keys.Queue(""), RunnerID: int64(runnerID)}).run(ctx, d)
	if err != nil {
		return fmt.Errorf("announce script types of runner %d: %w", runnerID, err)
	}
	return nil
}

// AnnounceExecutors records that a runner has these RRQ executors (runner:<id>.executors,
// and each counted once per runner in coord:executors): handler jobs that name one
// ("executor#handler") go to the runners that have it.
func (d *DB) AnnounceExecutors(ctx context.Context, runnerID uint32, names []string) error {
	if len(names) == 0 {
		return nil
	}
	_, err := (&announceArgs{RunnerKey: keys.Runner(runnerID), CountsKey: keys.Executors, Names: json.RawMessage(model.EncodeField(names)),
		NowS: time.Now().Unix(), Field: "executors", Prefix: keys.Queue(model.ExecQueueSuffix("")), RunnerID: int64(runnerID)}).run(ctx, d)
	if err != nil {
		return fmt.Errorf("announce executors of runner %d: %w", runnerID, err)
	}
	return nil
}

// ExecutorServed reports whether any runner of the context announced the executor.
func (d *DB) ExecutorServed(ctx context.Context, name string) (bool, error) {
	var cmd *redis.StringCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.HGet(ctx, keys.Executors, name)
		return nil
	}); err != nil {
		return false, err
	}
	n, _ := strconv.Atoi(cmd.Val())
	return n > 0, nil
}

// ScriptTypeServed reports whether any runner of the context ever announced the type.
func (d *DB) ScriptTypeServed(ctx context.Context, t model.ScriptType) (bool, error) {
	var cmd *redis.StringCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.HGet(ctx, keys.ScriptTypes, string(t))
		return nil
	}); err != nil {
		return false, err
	}
	n, _ := strconv.Atoi(cmd.Val())
	return n > 0, nil
}

// Heartbeat records that a runner process is alive on the servers that hold the
// contexts it serves: one round trip per server (keys.RunnerProcsOf in DB 0 there),
// whatever the number of contexts.
func (s *Store) Heartbeat(ctx context.Context, runnerID uint32, process string, ctxIDs []uint32) error {
	now := time.Now()
	var first error
	for _, srv := range s.serversOf(ctxIDs) {
		_, err := srv.fixed.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, keys.RunnerProcsOf(runnerID), redis.Z{Score: float64(now.UnixMilli()), Member: process})
			p.ZRemRangeByScore(ctx, keys.RunnerProcsOf(runnerID), "-inf", strconv.FormatInt(now.Add(-10*ProcessTTL).UnixMilli(), 10))
			return nil
		})
		if err != nil && first == nil {
			first = fmt.Errorf("heartbeat on %s: %w", srv.Name, err)
		}
	}
	return first
}

// serversOf returns the servers that hold the contexts, in the store's order.
func (s *Store) serversOf(ctxIDs []uint32) []*Server {
	if len(s.rules) == 0 {
		if len(ctxIDs) == 0 {
			return nil
		}
		return []*Server{s.primary}
	}
	seen := map[*Server]bool{}
	for _, c := range ctxIDs {
		seen[s.ServerFor(c)] = true
	}
	var out []*Server
	for _, srv := range s.servers {
		if seen[srv] {
			out = append(out, srv)
		}
	}
	return out
}

// RunnerHere says whether runner:<id> exists in the context, and adds the context to
// (or removes it from) keys.RunnerContexts on its server accordingly.
func (d *DB) RunnerHere(ctx context.Context, runnerID uint32) (bool, error) {
	n, err := (&runnerHereArgs{RunnerKey: keys.Runner(runnerID), ContextsKey: keys.RunnerContexts(runnerID), RunnerID: int64(runnerID), Ctx: int64(d.ContextID)}).run(ctx, d)
	if err != nil {
		return false, fmt.Errorf("look for runner %d in context %d: %w", runnerID, d.ContextID, err)
	}
	return n == 1, nil
}

// RunnerContexts returns the contexts that hold runner:<id> according to the index of
// each server (keys.RunnerContexts): one SMEMBERS per server, whatever the number of
// contexts.
func (s *Store) RunnerContexts(ctx context.Context, runnerID uint32) ([]uint32, error) {
	var out []uint32
	for _, srv := range s.servers {
		vals, err := srv.fixed.SMembers(ctx, keys.RunnerContexts(runnerID)).Result()
		if err != nil {
			return nil, fmt.Errorf("list the contexts of runner %d on %s: %w", runnerID, srv.Name, err)
		}
		for _, v := range vals {
			if n, err := strconv.ParseUint(v, 10, 32); err == nil && n > 0 && s.ServerFor(uint32(n)) == srv {
				out = append(out, uint32(n))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// ---- Jobs ----

var jobInitialOnly = withFields(timestampFields, "status", "result", "result_json", "traceparent", "error", "exit_code", "attempt", "worker", "fatal", "stop_requested", "trace_id", "retry_after_ms", "dlq_at_ms", "done_attempt", "origin", "dep_results", "awaited",
	"started_at", "finished_at", "ready_at_ms", "dispatched_at_ms", "started_at_ms", "finished_at_ms", "started_at_us", "finished_at_us", "flow_id", "run_at_ms", "schedule_id", "schedule_tick_ms")

// CreateJob stores job:<caller_id>:<id> in its context with status dispatched.
func (s *Store) CreateJob(ctx context.Context, j *model.Job, actor string) (*model.Job, bool, error) {
	r := s.CreateJobs(ctx, []*model.Job{j}, actor)[0]
	return r.Job, r.Created, r.Err
}

// JobCreated is one job's outcome of CreateJobs: the stored job and whether this call
// created it (false: the same job existed), or why it was not stored.
type JobCreated struct {
	Job     *model.Job
	Created bool
	Err     error
}

// CreateJobs is CreateJob for several jobs, each on its own: one's error is its own and
// the others are stored. The jobs of a context are created in one round trip (a
// pipeline of the create script, one atomic run per job, in the order given, so a job
// named twice is created once and found the second time) and read back in another.
func (s *Store) CreateJobs(ctx context.Context, jobs []*model.Job, actor string) []JobCreated {
	out := make([]JobCreated, len(jobs))
	specs := make([]createSpec, len(jobs))
	byCtx := map[uint32][]int{}
	var order []uint32
	// the key names of the last job's caller, for the next one's (a flow's jobs share
	// one: four strings a job made once)
	var last struct {
		caller              uint32
		prefix, seq, member string
	}
	for i, j := range jobs {
		if err := j.Validate(); err != nil {
			out[i].Err = err
			continue
		}
		stamp(&j.CreatedAt, &j.UpdatedAt)
		j.CreatedAtMs = time.Now().UnixMilli()
		j.CreatedAt = j.CreatedAtMs / 1000 // one clock reading: created_at is derived from it (withoutDefaults)
		j.Status = model.JobDispatched
		j.Result, j.Error, j.ExitCode, j.Attempt, j.Worker, j.Fatal, j.StopAsked = nil, "", 0, 0, "", false, false
		cmp, ini := splitFields(j, jobInitialOnly)
		cmp, ini, defaults := withoutDefaults(cmp, ini)
		if last.prefix == "" || last.caller != j.CallerID {
			caller := strconv.FormatUint(uint64(j.CallerID), 10)
			last.caller, last.prefix, last.seq, last.member = j.CallerID, "job:"+caller+":", keys.JobSeq(j.CallerID), caller+":"
		}
		specs[i] = createSpec{object: "job", prefix: last.prefix, seq: last.seq, index: keys.JobIndex, member: last.member, id: j.ID, compare: cmp, initial: ini, eventType: string(model.EventJobCreated), eventActor: actor, events: true, statusIdx: keys.JobIndex, createdMs: j.CreatedAtMs, defaults: defaults}
		if _, ok := byCtx[j.ContextID]; !ok {
			order = append(order, j.ContextID)
		}
		byCtx[j.ContextID] = append(byCtx[j.ContextID], i)
	}
	for _, c := range order {
		db, err := s.Ctx(c)
		if err != nil {
			for _, i := range byCtx[c] {
				out[i].Err = err
			}
			continue
		}
		db.createJobs(ctx, jobs, specs, byCtx[c], out)
	}
	return out
}

// createdJob is the job the create script stored for c under id: what its hash
// decodes to (JobFromHash), decoded from the fields written (TestCreatedJobAsStored).
func (d *DB) createdJob(callerID, id uint32, c createSpec) (*model.Job, error) {
	var j model.Job
	if err := model.FromPairs(keys.Job(callerID, id), &j, c.compare, c.initial, []any{"id", strconv.FormatUint(uint64(id), 10)}); err != nil {
		return nil, err
	}
	if j.ContextID == 0 {
		j.ContextID = d.ContextID
	}
	return &j, nil
}

// createBatch bounds the jobs of one create script call: a flow's job with two
// dependencies takes ~55 µs of Redis (T40, idle) and ~6 Redis commands, so that one
// call stays near 1.8 ms (~256 commands: lib/store TestFlowJobsCreatedInBoundedCalls),
// well under the 10 ms no Redis command may take (128 a call reached 11.6 ms once in
// BenchmarkBigFlowLifecycle's 800 calls, 64 12.4 ms once in its 1,600), and does not
// hold up the other clients of its Redis server. The calls of a batch go in one
// round trip (EvalBatch).
const createBatch = 32

// createJobs creates the jobs at the indexes idx (all of this DB's context), then reads
// back those that existed already, filling out. Consecutive jobs of one caller share a
// script call, up to createBatch of them, each stored on its own in the order given.
func (d *DB) createJobs(ctx context.Context, jobs []*model.Job, specs []createSpec, idx []int, out []JobCreated) {
	these := make([]*model.Job, len(idx))
	for k, i := range idx {
		these[k] = jobs[i]
	}
	if err := d.markOrderFeatures(ctx, these); err != nil {
		for _, i := range idx {
			out[i].Err = err
		}
		return
	}
	var groups [][]int
	for _, i := range idx {
		if g := len(groups) - 1; g < 0 || len(groups[g]) == createBatch || !sameCreateCall(specs[groups[g][0]], specs[i]) {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], i)
	}
	calls := make([]Call, len(groups))
	for g, group := range groups {
		cs := make([]createSpec, len(group))
		for k, i := range group {
			cs[k] = specs[i]
		}
		calls[g] = createCall(cs...).call()
	}
	cmds := d.EvalBatch(ctx, calls)
	var made []int
	ids := map[int]uint32{}
	for g, group := range groups {
		outcomes, err := decodeCreateReply(cmds[g].Val())
		if cmds[g].Err() != nil {
			err = cmds[g].Err()
		}
		for k, i := range group {
			if err != nil {
				out[i].Err = fmt.Errorf("create %s: %w", specs[i].object, err)
				continue
			}
			res, err := createReply(specs[i], outcomes, k)
			if err != nil {
				out[i].Err = err
				continue
			}
			out[i].Created, ids[i] = res.created, res.id
			if res.created {
				// The script wrote exactly these fields and the id: the job as stored,
				// decoded from them without a map of them (createdHash).
				out[i].Job, out[i].Err = d.createdJob(jobs[i].CallerID, res.id, specs[i])
				continue
			}
			made = append(made, i) // found: read back as it is stored
		}
	}
	if len(made) == 0 {
		return
	}
	hashes := make([]*redis.MapStringStringCmd, len(made))
	_, perr := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range made {
			hashes[k] = p.HGetAll(ctx, keys.Job(jobs[i].CallerID, ids[i]))
		}
		return nil
	})
	for k, i := range made {
		err := hashes[k].Err()
		if err == nil && perr != nil && len(hashes[k].Val()) == 0 {
			err = perr // the pipeline failed as a whole
		}
		if err != nil {
			out[i].Err = fmt.Errorf("load job %d:%d: %w", jobs[i].CallerID, ids[i], err)
			continue
		}
		out[i].Job, out[i].Err = d.JobFromHash(jobs[i].CallerID, ids[i], hashes[k].Val())
		if out[i].Err == nil {
			out[i].Err = defaultsDiffer(specs[i], hashes[k].Val(), ids[i])
		}
	}
}

// jobDefaults are the seed's job fields a created job's hash leaves out when they hold
// their default (issue 49: ~90 B of a job's listpack, which took it out of jemalloc's
// 448 B class): a read gives an absent field its default (model's decode: "", 0, {},
// []; the scripts read it with an `or`). The value is the one HashFields writes.
var jobDefaults = map[string]string{"script": "", "script_type": "", "timeout": "0", "retries": "0",
	"env_vars": "{}", "result": "{}", "prerequisites": "[]", "dependends": "[]"}

// withoutDefaults drops from a job's compared and initial field/value pairs those of
// jobDefaults that hold their default, and created_at (a read derives it from
// created_at_ms, which CreateJobs makes of the same clock reading: model's
// deriveTimes), and returns the compared ones it dropped: the create script does not
// compare them with an existing job's, defaultsDiffer does.
// It filters cmp and ini in place (their caller's, made for it: splitFields).
func withoutDefaults(cmp, ini []any) (outCmp, outIni []any, dropped []string) {
	dropped = make([]string, 0, len(jobDefaults)) // (grown by append: ~4 allocations a job)
	keep := func(kv []any, note bool) []any {
		out := kv[:0]
		for i := 0; i+1 < len(kv); i += 2 {
			name, _ := kv[i].(string)
			if name == "created_at" {
				continue
			}
			if v, ok := jobDefaults[name]; ok && kv[i+1] == v {
				if note {
					dropped = append(dropped, name)
				}
				continue
			}
			out = append(out, kv[i], kv[i+1])
		}
		return out
	}
	return keep(cmp, true), keep(ini, false), dropped
}

// defaultsDiffer is the conflict the create script could not see for the existing job
// of c (its hash h): a field c left out as default (withoutDefaults) that the job holds
// with another value, as the script's comparison would have named it. Nothing was
// written for the job either way.
func defaultsDiffer(c createSpec, h map[string]string, id uint32) error {
	for _, name := range c.defaults {
		if v, ok := h[name]; ok && v != "" && v != jobDefaults[name] && !(jobDefaults[name] == "{}" && v == "[]") && !(jobDefaults[name] == "[]" && v == "{}") {
			return &ExistsError{What: fmt.Sprintf("%s %d", c.object, id), Field: name}
		}
	}
	return nil
}

// LoadJob reads job:<caller_id>:<id>.
func (d *DB) LoadJob(ctx context.Context, callerID, id uint32) (*model.Job, error) {
	h, err := d.HGetAll(ctx, keys.Job(callerID, id))
	if err != nil {
		return nil, fmt.Errorf("load job %d:%d: %w", callerID, id, err)
	}
	return d.JobFromHash(callerID, id, h)
}

// JobFromHash decodes a job hash read elsewhere (in a script's reply); an empty hash
// is ErrNotFound.
func (d *DB) JobFromHash(callerID, id uint32, h map[string]string) (*model.Job, error) {
	if len(h) == 0 {
		return nil, notFound("job %d of caller %d in context %d", id, callerID, d.ContextID)
	}
	var j model.Job
	if err := model.FromHash(keys.Job(callerID, id), h, &j); err != nil {
		return nil, err
	}
	if j.ContextID == 0 {
		j.ContextID = d.ContextID
	}
	return &j, nil
}

// LoadJobs reads several jobs of one caller in one round trip; missing ones are errors.
func (d *DB) LoadJobs(ctx context.Context, callerID uint32, ids []uint32) ([]*model.Job, error) {
	refs := make([]model.JobRef, len(ids))
	for i, id := range ids {
		refs[i] = model.JobRef{ContextID: d.ContextID, CallerID: callerID, ID: id}
	}
	jobs, errs := d.LoadJobRefs(ctx, refs)
	for _, err := range errs {
		if err != nil {
			return nil, err // the first: a failed pipeline fails every read alike
		}
	}
	return jobs, nil
}

// LoadJobRefs reads jobs of this context (refs' callers and ids) in one round trip:
// each its job, or its error (ErrNotFound for a job that is gone).
func (d *DB) LoadJobRefs(ctx context.Context, refs []model.JobRef) ([]*model.Job, []error) {
	out, errs := make([]*model.Job, len(refs)), make([]error, len(refs))
	cmds := make([]*redis.MapStringStringCmd, len(refs))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range refs {
			cmds[i] = p.HGetAll(ctx, keys.Job(r.CallerID, r.ID))
		}
		return nil
	}); err != nil {
		for i, r := range refs {
			errs[i] = fmt.Errorf("load job %d:%d: %w", r.CallerID, r.ID, err)
		}
		return out, errs
	}
	for i, r := range refs {
		out[i], errs[i] = d.JobFromHash(r.CallerID, r.ID, cmds[i].Val())
	}
	return out, errs
}

// startFields are what a flow's start reads of each job (LoadStartJobs): its
// dependencies, script type and function name (PlanDAG: a handler job naming its
// executor has no script type), its flow and pinned runner (the dispatch),
// and the fields that tell whether a run left fields to clear (ranBefore): every run
// is dispatched first, which writes attempt, and what ends a job without a run (a
// cancel, an undeliverable request) writes error, stop_requested or fatal. The id
// first: it tells a job that exists (a job created holding the defaults stores no
// script_type, nor dependends).
var startFields = []string{"id", "script_type", "dependends", "flow_id", "runner_id", "attempt", "error", "stop_requested", "fatal", "function_name"}

// LoadStartJobs reads what a flow's start needs of its jobs (startFields), all of one
// caller, in one round trip: for a large flow a third of reading the jobs whole, and
// its first job waits for it. A missing job is ErrNotFound.
func (d *DB) LoadStartJobs(ctx context.Context, callerID uint32, ids []uint32) ([]*model.Job, error) {
	return d.loadJobFields(ctx, callerID, ids, startFields)
}

// dispatchFields are the job fields a dispatch needs (DispatchMany: the request
// message names the job; a job pinned to a runner has a message of its own).
var dispatchFields = []string{"id", "flow_id", "runner_id"}

// LoadDispatchJobs reads of each job what a dispatch of it needs (its ids and
// runner_id), with one HMGET each in one round trip: a dispatch no longer carries the
// job, so reading it whole would be wasted.
func (d *DB) LoadDispatchJobs(ctx context.Context, callerID uint32, ids []uint32) ([]*model.Job, error) {
	return d.loadJobFields(ctx, callerID, ids, dispatchFields)
}

// loadJobFields reads the named fields of jobs of one caller, one HMGET each in one
// round trip, into jobs with their ids, caller and context set; fields[0] is one every
// job has: a job without it is missing (ErrNotFound).
func (d *DB) loadJobFields(ctx context.Context, callerID uint32, ids []uint32, fields []string) ([]*model.Job, error) {
	cmds := make([]*redis.SliceCmd, len(ids))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, keys.Job(callerID, id), fields...)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load jobs: %w", err)
	}
	out := make([]*model.Job, len(ids))
	for i, c := range cmds {
		vals := c.Val()
		if len(vals) == 0 || vals[0] == nil {
			return nil, notFound("job %d of caller %d in context %d", ids[i], callerID, d.ContextID)
		}
		j := model.Job{ID: ids[i], CallerID: callerID, ContextID: d.ContextID}
		if err := model.FromFields(keys.Job(callerID, ids[i]), fields, vals, &j); err != nil {
			return nil, err
		}
		out[i] = &j
	}
	return out, nil
}

// ---- Flows ----

var flowInitialOnly = withFields(timestampFields, "status", "result", "traceparent", "error", "failed_job", "started_at", "finished_at", "started_at_ms", "finished_at_ms")

// CreateFlow stores flow:<id> with status dispatched. The jobs must exist and belong
// to the flow's caller.
func (s *Store) CreateFlow(ctx context.Context, f *model.Flow, actor string) (*model.Flow, bool, error) {
	if err := f.Validate(); err != nil {
		return nil, false, err
	}
	db, err := s.Ctx(f.ContextID)
	if err != nil {
		return nil, false, err
	}
	done, err := db.commitStage(ctx, f)
	if err != nil {
		return nil, false, err
	}
	out, created, err := db.createFlow(ctx, f, actor)
	if done != nil {
		done(err == nil)
	}
	return out, created, err
}

// createFlow is CreateFlow once the flow is checked (and its stage, if any, held):
// its jobs are claimed for it (lua/flow_jobs.lua: each must exist and name no other
// flow; their flow_id set, for results, logs and retention; the flow's id held from
// other creates), then the flow is stored and the hold dropped. A refusal gives the
// claims back. A flow of id 0 takes the id its first claim reserved; when a flow of
// that id was stored in between, it claims again under the next one.
func (d *DB) createFlow(ctx context.Context, f *model.Flow, actor string) (*model.Flow, bool, error) {
	parts := flowJobParts(f.Jobs)
	for attempt := 1; ; attempt++ {
		c, err := d.claimFlowJobs(ctx, f.CallerID, f.ID, parts)
		if err != nil {
			return nil, false, err
		}
		stamp(&f.CreatedAt, &f.UpdatedAt)
		f.CreatedAtMs = time.Now().UnixMilli()
		f.Status = model.FlowDispatched
		f.Result, f.Error, f.FailedJob = nil, "", 0
		compare, ini := splitFields(f, flowInitialOnly)
		res, err := runCreate(ctx, d, createSpec{object: "flow", prefix: "flow:", seq: keys.FlowSeq, index: keys.FlowIndex, id: c.flow, compare: compare, initial: ini, eventType: string(model.EventFlowCreated), eventActor: actor, events: true, statusIdx: keys.FlowIndex})
		var exists *ExistsError
		if errors.As(err, &exists) {
			// refused: its id holds another flow. (Any other error may have
			// stored the flow: the claims stay, and a retry with its id finds them.)
			if rerr := c.release(ctx); rerr != nil {
				return nil, false, errors.Join(err, rerr)
			}
			if c.reserved && attempt < 3 {
				continue
			}
		}
		if err != nil {
			return nil, false, err
		}
		if err := c.done(ctx); err != nil {
			return nil, false, err
		}
		out, err := d.LoadFlow(ctx, res.id)
		return out, res.created, err
	}
}

// flowJobsPart is how many of a flow's jobs one lua/flow_jobs.lua call claims: ~1.5
// ms of Redis a call on K (a check and a link took 2.9 µs of its CPU a job, where the
// pipelines took 1.3–1.9 µs and supervisor-daemon several more).
const flowJobsPart = 1000

// flowJobParts is ids in parts of flowJobsPart, each part its ids joined by single
// spaces (lua/flow_jobs.lua's ids).
func flowJobParts(ids []uint32) []string {
	var parts []string
	var buf []byte
	for start := 0; start < len(ids); start += flowJobsPart {
		buf = buf[:0]
		for k, id := range ids[start:min(start+flowJobsPart, len(ids))] {
			if k > 0 {
				buf = append(buf, ' ')
			}
			buf = strconv.AppendUint(buf, uint64(id), 10)
		}
		parts = append(parts, string(buf))
	}
	return parts
}

// flowClaimHold is how long a flow.create's claims hold the flow's id
// (coord:flowclaim:<flow>) before it stores the flow: a create of the same id is
// refused meanwhile, as busy. The hold outlasts a create of the largest flow by far;
// one whose process died holds the id that long.
const flowClaimHold = time.Minute

// flowClaim is what a flow.create's claims of its jobs took (lua/flow_jobs.lua): the
// flow's id (reserved by the first claim when the flow came with 0), the claims'
// token, and, a part each, the ids of the jobs whose flow_id they set.
type flowClaim struct {
	d        *DB
	caller   string
	flow     uint32
	token    string
	reserved bool
	claimed  []string
}

// claimFlowJobs claims the parts of a caller's jobs (flowJobParts) for flow: the first
// part's call takes the flow's hold (and reserves its id when flow is 0), then the
// others' calls in one round trip. A job missing is refused as a ValidationError
// naming it (as ErrNotFound does), a job of another flow as one naming that flow,
// another create of the flow under way as a ConflictError; a refusal gives back what
// the other parts took. The caller ends the claim (done or release).
func (d *DB) claimFlowJobs(ctx context.Context, callerID, flow uint32, parts []string) (*flowClaim, error) {
	c := &flowClaim{d: d, caller: strconv.FormatUint(uint64(callerID), 10), flow: flow, reserved: flow == 0,
		token: strconv.FormatUint(uint64(flow), 10) + "." + strconv.FormatUint(rand.Uint64(), 36)}
	if len(parts) == 0 {
		parts = []string{""} // (the hold, and an id, all the same)
	}
	err := c.claim(ctx, parts[:1], "first")
	if err == nil && len(parts) > 1 {
		err = c.claim(ctx, parts[1:], "claim")
	}
	if err != nil {
		if rerr := c.release(ctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	return c, nil
}

// claim runs a claim call (mode "first" or "claim") for each part, in one round trip,
// and records what they took; the first refusal, in the parts' order, is its error.
func (c *flowClaim) claim(ctx context.Context, parts []string, mode string) error {
	calls := make([]Call, len(parts))
	fl := strconv.FormatUint(uint64(c.flow), 10)
	for k, ids := range parts {
		calls[k] = c.call(mode, ids)
	}
	var refused error
	for _, call := range c.d.EvalBatch(ctx, calls) {
		if err := call.Err(); err != nil {
			refused = cmp.Or(refused, fmt.Errorf("flow %d's jobs: %w", c.flow, err))
			continue
		}
		r, err := decodeFlowJobsReply(call.Val())
		switch {
		case err != nil:
			refused = cmp.Or(refused, err)
		case r.Busy == 1:
			refused = cmp.Or(refused, error(&ConflictError{Msg: fmt.Sprintf("flow %s: another flow.create of it is under way "+
				"(or its process ended within %v without storing it); retry", fl, flowClaimHold)}))
		case r.ID == "" && r.Flow > 0:
			c.flow = uint32(r.Flow)
			if r.Claimed != "" {
				c.claimed = append(c.claimed, r.Claimed)
			}
		case r.Owner == "":
			refused = cmp.Or(refused, error(&model.ValidationError{Object: "flow", ID: fl, Field: "jobs",
				Msg: fmt.Sprintf("jobs %v", notFound("job %s of caller %s in context %d", r.ID, c.caller, c.d.ContextID))}))
		default:
			refused = cmp.Or(refused, error(&model.ValidationError{Object: "flow", ID: fl, Field: "jobs",
				Msg: fmt.Sprintf("jobs: job %s already belongs to flow %s", r.ID, r.Owner)}))
		}
	}
	return refused
}

// call is a lua/flow_jobs.lua call of the claim in mode on ids.
func (c *flowClaim) call(mode, ids string) Call {
	return (&flowJobsArgs{FlowSeqKey: keys.FlowSeq, Caller: c.caller, Flow: strconv.FormatUint(uint64(c.flow), 10),
		Token: c.token, Mode: mode, HoldMs: flowClaimHold.Milliseconds(), IDs: ids}).call()
}

// done ends the claim of a flow stored: its hold dropped.
func (c *flowClaim) done(ctx context.Context) error {
	if _, err := c.d.runLua(ctx, c.call("done", "")); err != nil {
		return fmt.Errorf("flow %d's claim: %w", c.flow, err)
	}
	return nil
}

// release gives back what the claims took: each claimed job's flow_id removed where it
// still names the flow, a reserved id given back while it is the counter's last, the
// hold dropped.
func (c *flowClaim) release(ctx context.Context) error {
	if c.flow == 0 { // a claim of flow 0 refused before it reserved an id: nothing taken
		return nil
	}
	// a call a claimed part, at least one (each drops the hold and gives the id back
	// while they are still the claim's: the first does)
	parts := c.claimed
	if len(parts) == 0 {
		parts = []string{""}
	}
	calls := make([]Call, len(parts))
	for k, ids := range parts {
		calls[k] = c.call("release", ids)
	}
	for _, call := range c.d.EvalBatch(ctx, calls) {
		if err := call.Err(); err != nil {
			return fmt.Errorf("give back flow %d's jobs: %w", c.flow, err)
		}
	}
	c.claimed = nil
	return nil
}

// resultsMark is the field of coord:flowres:<id> that is no result (lua/lib_complete's
// RESULTS_MARK: it makes Redis keep a big flow's results as a hash table).
const resultsMark = "~"

// LoadFlow reads flow:<id>; while the flow runs, its result map is read from the side
// hash coord:flowres:<id>.
func (d *DB) LoadFlow(ctx context.Context, id uint32) (*model.Flow, error) {
	var h, res *redis.MapStringStringCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HGetAll(ctx, keys.Flow(id))
		res = p.HGetAll(ctx, keys.FlowResults(id))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load flow %d: %w", id, err)
	}
	if len(h.Val()) == 0 {
		return nil, notFound("flow %d in context %d", id, d.ContextID)
	}
	var f model.Flow
	if err := model.FromHash(keys.Flow(id), h.Val(), &f); err != nil {
		return nil, err
	}
	if r := res.Val(); !f.Status.Terminal() {
		delete(r, resultsMark)
		if len(r) > 0 {
			f.Result = r
		}
	}
	if f.ContextID == 0 {
		f.ContextID = d.ContextID
	}
	return &f, nil
}

// LoadFlow reads a flow of a context.
func (s *Store) LoadFlow(ctx context.Context, ctxID, id uint32) (*model.Flow, error) {
	db, err := s.Ctx(ctxID)
	if err != nil {
		return nil, err
	}
	return db.LoadFlow(ctx, id)
}

// ---- Messages ----

var messageInitialOnly = withFields(timestampFields, "status", "logs", "error", "transport_id", "transport_dst", "sent_at_ms", "acked_at_ms")

// CreateMessage stores message:<caller_id>:<id>.
func (d *DB) CreateMessage(ctx context.Context, m *model.Message, actor string) (*model.Message, bool, error) {
	if err := m.Validate(); err != nil {
		return nil, false, err
	}
	stamp(&m.CreatedAt, &m.UpdatedAt)
	m.CreatedAtMs = time.Now().UnixMilli()
	if m.Status == "" {
		m.Status = model.MessageDispatched
	}
	cmp, ini := splitFields(m, messageInitialOnly)
	caller := strconv.FormatUint(uint64(m.CallerID), 10)
	res, err := runCreate(ctx, d, createSpec{object: "message", prefix: "message:" + caller + ":", seq: keys.MessageSeq, index: keys.MessageIndex, member: caller + ":", id: m.ID, compare: cmp, initial: ini, eventType: "", eventActor: actor, events: true})
	if err != nil {
		return nil, false, err
	}
	out, err := d.LoadMessage(ctx, m.CallerID, res.id)
	return out, res.created, err
}

// LoadMessage reads message:<caller_id>:<id>.
func (d *DB) LoadMessage(ctx context.Context, callerID, id uint32) (*model.Message, error) {
	return d.LoadMessageKey(ctx, keys.Message(callerID, id))
}

// LoadMessageKey reads a message by its key. A local job message, which names its
// jobs (msgref.go), comes with the full jobs read from their hashes.
func (d *DB) LoadMessageKey(ctx context.Context, key string) (*model.Message, error) {
	h, err := d.HGetAll(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", key, err)
	}
	m, h, err := d.messageFromHash(key, h)
	if err != nil {
		return nil, err
	}
	if err := d.resolveJobs(ctx, m, h); err != nil {
		return nil, err
	}
	return m, nil
}

// MessageFromHash decodes a message hash read elsewhere (in a script's reply); an
// empty hash is ErrNotFound. A local job message's jobs are as it names them: ids (and
// a result's end) only.
func (d *DB) MessageFromHash(key string, h map[string]string) (*model.Message, error) {
	m, _, err := d.messageFromHash(key, h)
	return m, err
}

// messageFromHash is MessageFromHash that also returns the hash as the message was
// read from it: a short message made into the hash it stands for (expandShort), the
// fields stored in parts joined (joinParts).
func (d *DB) messageFromHash(key string, h map[string]string) (*model.Message, map[string]string, error) {
	if len(h) == 0 {
		return nil, nil, notFound("%s in context %d", key, d.ContextID)
	}
	h = joinParts(d.expandShort(key, h))
	var m model.Message
	if err := model.FromHash(key, h, &m); err != nil {
		return nil, nil, err
	}
	if m.ContextID == 0 {
		m.ContextID = d.ContextID
	}
	if h[fieldJobRef] == "1" {
		fillLocalDefaults(&m)
		// a local job message's jobs are of its caller and flow (a result's list
		// leaves them out: resultJobRef)
		for i := range m.Job {
			if m.Job[i].CallerID == 0 {
				m.Job[i].CallerID = m.CallerID
			}
			if m.Job[i].FlowID == 0 {
				m.Job[i].FlowID = m.FlowID
			}
		}
	}
	return &m, h, nil
}

// SetFlowTraceparent stores a producer's W3C traceparent (validated by the caller) on
// each of a flow's jobs and then on the flow (lua/set_traceparent.lua, a call a part
// of flowJobsPart jobs, in one round trip: one call over a 100,000-job flow would hold
// Redis for tens of milliseconds), each hash only while it exists (a flow deleted
// meanwhile is not made again): the jobs' attempts continue that trace (the claim
// stores its trace id as theirs). A failure midway leaves the flow without it; the
// start's next try sets it again.
func (d *DB) SetFlowTraceparent(ctx context.Context, f *model.Flow, tp string) error {
	caller, fl := strconv.FormatUint(uint64(f.CallerID), 10), strconv.FormatUint(uint64(f.ID), 10)
	parts := flowJobParts(f.Jobs)
	if len(parts) == 0 {
		parts = []string{""}
	}
	calls := make([]Call, len(parts))
	for k, ids := range parts {
		calls[k] = (&setTraceparentArgs{FlowKey: keys.Flow(f.ID), Caller: caller, Flow: fl, Tp: tp, Last: k == len(parts)-1, IDs: ids}).call()
	}
	for _, c := range d.EvalBatch(ctx, calls) {
		if err := c.Err(); err != nil {
			return fmt.Errorf("store the traceparent of flow %d: %w", f.ID, err)
		}
	}
	return nil
}

// execUnhealthyTTL bounds how long an executor's unhealthy marks outlive their last
// writer (each mark also carries its own end).
const execUnhealthyTTL = 2 * time.Minute

// MarkExecutorUnhealthy records in the context that the runner process worker's pool of
// the executor crash-loops or cannot start, until the given time: other processes then
// do not count it among those that can take the executor's jobs.
func (d *DB) MarkExecutorUnhealthy(ctx context.Context, executor, worker string, until time.Time) error {
	_, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keys.ExecUnhealthy(executor), worker, until.UnixMilli())
		p.PExpire(ctx, keys.ExecUnhealthy(executor), execUnhealthyTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark executor %s unhealthy in context %d: %w", executor, d.ContextID, err)
	}
	return nil
}

// ClearExecutorUnhealthy removes the process's unhealthy mark of the executor.
func (d *DB) ClearExecutorUnhealthy(ctx context.Context, executor, worker string) error {
	_, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keys.ExecUnhealthy(executor), worker)
		return nil
	})
	if err != nil {
		return fmt.Errorf("clear executor %s unhealthy mark in context %d: %w", executor, d.ContextID, err)
	}
	return nil
}

// ExecutorHealthyElsewhere reports whether a live runner process of the context other
// than worker may take the executor's jobs: a process (heartbeat within ProcessTTL) of
// a runner id that announced the executor (its wakers set) with no current unhealthy
// mark. Two round trips; called only when worker's own pool is unhealthy.
func (d *DB) ExecutorHealthyElsewhere(ctx context.Context, executor, worker string) (bool, error) {
	var ids *redis.StringSliceCmd
	var marks *redis.MapStringStringCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		ids = p.SMembers(ctx, keys.Wakers(keys.Queue(model.ExecQueueSuffix(executor))))
		marks = p.HGetAll(ctx, keys.ExecUnhealthy(executor))
		return nil
	}); err != nil {
		return false, fmt.Errorf("runners of executor %s in context %d: %w", executor, d.ContextID, err)
	}
	if len(ids.Val()) == 0 {
		return false, nil
	}
	now := time.Now()
	procs := make([]*redis.StringSliceCmd, 0, len(ids.Val()))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Select(ctx, 0) // heartbeats are in DB 0 of the context's server
		for _, id := range ids.Val() {
			n, err := strconv.ParseUint(id, 10, 32)
			if err != nil {
				continue
			}
			procs = append(procs, p.ZRangeByScore(ctx, keys.RunnerProcsOf(uint32(n)), &redis.ZRangeBy{
				Min: strconv.FormatInt(now.Add(-ProcessTTL).UnixMilli(), 10), Max: "+inf"}))
		}
		return nil
	}); err != nil {
		return false, fmt.Errorf("live runners of executor %s in context %d: %w", executor, d.ContextID, err)
	}
	for _, c := range procs {
		for _, proc := range c.Val() {
			if proc == worker {
				continue
			}
			if until, err := strconv.ParseInt(marks.Val()[proc], 10, 64); err == nil && until > now.UnixMilli() {
				continue
			}
			return true, nil
		}
	}
	return false, nil
}

// markOrderFeatures records in the context the claim-order features the jobs use
// (keys.OrderFeatures: a priority other than the default, a concurrency key), before
// they are stored: routing reads those fields only in a context that uses them.
func (d *DB) markOrderFeatures(ctx context.Context, jobs []*model.Job) error {
	var fs []any
	for _, j := range jobs {
		if j.Priority != 0 && j.Priority != model.PriorityDefault && !slices.Contains(fs, any("priority")) {
			fs = append(fs, "priority")
		}
		if j.ConcurrencyKey != "" && !slices.Contains(fs, any("concurrency")) {
			fs = append(fs, "concurrency")
		}
	}
	if len(fs) == 0 {
		return nil
	}
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, keys.OrderFeatures, fs...)
		return nil
	}); err != nil {
		return fmt.Errorf("record the order features of context %d: %w", d.ContextID, err)
	}
	return nil
}
