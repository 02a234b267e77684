package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/remote"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// service implements the public API once; JSON-RPC (jsonrpc.go) and gRPC (grpc.go)
// decode requests into its parameter types and call it.
type service struct {
	store      *store.Store
	scheduler  herov1.SchedulerClient
	waiter     *waiter
	log        zerolog.Logger
	runMargin  time.Duration
	dispatcher *dispatcherService
	secrets    *operatorSecrets
	metrics    *apiMetrics
	contexts   *contextCache // the submissions' authorizations (guarded: contextCache)
	groups     *submitGroups // the group commit of single submissions; nil: none
	loads      *endedLoads   // job.run's reads of ended jobs, grouped; nil: one read each
}

// ---- parameters (the JSON-RPC params objects; docs/api.md) ----

type idParams struct {
	ID uint32 `json:"id"`
}

type actorIn struct {
	ID      uint32   `json:"id"`
	Pubkey  string   `json:"pubkey"`
	Address []string `json:"address"`
}

type actorCreateParams struct {
	Actor *actorIn `json:"actor"`
}

type contextIn struct {
	ID               uint32           `json:"id"`
	Admins           []uint32         `json:"admins"`
	Readers          []uint32         `json:"readers"`
	Executors        []uint32         `json:"executors"`
	RetentionSeconds int64            `json:"retention_seconds"`
	AllowedSources   []string         `json:"allowed_sources"`
	JobDefaults      *model.JobLimits `json:"job_defaults"`
	JobMax           *model.JobLimits `json:"job_max"`
}

type contextUpdateParams struct {
	ID               uint32    `json:"id"`
	Admins           *[]uint32 `json:"admins"`
	Readers          *[]uint32 `json:"readers"`
	Executors        *[]uint32 `json:"executors"`
	RetentionSeconds *int64    `json:"retention_seconds"`
	AllowedSources   *[]string `json:"allowed_sources"`
	// Set: replaces them ({} clears them). job_max is the operators'.
	JobDefaults *model.JobLimits `json:"job_defaults"`
	JobMax      *model.JobLimits `json:"job_max"`
}

type contextCreateParams struct {
	Context *contextIn `json:"context"`
}

type runnerIn struct {
	ID          uint32   `json:"id"`
	Pubkey      string   `json:"pubkey"`
	Address     string   `json:"address"`
	Topic       string   `json:"topic"`
	Local       *bool    `json:"local"`
	Secret      string   `json:"secret"`
	ScriptTypes []string `json:"script_types"`
	Executors   []string `json:"executors"`
}

type runnerCreateParams struct {
	ContextID uint32    `json:"context_id"`
	Runner    *runnerIn `json:"runner"`
}

type ctxIDParams struct {
	ContextID uint32 `json:"context_id"`
	ID        uint32 `json:"id"`
}

type listParams struct {
	ContextID uint32 `json:"context_id"`
	Limit     int    `json:"limit"`
	Cursor    string `json:"cursor"`
	Status    string `json:"status"`
}

type jobIn struct {
	ID            uint32            `json:"id"`
	CallerID      uint32            `json:"caller_id"`
	ContextID     uint32            `json:"context_id"`
	Script        string            `json:"script"`
	ScriptType    string            `json:"script_type"`
	Timeout       uint32            `json:"timeout"`
	Retries       uint32            `json:"retries"` // at most 255 (toModel checks)
	EnvVars       map[string]string `json:"env_vars"`
	Prerequisites []string          `json:"prerequisites"`
	Depends       []uint32          `json:"depends"`
	Dependends    []uint32          `json:"dependends"`
	Dependencies  []uint32          `json:"dependencies"`
	RunnerID      uint32            `json:"runner_id"`
	FunctionName  string            `json:"function_name"`
	Args          json.RawMessage   `json:"args"`
	Kwargs        json.RawMessage   `json:"kwargs"`
	Limits        *model.JobLimits  `json:"limits"`
}

type jobCreateParams struct {
	ContextID uint32 `json:"context_id"`
	Job       *jobIn `json:"job"`
}

type jobRefParams struct {
	ContextID uint32 `json:"context_id"`
	CallerID  uint32 `json:"caller_id"`
	ID        uint32 `json:"id"`
	Offset    int64  `json:"offset"`
}

type jobRunParams struct {
	ContextID uint32  `json:"context_id"`
	Job       *jobIn  `json:"job"`
	Timeout   *uint32 `json:"timeout"`
}

type flowIn struct {
	ID        uint32            `json:"id"`
	CallerID  uint32            `json:"caller_id"`
	ContextID uint32            `json:"context_id"`
	Jobs      []uint32          `json:"jobs"`
	EnvVars   map[string]string `json:"env_vars"`
}

type flowCreateParams struct {
	ContextID uint32  `json:"context_id"`
	Flow      *flowIn `json:"flow"`
}

type messageCreateParams struct {
	ContextID uint32         `json:"context_id"`
	Message   *model.Message `json:"message"`
}

// dlqEntry is a dead-letter queue entry as the API lists it.
type dlqEntry = model.DLQEntry

type dlqListResult struct {
	Items      []dlqEntry `json:"items"`
	NextCursor string     `json:"next_cursor"`
}

type dlqShowResult struct {
	Entry dlqEntry   `json:"entry"`
	Job   *model.Job `json:"job"`
}

type dlqPurgeParams struct {
	ContextID uint32 `json:"context_id"`
	CallerID  uint32 `json:"caller_id"`
	ID        uint32 `json:"id"`
}

type purgeResult struct {
	Purged int64 `json:"purged"`
}

type deleteJobParams struct {
	ContextID uint32 `json:"context_id"`
	CallerID  uint32 `json:"caller_id"`
	ID        uint32 `json:"id"`
	Force     bool   `json:"force"`
}

type deleteParams struct {
	ContextID uint32 `json:"context_id"`
	ID        uint32 `json:"id"`
	Force     bool   `json:"force"`
}

type deleteContextParams struct {
	ID    uint32 `json:"id"`
	Force bool   `json:"force"`
}

type deleteResult struct {
	Deleted bool `json:"deleted"`
}

type eventsParams struct {
	ContextID uint32 `json:"context_id"`
	After     string `json:"after"`
	Limit     int    `json:"limit"`
	FlowID    uint32 `json:"flow_id"`
}

// ---- results that are not plain objects ----

type listResult[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

type logsResult struct {
	Logs       string `json:"logs"`
	NextOffset int64  `json:"next_offset"`
	Complete   bool   `json:"complete"`
}

type dagNode struct {
	ID         uint32   `json:"id"`
	Depends    []uint32 `json:"depends"`
	Dependents []uint32 `json:"dependents"`
	NodeStatus string   `json:"node_status"`
	JobStatus  string   `json:"job_status"`
	Attempt    uint32   `json:"attempt"`
	Error      string   `json:"error,omitempty"`
	ScriptType string   `json:"script_type"`
	// FunctionName is a handler job's executor#handler.
	FunctionName string `json:"function_name,omitempty"`
}

type dagResult struct {
	Flow  *model.Flow `json:"flow"`
	Nodes []dagNode   `json:"nodes"`
}

type eventsResult struct {
	Events []store.Event `json:"events"`
	Next   string        `json:"next"`
}

// ---- authorization ----

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

// ---- actors and contexts ----

func (s *service) actorCreate(ctx context.Context, p Principal, in actorCreateParams) (*model.Actor, error) {
	if err := requireOperator(p, "actor.create"); err != nil {
		return nil, err
	}
	if in.Actor == nil {
		return nil, invalidParams("actor", "actor is required")
	}
	pk := strings.ToLower(strings.TrimSpace(in.Actor.Pubkey))
	a, _, err := s.store.CreateActor(ctx, &model.Actor{ID: in.Actor.ID, Pubkey: pk, Address: in.Actor.Address})
	return a, err
}

type actorUpdateParams struct {
	ID      uint32    `json:"id"`
	Pubkey  *string   `json:"pubkey"`
	Address *[]string `json:"address"`
}

// actorUpdate replaces an actor's key or addresses: the operator may change any
// actor, an actor only itself (its request was signed with its current key). From
// the next request on, only the new key verifies.
func (s *service) actorUpdate(ctx context.Context, p Principal, in actorUpdateParams) (*model.Actor, error) {
	if in.ID == 0 {
		return nil, invalidParams("id", "id must be at least 1")
	}
	if !p.Operator && p.Actor != in.ID {
		return nil, permissionDenied("actor %d may update only itself; actor.update of actor %d needs the operator secret", p.Actor, in.ID)
	}
	if in.Pubkey == nil && in.Address == nil {
		return nil, invalidParams("pubkey", "give pubkey and/or address to change")
	}
	if in.Pubkey != nil {
		pk := strings.ToLower(strings.TrimSpace(*in.Pubkey))
		in.Pubkey = &pk
	}
	a, err := s.store.UpdateActor(ctx, in.ID, in.Pubkey, in.Address)
	if err != nil {
		return nil, err
	}
	s.log.Info().Uint32("actor", in.ID).Str("by", p.Name()).Bool("pubkey_changed", in.Pubkey != nil).Msg("actor updated")
	return a, nil
}

// ---- operator secrets ----

// secretView is an operator secret as the API shows it.
type secretView = model.OperatorSecret

func viewSecret(r store.SecretRecord, p Principal) secretView {
	return secretView{Fingerprint: r.Fingerprint, Source: r.Source, CreatedAtMs: r.CreatedMs, RevokedAtMs: r.RevokedMs, Reason: r.Reason, Current: r.Fingerprint == p.Fingerprint}
}

type secretListResult struct {
	Items []secretView `json:"items"`
}

type noParams struct{}

func (s *service) secretList(ctx context.Context, p Principal, _ noParams) (*secretListResult, error) {
	if err := requireOperator(p, "secret.list"); err != nil {
		return nil, err
	}
	recs, err := s.secrets.list(ctx)
	if err != nil {
		return nil, err
	}
	out := &secretListResult{Items: []secretView{}}
	for _, r := range recs {
		out.Items = append(out.Items, viewSecret(r, p))
	}
	return out, nil
}

type secretCreateResult struct {
	Fingerprint string `json:"fingerprint"`
	Secret      string `json:"secret"`
}

func (s *service) secretCreate(ctx context.Context, p Principal, _ noParams) (*secretCreateResult, error) {
	if err := requireOperator(p, "secret.create"); err != nil {
		return nil, err
	}
	secret, fp, err := s.secrets.generate(ctx, store.SecretAPI)
	if err != nil {
		return nil, err
	}
	s.log.Info().Str("fingerprint", fp).Str("by", p.Name()).Msg("operator secret created")
	return &secretCreateResult{Fingerprint: fp, Secret: secret}, nil
}

type secretRevokeParams struct {
	Fingerprint string `json:"fingerprint"`
}

func (s *service) secretRevoke(ctx context.Context, p Principal, in secretRevokeParams) (*secretView, error) {
	if err := requireOperator(p, "secret.revoke"); err != nil {
		return nil, err
	}
	if in.Fingerprint == "" {
		return nil, invalidParams("fingerprint", "fingerprint is required (secret.list lists them)")
	}
	rec, err := s.secrets.revoke(ctx, in.Fingerprint, p.Name())
	if err != nil {
		return nil, err
	}
	s.log.Info().Str("fingerprint", in.Fingerprint).Str("by", p.Name()).Msg("operator secret revoked")
	v := viewSecret(*rec, p)
	return &v, nil
}

func (s *service) actorLoad(ctx context.Context, _ Principal, in idParams) (*model.Actor, error) {
	if in.ID == 0 {
		return nil, invalidParams("id", "id must be at least 1")
	}
	return s.store.LoadActor(ctx, in.ID)
}

func (s *service) contextCreate(ctx context.Context, p Principal, in contextCreateParams) (*model.Context, error) {
	if err := requireOperator(p, "context.create"); err != nil {
		return nil, err
	}
	if in.Context == nil {
		return nil, invalidParams("context", "context is required")
	}
	c := &model.Context{ID: in.Context.ID, Admins: in.Context.Admins, Readers: in.Context.Readers, Executors: in.Context.Executors,
		RetentionSeconds: in.Context.RetentionSeconds, AllowedSources: in.Context.AllowedSources,
		JobDefaults: nilIfZero(in.Context.JobDefaults), JobMax: nilIfZero(in.Context.JobMax)}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := s.checkActors(ctx, "context", c); err != nil {
		return nil, err
	}
	out, _, err := s.store.CreateContext(ctx, c, p.Name())
	return out, err
}

// checkActors refuses a context whose lists name an actor that does not exist.
func (s *service) checkActors(ctx context.Context, param string, c *model.Context) error {
	for _, l := range [][]uint32{c.Admins, c.Readers, c.Executors} {
		for _, id := range l {
			if _, err := s.store.LoadActor(ctx, id); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return invalidParams(param, "actor %d does not exist; create it first", id)
				}
				return err
			}
		}
	}
	return nil
}

func nilIfZero(l *model.JobLimits) *model.JobLimits {
	if l.IsZero() {
		return nil
	}
	return l
}

// checkLimits refuses a job that asks for more than its context's job_max allows.
func checkLimits(c *model.Context, j *model.Job) error {
	if err := j.Limits.Validate("job", j.ID, "limits"); err != nil {
		return err
	}
	if why := j.Limits.Exceeds(c.JobMax); why != "" {
		return invalidParams("job.limits", "job.limits: %s of context %d (its job_max)", why, c.ID)
	}
	return nil
}

// contextUpdate changes a context's lists, retention or allowed sources (operators and
// the context's admins).
func (s *service) contextUpdate(ctx context.Context, p Principal, in contextUpdateParams) (*model.Context, error) {
	c, _, err := s.authorize(ctx, p, in.ID, RoleAdmin, "context.update")
	if err != nil {
		return nil, err
	}
	if in.Admins != nil {
		c.Admins = *in.Admins
	}
	if in.Readers != nil {
		c.Readers = *in.Readers
	}
	if in.Executors != nil {
		c.Executors = *in.Executors
	}
	if in.RetentionSeconds != nil {
		c.RetentionSeconds = *in.RetentionSeconds
	}
	if in.AllowedSources != nil {
		c.AllowedSources = *in.AllowedSources
	}
	if in.JobMax != nil {
		// A context's admins are its tenant: the most its jobs may take is not theirs to set.
		if err := requireOperator(p, "context.update of job_max"); err != nil {
			return nil, err
		}
		c.JobMax = nilIfZero(in.JobMax)
	}
	if in.JobDefaults != nil {
		c.JobDefaults = nilIfZero(in.JobDefaults)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := s.checkActors(ctx, "id", c); err != nil {
		return nil, err
	}
	return s.store.UpdateContext(ctx, c, p.Name())
}

func (s *service) contextLoad(ctx context.Context, p Principal, in idParams) (*model.Context, error) {
	c, _, err := s.authorize(ctx, p, in.ID, RoleReader, "context.load")
	return c, err
}

// ---- runners ----

func (s *service) runnerCreate(ctx context.Context, p Principal, in runnerCreateParams) (*model.Runner, error) {
	if in.Runner == nil {
		return nil, invalidParams("runner", "runner is required")
	}
	if _, _, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "runner.create"); err != nil {
		return nil, err
	}
	r := &model.Runner{ID: in.Runner.ID, Pubkey: in.Runner.Pubkey, Address: in.Runner.Address, Topic: in.Runner.Topic, Local: true, Secret: in.Runner.Secret,
		Executors: in.Runner.Executors}
	if in.Runner.Local != nil {
		r.Local = *in.Runner.Local
	}
	for _, t := range in.Runner.ScriptTypes {
		st, err := model.ParseScriptType(t)
		if err != nil {
			return nil, invalidParams("runner.script_types", "runner.script_types: %v", err)
		}
		r.ScriptTypes = append(r.ScriptTypes, st)
	}
	out, _, err := s.store.CreateRunner(ctx, in.ContextID, r, p.Name())
	return out, err
}

func (s *service) runnerLoad(ctx context.Context, p Principal, in ctxIDParams) (*model.Runner, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "runner.load")
	if err != nil {
		return nil, err
	}
	return db.LoadRunner(ctx, in.ID)
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

func (s *service) runnerList(ctx context.Context, p Principal, in listParams) (*listResult[*model.Runner], error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "runner.list")
	if err != nil {
		return nil, err
	}
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return nil, err
	}
	members, next, err := db.Page(ctx, keys.RunnerIndex, in.Cursor, limit)
	if err != nil {
		return nil, invalidParams("cursor", "%v", err)
	}
	out := &listResult[*model.Runner]{Items: []*model.Runner{}, NextCursor: next}
	for _, m := range members {
		var id uint32
		if _, err := fmt.Sscanf(m, "%d", &id); err != nil {
			continue
		}
		if r, err := db.LoadRunner(ctx, id); err == nil {
			out.Items = append(out.Items, r)
		}
	}
	return out, nil
}

// ---- jobs ----

func (in *jobIn) toModel(ctxID uint32) (*model.Job, error) {
	deps := in.Dependends
	for _, alt := range [][]uint32{in.Depends, in.Dependencies} {
		if len(alt) > 0 {
			if len(deps) > 0 && !sameIDs(deps, alt) {
				return nil, invalidParams("job.depends", "job.depends, job.dependends and job.dependencies disagree; give one of them")
			}
			deps = alt
		}
	}
	if in.Retries > 255 {
		return nil, invalidParams("job.retries", "job.retries %d is more than 255", in.Retries)
	}
	if in.ContextID != 0 && in.ContextID != ctxID {
		return nil, invalidParams("job.context_id", "job.context_id %d is not the request's context_id %d", in.ContextID, ctxID)
	}
	var st model.ScriptType // none given: a handler job's comes from its function_name
	if in.ScriptType != "" {
		var err error
		if st, err = model.ParseScriptType(in.ScriptType); err != nil {
			return nil, &model.ValidationError{Object: "job", ID: fmt.Sprint(in.ID), Field: "script_type", Msg: err.Error()}
		}
	}
	j := &model.Job{ID: in.ID, CallerID: in.CallerID, ContextID: ctxID, Script: in.Script, ScriptType: st, Timeout: in.Timeout,
		Retries: uint8(in.Retries), EnvVars: in.EnvVars, Prerequisites: in.Prerequisites, Dependends: deps, RunnerID: in.RunnerID,
		FunctionName: in.FunctionName, Args: nullToNil(in.Args), Kwargs: nullToNil(in.Kwargs), Limits: nilIfZero(in.Limits)}
	if j.FunctionName == "" && (len(j.Args) > 0 || len(j.Kwargs) > 0) {
		return nil, invalidParams("job.function_name", "job.args and job.kwargs need job.function_name (a handler job)")
	}
	return j, nil
}

func nullToNil(raw json.RawMessage) json.RawMessage {
	if t := strings.TrimSpace(string(raw)); t == "" || t == "null" {
		return nil
	}
	return raw
}

func sameIDs(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (s *service) jobCreate(ctx context.Context, p Principal, in jobCreateParams) (*model.Job, error) {
	j, err := s.checkJobCreate(ctx, p, in, newCreateChecks())
	if err != nil {
		return nil, err
	}
	out, _, err := s.createJob(ctx, j, p.Name())
	return out, err
}

// createChecks remembers, for the job.create requests of one JSON-RPC batch, what
// their checks read: each context's authorization, whether an executor is served, and
// whether a pinned runner is local. None of them can change through a job.create, so
// the batch reads each once and answers as the requests one by one would.
type createChecks struct {
	auth   map[uint32]authorized
	served map[string]error // "<context>/<executor>"
	local  map[string]bool  // "<context>/<runner>": a runner known to be remote
}

type authorized struct {
	c   *model.Context
	db  *store.DB
	err error
}

func newCreateChecks() *createChecks {
	return &createChecks{auth: map[uint32]authorized{}, served: map[string]error{}, local: map[string]bool{}}
}

// checkJobCreate checks one job.create request and returns the job to store.
func (s *service) checkJobCreate(ctx context.Context, p Principal, in jobCreateParams, cc *createChecks) (*model.Job, error) {
	if in.Job == nil {
		return nil, invalidParams("job", "job is required")
	}
	a, ok := cc.auth[in.ContextID]
	if !ok {
		a.c, a.db, a.err = s.authorize(ctx, p, in.ContextID, RoleAdmin, "job.create")
		cc.auth[in.ContextID] = a
	}
	if a.err != nil {
		return nil, a.err
	}
	c, db := a.c, a.db
	j, err := in.Job.toModel(in.ContextID)
	if err != nil {
		return nil, err
	}
	if err := checkLimits(c, j); err != nil {
		return nil, err
	}
	if j.CallerID, err = callerFor(p, j.CallerID, "job"); err != nil {
		return nil, err
	}
	if j.RunnerID != 0 {
		// A job pinned to a remote runner travels over Mycelium: one too large for a
		// node is refused now rather than failed at dispatch.
		key := fmt.Sprintf("%d/%d", in.ContextID, j.RunnerID)
		remoteRunner, ok := cc.local[key]
		if !ok {
			r, err := db.LoadRunner(ctx, j.RunnerID)
			remoteRunner = err == nil && !r.Local
			cc.local[key] = remoteRunner
		}
		if remoteRunner {
			if err := remote.CheckJobSize(j); err != nil {
				return nil, invalidParams("job", "%v", err)
			}
		}
	} else if exec, _ := j.Handler(); exec != "" {
		if err := j.Validate(); err != nil {
			return nil, err
		}
		key := fmt.Sprintf("%d/%s", in.ContextID, exec)
		err, ok := cc.served[key]
		if !ok {
			err = checkServed(ctx, db, j) // no runner has its executor
			cc.served[key] = err
		}
		if err != nil {
			return nil, err
		}
	}
	return j, nil
}

// maxCreateBatch bounds the jobs of one job.create_batch (CreateJobs) call.
const maxCreateBatch = 1000

type jobCreateManyParams struct {
	ContextID uint32   `json:"context_id"`
	Jobs      []*jobIn `json:"jobs"`
}

// createdItem is one job of a job.create_batch, in the request's order: the job as
// stored (created, or found with the same content), or why it was refused.
type createdItem struct {
	Job   *model.Job `json:"job,omitempty"`
	Error *itemError `json:"error,omitempty"`
}

// itemError is why one item of a batch was refused: the JSON-RPC error its call alone
// would have got (code, message, data; over gRPC, grpcCode names the code).
type itemError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func newItemError(err error) *itemError {
	ae := toAPIError(err)
	return &itemError{Code: ae.Code, Message: ae.Msg, Data: ae.Data}
}

// jobCreateMany creates up to maxCreateBatch jobs of one context in one call, as a
// JSON-RPC batch of job.create requests would (jobCreateBatch): each job on its own.
// The call fails as a whole only when it is malformed or the caller may not create
// jobs in the context.
func (s *service) jobCreateMany(ctx context.Context, p Principal, in jobCreateManyParams) (*createBatchResult, error) {
	cc, reqs, err := s.createManyChecks(ctx, p, in, "job.create_batch")
	if err != nil {
		return nil, err
	}
	answers := make([]batchAnswer, len(reqs))
	s.createJobs(ctx, p, reqs, answers, cc)
	return batchItems(answers), nil
}

// jobCheckMany checks up to maxCreateBatch jobs of one context as job.create_batch
// would (the same checks, each job on its own, and the job's own validation, which the
// store applies) and stores nothing: an item is the job as it would be stored (its id
// 0 when the server would pick it) or the error job.create_batch would give it. A
// flow's submission (the SDKs' SubmitFlow, heroctl flow submit) checks its jobs so
// before it creates the first, so that a flow with a job that would be refused — an
// executor no runner of the context announced — stores nothing. A chosen id that names
// a stored job of other content is found only by the creation.
func (s *service) jobCheckMany(ctx context.Context, p Principal, in jobCreateManyParams) (*createBatchResult, error) {
	cc, reqs, err := s.createManyChecks(ctx, p, in, "job.check_batch")
	if err != nil {
		return nil, err
	}
	answers := make([]batchAnswer, len(reqs))
	for i, in := range reqs {
		j, err := s.checkJobCreate(ctx, p, in, cc)
		if err == nil {
			err = j.Validate()
		}
		answers[i] = batchAnswer{result: j, err: err}
	}
	return batchItems(answers), nil
}

// createManyChecks checks the bounds of a job.create_batch (or job.check_batch) call
// and authorizes it once (a refusal refuses the whole call; the items' checks take the
// authorization from the createChecks returned), and returns its items as job.create
// requests.
func (s *service) createManyChecks(ctx context.Context, p Principal, in jobCreateManyParams, method string) (*createChecks, []jobCreateParams, error) {
	if len(in.Jobs) == 0 {
		return nil, nil, invalidParams("jobs", "jobs is empty; give 1 to %d jobs", maxCreateBatch)
	}
	if len(in.Jobs) > maxCreateBatch {
		return nil, nil, invalidParams("jobs", "%d jobs in one call; at most %d", len(in.Jobs), maxCreateBatch)
	}
	cc := newCreateChecks()
	var a authorized
	if a.c, a.db, a.err = s.authorize(ctx, p, in.ContextID, RoleAdmin, method); a.err != nil {
		return nil, nil, a.err
	}
	cc.auth[in.ContextID] = a
	reqs := make([]jobCreateParams, len(in.Jobs))
	for i, j := range in.Jobs {
		reqs[i] = jobCreateParams{ContextID: in.ContextID, Job: j}
	}
	return cc, reqs, nil
}

// batchItems are a batch's answers as its items, in order.
func batchItems(answers []batchAnswer) *createBatchResult {
	out := &createBatchResult{Items: make([]createdItem, len(answers))}
	for i, a := range answers {
		if a.err != nil {
			out.Items[i].Error = newItemError(a.err)
			continue
		}
		out.Items[i].Job, _ = a.result.(*model.Job)
	}
	return out
}

type createBatchResult struct {
	Items []createdItem `json:"items"`
}

// createJobs checks and stores the jobs of job.create requests, each on its own (one
// bad request gets its own error in out, the others are stored; a request whose out
// holds an error already is skipped), reading what the checks need once (cc), in one
// round trip per context, in the requests' order.
func (s *service) createJobs(ctx context.Context, p Principal, reqs []jobCreateParams, out []batchAnswer, cc *createChecks) {
	tp := traceparentOf(ctx)
	var jobs []*model.Job
	var at []int
	for i, in := range reqs {
		if out[i].err != nil {
			continue
		}
		j, err := s.checkJobCreate(ctx, p, in, cc)
		if err != nil {
			out[i].err = err
			continue
		}
		if tp != "" {
			j.Traceparent = tp
		}
		jobs, at = append(jobs, j), append(at, i)
	}
	if len(jobs) == 0 {
		return
	}
	for k, r := range s.store.CreateJobs(ctx, jobs, p.Name()) {
		out[at[k]] = batchAnswer{result: r.Job, err: r.Err}
	}
}

// jobCreateBatch answers the consecutive job.create requests of a JSON-RPC batch:
// each is decoded, checked and answered on its own (one bad request gets its own error,
// the others are stored), the checks read what they need once (createChecks), and the
// jobs are stored in one round trip per context, in the requests' order.
func (s *service) jobCreateBatch(ctx context.Context, p Principal, raws []json.RawMessage) []batchAnswer {
	out := make([]batchAnswer, len(raws))
	reqs := make([]jobCreateParams, len(raws))
	for i, raw := range raws {
		out[i].err = decodeParams(raw, &reqs[i])
	}
	s.createJobs(ctx, p, reqs, out, newCreateChecks())
	return out
}

func (s *service) jobLoad(ctx context.Context, p Principal, in jobRefParams) (*model.Job, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "job.load")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	return db.LoadJob(ctx, in.CallerID, in.ID)
}

func (s *service) jobList(ctx context.Context, p Principal, in listParams) (*listResult[*model.Job], error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "job.list")
	if err != nil {
		return nil, err
	}
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return nil, err
	}
	index := keys.JobIndex
	if in.Status != "" {
		st, err := model.ParseJobStatus(in.Status)
		if err != nil {
			return nil, invalidParams("status", "%v", err)
		}
		index = keys.StatusIndex(keys.JobIndex, string(st))
	}
	members, next, err := db.Page(ctx, index, in.Cursor, limit)
	if err != nil {
		return nil, invalidParams("cursor", "%v", err)
	}
	jobs, err := db.LoadJobMembers(ctx, members)
	if err != nil {
		return nil, err
	}
	return &listResult[*model.Job]{Items: jobs, NextCursor: next}, nil
}

// standaloneJob checks a job of no flow for job.run and job.submit: its limits within
// the context's job_max, no dependencies, its caller, and its pinned runner (store's
// SubmitJobs checks that some runner serves the others: a job no runner could ever
// take fails at once, storing nothing).
func standaloneJob(ctx context.Context, p Principal, c *model.Context, db *store.DB, in *jobIn, ctxID uint32) (*model.Job, error) {
	j, err := in.toModel(ctxID)
	if err != nil {
		return nil, err
	}
	if err := checkLimits(c, j); err != nil {
		return nil, err
	}
	if len(j.Dependends) > 0 {
		return nil, invalidParams("job.depends", "a standalone job cannot depend on other jobs; use a flow")
	}
	if j.CallerID, err = callerFor(p, j.CallerID, "job"); err != nil {
		return nil, err
	}
	if err := j.Validate(); err != nil { // also fills script_type from an executor prefix
		return nil, err
	}
	if j.RunnerID != 0 {
		r, err := db.LoadRunner(ctx, j.RunnerID)
		if err != nil {
			return nil, invalidParams("job.runner_id", "runner %d does not exist in context %d", j.RunnerID, ctxID)
		}
		if !r.Local {
			return nil, invalidParams("job.runner_id", "runner %d is not local: remote runners need the mycelium-gateway", j.RunnerID)
		}
	}
	return j, nil
}

func (s *service) jobRun(ctx context.Context, p Principal, in jobRunParams) (*model.Job, error) {
	if in.Job == nil {
		return nil, invalidParams("job", "job is required")
	}
	// Created and dispatched in one step (as job.submit, in its group commit), then
	// watched: a job that ended before the watch began wakes it at once (the waiter
	// keeps recent ends).
	sub, err := s.submit(ctx, p, in.ContextID, []submitItem{{Job: in.Job}}, "job.run", "")
	if err != nil {
		return nil, err
	}
	db, err := s.store.Ctx(in.ContextID)
	if err != nil {
		return nil, err
	}
	created := sub[0].Job
	wait := time.Duration(created.Timeout)*time.Second + s.runMargin
	if created.Timeout == 0 {
		wait = 5*time.Minute + s.runMargin
	}
	if in.Timeout != nil {
		wait = time.Duration(*in.Timeout) * time.Second
	}
	ref := created.Ref()
	done := s.waiter.watch(jobKey(ref))
	defer s.waiter.unwatch(jobKey(ref), done)
	if sub[0].Existing && jobFinal(created) {
		return created, nil // a job created before with the same id, and ended (read whole by the submission)
	}
	if sub[0].Existing && created.Status != model.JobStarted {
		// job.run of a job created before with the same id: dispatched now, as before.
		if _, err := s.scheduler.DispatchJob(ctx, &herov1.DispatchJobRequest{ContextId: in.ContextID, CallerId: created.CallerID, JobId: created.ID, Actor: p.Name()}); err != nil {
			return nil, err
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	safety := time.NewTicker(5 * time.Second) // a missed notification (pub/sub reconnect) costs at most this
	defer safety.Stop()
	for {
		select {
		case <-safety.C:
			if j, err := db.LoadJob(ctx, created.CallerID, created.ID); err == nil && jobFinal(j) {
				return j, nil
			}
		case <-done:
			j, err := s.loadEnded(ctx, db, created)
			if err != nil {
				return nil, err
			}
			if j.Status.Terminal() {
				return j, nil
			}
		case <-t.C:
			return nil, &apiError{Code: codeTimeout, Msg: fmt.Sprintf("job %s did not end within %v; it goes on: follow it with job.load", keys.Job(created.CallerID, created.ID), wait),
				Data: map[string]any{"job_key": keys.Job(created.CallerID, created.ID), "context_id": in.ContextID, "caller_id": created.CallerID, "id": created.ID}}
		case <-ctx.Done():
			return nil, &apiError{Code: codeTimeout, Msg: "request cancelled while waiting for job " + keys.Job(created.CallerID, created.ID)}
		}
	}
}

// loadEnded reads job j of db, whose done notice came: with the calls the same notice
// woke, in one round trip (endedLoads); on its own once they shut down (a call whose
// job ended is answered with it, not refused: its retry would run the job again).
func (s *service) loadEnded(ctx context.Context, db *store.DB, j *model.Job) (*model.Job, error) {
	if s.loads != nil {
		got, err := s.loads.load(ctx, model.JobRef{ContextID: db.ContextID, CallerID: j.CallerID, ID: j.ID})
		if err != errShuttingDown {
			return got, err
		}
	}
	return db.LoadJob(ctx, j.CallerID, j.ID)
}

func (s *service) jobStop(ctx context.Context, p Principal, in jobRefParams) (*model.Job, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, "job.stop")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	if _, _, err := db.RequestStop(ctx, in.CallerID, in.ID, p.Name()); err != nil {
		return nil, err
	}
	return db.LoadJob(ctx, in.CallerID, in.ID)
}

func (s *service) jobLogs(ctx context.Context, p Principal, in jobRefParams) (*logsResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "job.logs")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	if in.Offset < 0 {
		return nil, invalidParams("offset", "offset must not be negative")
	}
	j, err := db.LoadJob(ctx, in.CallerID, in.ID)
	if err != nil {
		return nil, err
	}
	b, next, err := db.ReadLog(ctx, in.CallerID, in.ID, in.Offset, 1<<20)
	if err != nil {
		return nil, err
	}
	return &logsResult{Logs: string(b), NextOffset: next, Complete: j.Status.Terminal() && len(b) < 1<<20}, nil
}

// ---- flows ----

func (s *service) flowCreate(ctx context.Context, p Principal, in flowCreateParams) (*model.Flow, error) {
	if in.Flow == nil {
		return nil, invalidParams("flow", "flow is required")
	}
	if _, _, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "flow.create"); err != nil {
		return nil, err
	}
	if in.Flow.ContextID != 0 && in.Flow.ContextID != in.ContextID {
		return nil, invalidParams("flow.context_id", "flow.context_id %d is not the request's context_id %d", in.Flow.ContextID, in.ContextID)
	}
	caller, err := callerFor(p, in.Flow.CallerID, "flow")
	if err != nil {
		return nil, err
	}
	f := &model.Flow{ID: in.Flow.ID, CallerID: caller, ContextID: in.ContextID, Jobs: in.Flow.Jobs, EnvVars: in.Flow.EnvVars}
	out, _, err := s.createFlow(ctx, f, p.Name())
	return out, err
}

func (s *service) flowLoad(ctx context.Context, p Principal, in ctxIDParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "flow.load")
	if err != nil {
		return nil, err
	}
	return db.LoadFlow(ctx, in.ID)
}

type flowWaitParams struct {
	ContextID uint32  `json:"context_id"`
	ID        uint32  `json:"id"`
	Timeout   *uint32 `json:"timeout"` // seconds to wait at most (default 300, at most 3600)
}

// flowWait waits until a flow ends (finished or error) and returns it. A flow that has
// already ended is returned at once. It costs nothing per job: the script that ends
// the flow publishes one notification, which is what a client waiting for a result
// needs (following the event stream costs the server a read of every job's events).
func (s *service) flowWait(ctx context.Context, p Principal, in flowWaitParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "flow.wait")
	if err != nil {
		return nil, err
	}
	if in.ID == 0 {
		return nil, invalidParams("id", "id is required")
	}
	wait := 5 * time.Minute
	if in.Timeout != nil {
		if *in.Timeout == 0 || *in.Timeout > 3600 {
			return nil, invalidParams("timeout", "timeout must be 1 to 3600 seconds, got %d", *in.Timeout)
		}
		wait = time.Duration(*in.Timeout) * time.Second
	}
	k := flowKey(in.ContextID, in.ID)
	done := s.waiter.watch(k) // before the first load: an end in between is not missed
	defer s.waiter.unwatch(k, done)
	f, err := db.LoadFlow(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	safety := time.NewTicker(5 * time.Second) // a missed notification (pub/sub reconnect) costs at most this
	defer safety.Stop()
	for !f.Status.Terminal() {
		select {
		case <-done:
		case <-safety.C:
		case <-t.C:
			return nil, &apiError{Code: codeTimeout, Msg: fmt.Sprintf("flow %d did not end within %v (status %s); it goes on: wait again or follow it with flow.load", in.ID, wait, f.Status),
				Data: map[string]any{"context_id": in.ContextID, "id": in.ID, "status": string(f.Status)}}
		case <-ctx.Done():
			return nil, &apiError{Code: codeTimeout, Msg: fmt.Sprintf("request cancelled while waiting for flow %d", in.ID)}
		}
		if f, err = db.LoadFlow(ctx, in.ID); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (s *service) flowList(ctx context.Context, p Principal, in listParams) (*listResult[*model.Flow], error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "flow.list")
	if err != nil {
		return nil, err
	}
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return nil, err
	}
	index := keys.FlowIndex
	if in.Status != "" {
		st, err := model.ParseFlowStatus(in.Status)
		if err != nil {
			return nil, invalidParams("status", "%v", err)
		}
		index = keys.StatusIndex(keys.FlowIndex, string(st))
	}
	members, next, err := db.Page(ctx, index, in.Cursor, limit)
	if err != nil {
		return nil, invalidParams("cursor", "%v", err)
	}
	flows, err := db.LoadFlowMembers(ctx, members)
	if err != nil {
		return nil, err
	}
	return &listResult[*model.Flow]{Items: flows, NextCursor: next}, nil
}

func (s *service) flowCancel(ctx context.Context, p Principal, in ctxIDParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, "flow.cancel")
	if err != nil {
		return nil, err
	}
	if _, err := db.LoadFlow(ctx, in.ID); err != nil {
		return nil, err
	}
	if _, err := s.scheduler.CancelFlow(ctx, &herov1.SchedulerCancelFlowRequest{ContextId: in.ContextID, FlowId: in.ID, Actor: p.Name()}); err != nil {
		return nil, err
	}
	return db.LoadFlow(ctx, in.ID)
}

func (s *service) jobDelete(ctx context.Context, p Principal, in deleteJobParams) (*deleteResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "job.delete")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	if err := db.DeleteJob(ctx, in.CallerID, in.ID, in.Force, p.Name()); err != nil {
		return nil, err
	}
	return &deleteResult{Deleted: true}, nil
}

func (s *service) flowDelete(ctx context.Context, p Principal, in deleteParams) (*deleteResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "flow.delete")
	if err != nil {
		return nil, err
	}
	if in.Force {
		// A running flow is cancelled first, so its runners stop its jobs.
		if f, err := db.LoadFlow(ctx, in.ID); err == nil && f.Status == model.FlowStarted {
			if _, err := s.scheduler.CancelFlow(ctx, &herov1.SchedulerCancelFlowRequest{ContextId: in.ContextID, FlowId: in.ID, Actor: p.Name()}); err != nil {
				return nil, err
			}
		}
	}
	if err := db.DeleteFlow(ctx, in.ID, in.Force, p.Name()); err != nil {
		return nil, err
	}
	return &deleteResult{Deleted: true}, nil
}

func (s *service) runnerDelete(ctx context.Context, p Principal, in deleteParams) (*deleteResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "runner.delete")
	if err != nil {
		return nil, err
	}
	if err := db.DeleteRunner(ctx, in.ID, in.Force, p.Name()); err != nil {
		return nil, err
	}
	return &deleteResult{Deleted: true}, nil
}

func (s *service) contextDelete(ctx context.Context, p Principal, in deleteContextParams) (*deleteResult, error) {
	if _, _, err := s.authorize(ctx, p, in.ID, RoleAdmin, "context.delete"); err != nil {
		return nil, err
	}
	if err := s.store.DeleteContext(ctx, in.ID, in.Force); err != nil {
		return nil, err
	}
	s.log.Info().Uint32("context_id", in.ID).Str("actor", p.Name()).Bool("force", in.Force).Msg("context deleted")
	return &deleteResult{Deleted: true}, nil
}

func (s *service) flowStart(ctx context.Context, p Principal, in ctxIDParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, "flow.start")
	if err != nil {
		return nil, err
	}
	f, err := db.LoadFlow(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if err := traceFlow(ctx, db, f); err != nil {
		return nil, err
	}
	res, err := s.scheduler.StartFlow(ctx, &herov1.SchedulerStartFlowRequest{ContextId: in.ContextID, FlowId: in.ID, Actor: p.Name()})
	if err != nil {
		return nil, err
	}
	_ = res
	return db.LoadFlow(ctx, in.ID)
}

func (s *service) flowDAG(ctx context.Context, p Principal, in ctxIDParams) (*dagResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "flow.dag")
	if err != nil {
		return nil, err
	}
	f, err := db.LoadFlow(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	jobs, err := db.LoadJobs(ctx, f.CallerID, f.Jobs)
	if err != nil {
		return nil, err
	}
	out := &dagResult{Flow: f, Nodes: []dagNode{}}
	g, err := db.LoadDAG(ctx, in.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	dependents := map[uint32][]uint32{}
	for _, j := range jobs {
		for _, d := range j.Dependends {
			dependents[d] = append(dependents[d], j.ID)
		}
	}
	for _, j := range jobs {
		n := dagNode{ID: j.ID, Depends: nonNil(j.Dependends), Dependents: nonNil(dependents[j.ID]), NodeStatus: string(model.NodePending),
			JobStatus: string(j.Status), Attempt: j.Attempt, ScriptType: string(j.ScriptType), FunctionName: j.FunctionName}
		if g != nil {
			if gn := g.Nodes[j.ID]; gn != nil {
				n.NodeStatus, n.Attempt, n.Error = string(gn.Status), gn.Attempt, gn.Error
			}
		}
		out.Nodes = append(out.Nodes, n)
	}
	return out, nil
}

func nonNil(ids []uint32) []uint32 {
	if ids == nil {
		return []uint32{}
	}
	return ids
}

// ---- messages ----

func (s *service) messageCreate(ctx context.Context, p Principal, in messageCreateParams) (*model.Message, error) {
	if in.Message == nil {
		return nil, invalidParams("message", "message is required")
	}
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "message.create")
	if err != nil {
		return nil, err
	}
	m := in.Message
	if m.ContextID != 0 && m.ContextID != in.ContextID {
		return nil, invalidParams("message.context_id", "message.context_id %d is not the request's context_id %d", m.ContextID, in.ContextID)
	}
	m.ContextID = in.ContextID
	if m.CallerID, err = callerFor(p, m.CallerID, "message"); err != nil {
		return nil, err
	}
	m.Status, m.Kind, m.Error, m.Logs, m.TransportID = "", "", "", nil, ""
	out, _, err := db.CreateMessage(ctx, m, p.Name())
	return out, err
}

func (s *service) messageLoad(ctx context.Context, p Principal, in jobRefParams) (*model.Message, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "message.load")
	if err != nil {
		return nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, invalidParams("id", "caller_id and id are required")
	}
	return db.LoadMessage(ctx, in.CallerID, in.ID)
}

// ---- events ----

func (s *service) eventsRead(ctx context.Context, p Principal, in eventsParams) (*eventsResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "events.read")
	if err != nil {
		return nil, err
	}
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return nil, err
	}
	after := in.After
	if after == "$" {
		// Only the position: the newest event id, to follow from there without a gap.
		last, err := db.LastEventID(ctx)
		if err != nil {
			return nil, err
		}
		return &eventsResult{Events: []store.Event{}, Next: last}, nil
	}
	if err := db.CheckEventPosition(ctx, after); err != nil {
		return nil, err
	}
	out := &eventsResult{Events: []store.Event{}, Next: after}
	for len(out.Events) < limit {
		evs, err := db.ReadEvents(ctx, after, int64(limit))
		if err != nil {
			return nil, invalidParams("after", "%v", err)
		}
		for _, e := range evs {
			after = e.ID
			if in.FlowID == 0 || e.FlowID == in.FlowID {
				out.Events = append(out.Events, e)
				if len(out.Events) == limit {
					break
				}
			}
		}
		out.Next = after
		if len(evs) < limit {
			break
		}
	}
	return out, nil
}

// jobFinal reports whether a job has ended for good (no retry will follow).
func jobFinal(j *model.Job) bool {
	switch j.Status {
	case model.JobFinished:
		return true
	case model.JobError:
		return j.Fatal || j.StopAsked || j.Attempt > uint32(j.Retries)
	}
	return false
}

// ---- flow retry and the dead-letter queue ----

func (s *service) flowRetry(ctx context.Context, p Principal, in ctxIDParams) (*model.Flow, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleExecutor, "flow.retry")
	if err != nil {
		return nil, err
	}
	if _, err := db.LoadFlow(ctx, in.ID); err != nil {
		return nil, err
	}
	if _, err := s.scheduler.RetryFlow(ctx, &herov1.SchedulerRetryFlowRequest{ContextId: in.ContextID, FlowId: in.ID, Actor: p.Name()}); err != nil {
		return nil, err
	}
	return db.LoadFlow(ctx, in.ID)
}

func entryOf(j *model.Job) dlqEntry {
	return dlqEntry{CallerID: j.CallerID, ID: j.ID, FlowID: j.FlowID, Error: j.Error, Attempt: j.Attempt, DLQAtMs: j.DLQAtMs,
		ScriptType: string(j.ScriptType), FunctionName: j.FunctionName}
}

func (s *service) dlqList(ctx context.Context, p Principal, in listParams) (*dlqListResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleReader, "dlq.list")
	if err != nil {
		return nil, err
	}
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return nil, err
	}
	members, next, err := db.DLQPage(ctx, in.Cursor, limit)
	if err != nil {
		return nil, invalidParams("cursor", "%v", err)
	}
	jobs, err := db.LoadJobMembers(ctx, members)
	if err != nil {
		return nil, err
	}
	out := &dlqListResult{Items: []dlqEntry{}, NextCursor: next}
	for _, j := range jobs {
		out.Items = append(out.Items, entryOf(j))
	}
	return out, nil
}

func (s *service) dlqJob(ctx context.Context, p Principal, in jobRefParams, need Role, method string) (*model.Job, *store.DB, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, need, method)
	if err != nil {
		return nil, nil, err
	}
	if in.CallerID == 0 || in.ID == 0 {
		return nil, nil, invalidParams("id", "caller_id and id are required")
	}
	in2, err := db.DLQHas(ctx, in.CallerID, in.ID)
	if err != nil {
		return nil, nil, err
	}
	if !in2 {
		return nil, nil, &apiError{Code: codeNotFound, Msg: fmt.Sprintf("job %d of caller %d is not in the dead-letter queue of context %d", in.ID, in.CallerID, in.ContextID)}
	}
	j, err := db.LoadJob(ctx, in.CallerID, in.ID)
	return j, db, err
}

func (s *service) dlqShow(ctx context.Context, p Principal, in jobRefParams) (*dlqShowResult, error) {
	j, _, err := s.dlqJob(ctx, p, in, RoleReader, "dlq.show")
	if err != nil {
		return nil, err
	}
	return &dlqShowResult{Entry: entryOf(j), Job: j}, nil
}

// dlqRequeue runs a dead-lettered job again with a fresh attempt count: a standalone
// job is dispatched again; a flow's job re-runs through flow.retry of its flow.
func (s *service) dlqRequeue(ctx context.Context, p Principal, in jobRefParams) (*model.Job, error) {
	j, db, err := s.dlqJob(ctx, p, in, RoleExecutor, "dlq.requeue")
	if err != nil {
		return nil, err
	}
	if j.FlowID != 0 {
		if _, err := s.scheduler.RetryFlow(ctx, &herov1.SchedulerRetryFlowRequest{ContextId: in.ContextID, FlowId: j.FlowID, Actor: p.Name()}); err != nil {
			return nil, err
		}
		return db.LoadJob(ctx, in.CallerID, in.ID)
	}
	if err := db.ResetJob(ctx, in.CallerID, in.ID, p.Name()); err != nil {
		return nil, err
	}
	if _, err := s.scheduler.DispatchJob(ctx, &herov1.DispatchJobRequest{ContextId: in.ContextID, CallerId: in.CallerID, JobId: in.ID, Actor: p.Name()}); err != nil {
		return nil, err
	}
	return db.LoadJob(ctx, in.CallerID, in.ID)
}

func (s *service) dlqPurge(ctx context.Context, p Principal, in dlqPurgeParams) (*purgeResult, error) {
	_, db, err := s.authorize(ctx, p, in.ContextID, RoleAdmin, "dlq.purge")
	if err != nil {
		return nil, err
	}
	var members []string
	if in.ID != 0 || in.CallerID != 0 {
		if in.ID == 0 || in.CallerID == 0 {
			return nil, invalidParams("id", "give caller_id and id for one job, or neither for the whole queue")
		}
		members = []string{fmt.Sprintf("%d:%d", in.CallerID, in.ID)}
	}
	n, err := db.DLQPurge(ctx, members, p.Name())
	if err != nil {
		return nil, err
	}
	return &purgeResult{Purged: n}, nil
}

// checkServed refuses, storing nothing, a job no runner of its context could take: a
// handler job that names its executor ("executor#handler") needs a runner that
// announced that executor; any other job a runner serving its script type.
func checkServed(ctx context.Context, db *store.DB, j *model.Job) error {
	if exec, _ := j.Handler(); exec != "" {
		ok, err := db.ExecutorServed(ctx, exec)
		if err != nil {
			return err
		}
		if !ok {
			return invalidParams("job.function_name", "no runner in context %d has executor %q", db.ContextID, exec)
		}
		return nil
	}
	ok, err := db.ScriptTypeServed(ctx, j.ScriptType)
	if err != nil {
		return err
	}
	if !ok {
		return invalidParams("job.script_type", "no runner in context %d serves script_type %q", db.ContextID, j.ScriptType)
	}
	return nil
}
