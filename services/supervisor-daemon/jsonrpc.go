package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/model"
)

// method is one JSON-RPC method.
type method struct {
	call    func(ctx context.Context, p Principal, params json.RawMessage) (any, error)
	noAuth  bool
	summary string
	params  any // a zero value of the params type, for rpc.discover
	result  string
	// batch, when set, answers several consecutive requests of this method in a
	// JSON-RPC batch at once, each on its own (one answer per request, in order).
	batch func(ctx context.Context, p Principal, params []json.RawMessage) []batchAnswer
}

// batchAnswer is one request's answer of a method's batch: its result or its error.
type batchAnswer struct {
	result any
	err    error
}

// rpcMethod adapts a typed service method: params are decoded strictly (unknown
// fields and wrong types are invalid params naming the field).
func rpcMethod[P any, R any](summary, result string, fn func(context.Context, Principal, P) (R, error)) method {
	var zero P
	return method{
		summary: summary, params: zero, result: result,
		call: func(ctx context.Context, p Principal, raw json.RawMessage) (any, error) {
			var params P
			if err := decodeParams(raw, &params); err != nil {
				return nil, err
			}
			return fn(ctx, p, params)
		},
	}
}

func (s *service) methods() map[string]method {
	m := map[string]method{
		"actor.create":      rpcMethod("Create an actor (operator only).", "Actor", s.actorCreate),
		"actor.load":        rpcMethod("Load an actor.", "Actor", s.actorLoad),
		"actor.update":      rpcMethod("Replace an actor's pubkey and/or addresses (the operator, or the actor itself signing with its current key).", "Actor", s.actorUpdate),
		"secret.list":       rpcMethod("List the operator secrets by fingerprint, with their source and revocation (operator only).", "{items: [{fingerprint, source, created_at_ms, revoked_at_ms, reason, current}]}", s.secretList),
		"secret.create":     rpcMethod("Create an operator secret; it is returned this once (operator only).", "{fingerprint, secret}", s.secretCreate),
		"secret.revoke":     rpcMethod("Revoke an operator secret by fingerprint; the last accepted one cannot be (operator only).", "OperatorSecret", s.secretRevoke),
		"context.create":    rpcMethod("Create a context (operator only); its id is its Redis DB.", "Context", s.contextCreate),
		"context.load":      rpcMethod("Load a context.", "Context", s.contextLoad),
		"context.update":    rpcMethod("Change a context's admins, readers, executors, retention_seconds, allowed_sources, job_defaults or priority_age_ms (admins), job_max or weight (operators).", "Context", s.contextUpdate),
		"runner.create":     rpcMethod("Register a runner in a context (admins).", "Runner", s.runnerCreate),
		"runner.load":       rpcMethod("Load a runner with its live processes.", "Runner", s.runnerLoad),
		"runner.list":       rpcMethod("List runners, newest first.", "{items: [Runner], next_cursor}", s.runnerList),
		"job.create":        rpcMethod("Create a job (admins).", "Job", s.jobCreate),
		"job.create_batch":  rpcMethod("job.create for a list of jobs of one context in one call (at most 1000), each on its own: an item is the job or its error (admins).", "{items: [{job} | {error: {code, message, data}}]}", s.jobCreateMany),
		"job.check_batch":   rpcMethod("Check a list of jobs of one context as job.create_batch would and store nothing (at most 1000): an item is the job as it would be stored or its error (admins).", "{items: [{job} | {error: {code, message, data}}]}", s.jobCheckMany),
		"job.load":          rpcMethod("Load a job.", "Job", s.jobLoad),
		"job.list":          rpcMethod("List jobs, newest first; optional status filter.", "{items: [Job], next_cursor}", s.jobList),
		"job.run":           rpcMethod("Create and run a standalone job and wait for its end (executors).", "Job", s.jobRun),
		"job.submit":        rpcMethod("Create and dispatch a standalone job and return at once; unique_key with unique_ttl_seconds returns the job the key names while it lasts; run_at (RFC 3339) or delay (\"90s\") stores it scheduled and dispatches it then (executors).", "{job: Job, existing}", s.jobSubmit),
		"job.submit_batch":  rpcMethod("job.submit for a list of jobs in one call (at most 1000); one bad job refuses them all (executors).", "{items: [{job: Job, existing}]}", s.jobSubmitBatch),
		"job.stop":          rpcMethod("Stop a job: a running one is killed, a queued one never starts (executors).", "Job", s.jobStop),
		"job.logs":          rpcMethod("Read a job's log from an offset.", "{logs, next_offset, complete}", s.jobLogs),
		"flow.create":       rpcMethod("Create a flow of existing jobs of one caller, or store a flow begun with flow.begin (admins).", "Flow", s.flowCreate),
		"flow.begin":        rpcMethod("Begin a flow created as a unit: reserves its id and its jobs' ids; job.create_batch with flow_id creates them, flow.create stores the flow; unrenewed within ttl_seconds its jobs are deleted (admins).", "{flow_id, caller_id, first_job_id, last_job_id, expires_at_ms, ttl_seconds, max_jobs}", s.flowBegin),
		"flow.abort":        rpcMethod("Delete the jobs of a flow begun with flow.begin and not stored (admins).", "{deleted}", s.flowAbort),
		"flow.load":         rpcMethod("Load a flow; while it runs, its result map so far.", "Flow", s.flowLoad),
		"flow.list":         rpcMethod("List flows, newest first; optional status filter.", "{items: [Flow], next_cursor}", s.flowList),
		"flow.start":        rpcMethod("Validate a flow's DAG and start it; with run_at (RFC 3339) or delay (\"90s\"), schedule its start then (executors).", "Flow", s.flowStart),
		"flow.wait":         rpcMethod("Wait until a flow ends (finished or error) and return it; optional timeout in seconds (default 300).", "Flow", s.flowWait),
		"flow.dag":          rpcMethod("A flow's DAG with each node's state; with limit (or for a flow of more than 10,000 jobs) a page of it from offset, with next_offset and counts.", "{flow, nodes, next_offset?, counts?}", s.flowDAG),
		"flow.counts":       rpcMethod("A flow's nodes counted by state (total, ended, completed, failed, cancelled, not_ended), O(1) whatever its size.", "{started, total, ended, completed, failed, cancelled, not_ended}", s.flowCounts),
		"flow.cancel":       rpcMethod("Cancel a flow: running jobs are stopped, pending ones never start (executors).", "Flow", s.flowCancel),
		"flow.delete":       rpcMethod("Delete an ended (or, with force, running) flow with its jobs, messages, DAG state and logs (admins).", "{deleted}", s.flowDelete),
		"job.delete":        rpcMethod("Delete a job of no flow with its log and messages (admins).", "{deleted}", s.jobDelete),
		"runner.delete":     rpcMethod("Delete a runner with its heartbeats and pinned queues (admins).", "{deleted}", s.runnerDelete),
		"flow.retry":        rpcMethod("Re-run a failed flow's failed and cancelled jobs, keeping the finished ones (executors).", "Flow", s.flowRetry),
		"dlq.list":          rpcMethod("List the dead-letter queue: jobs that failed for good, newest first.", "{items: [{caller_id, id, flow_id, error, attempt, dlq_at_ms, …}], next_cursor}", s.dlqList),
		"dlq.show":          rpcMethod("One dead-lettered job with its last error and attempts.", "{entry, job}", s.dlqShow),
		"dlq.requeue":       rpcMethod("Run a dead-lettered job again with a fresh attempt count (executors).", "Job", s.dlqRequeue),
		"dlq.purge":         rpcMethod("Drop one entry (caller_id, id) or all entries of the dead-letter queue (admins).", "{purged}", s.dlqPurge),
		"context.delete":    rpcMethod("Delete a context and everything in it; refused while flows run unless force (admins).", "{deleted}", s.contextDelete),
		"message.create":    rpcMethod("Create a message (admins).", "Message", s.messageCreate),
		"message.load":      rpcMethod("Load a message.", "Message", s.messageLoad),
		"events.read":       rpcMethod("Read a context's events after an event id.", "{events, next}", s.eventsRead),
		"flow.pause":        rpcMethod("Pause a started flow with a note: none of its jobs is dispatched until flow.resume; running jobs go on (executors).", "Flow", s.flowPause),
		"flow.resume":       rpcMethod("Resume a paused flow: its ready jobs are dispatched (executors).", "Flow", s.flowResume),
		"schedule.create":   rpcMethod("Create a schedule of a job, or of a flow (flow: {env_vars, jobs: [{name, depends, job}]}: each run creates and starts a flow of it): spec {cron | every, timezone, jitter}, overlap (skip, buffer_one, allow_all, cancel_previous), catchup_window, paused with a note (admins).", "Schedule", s.scheduleCreate),
		"schedule.load":     rpcMethod("Load a schedule with its next tick and its counts (fired, skipped, missed).", "Schedule", s.scheduleLoad),
		"schedule.list":     rpcMethod("List a context's schedules.", "{items: [Schedule]}", s.scheduleList),
		"schedule.update":   rpcMethod("Change a schedule's spec, job or flow, overlap or catchup_window; its next tick is counted from now (admins).", "Schedule", s.scheduleUpdate),
		"schedule.pause":    rpcMethod("Pause a schedule with a note: no tick fires until it is resumed (executors).", "Schedule", s.schedulePause),
		"schedule.resume":   rpcMethod("Resume a paused schedule from its next tick after now; the ticks of the pause are not caught up (executors).", "Schedule", s.scheduleResume),
		"schedule.delete":   rpcMethod("Delete a schedule; its runs stay (admins).", "{deleted}", s.scheduleDelete),
		"schedule.trigger":  rpcMethod("Make a run of a schedule now, whatever its spec or pause (executors).", "{job: Job (a flow's schedule: flow: Flow), existing}", s.scheduleTrigger),
		"queue.list":        rpcMethod("List a context's job queues (each script type's and executor's its runners serve, and the paused ones) with their depth and pause.", "{items: [Queue]}", s.queueList),
		"queue.pause":       rpcMethod("Pause a context's job queue (script_type or executor) with a note: no job of it starts until queue.resume; running jobs go on (executors).", "Queue", s.queuePause),
		"queue.resume":      rpcMethod("Resume a paused job queue: its jobs start again (executors).", "Queue", s.queueResume),
		"console.link":      rpcMethod("A one-time link that signs a browser in to the web console as the caller (valid 2 minutes, once; heroctl console login).", "{token, path, expires_at_ms}", s.consoleLink),
		"schedule.backfill": rpcMethod("Make the runs of a schedule's ticks from FROM (included) to TO (excluded), at most 10,000; a tick whose run exists is not made again (admins).", "{runs, existing}", s.scheduleBackfill),
		"limit.set":         rpcMethod("Set a run or rate limit of a context: scope (context, type:<script type>, executor:<name>, key:<concurrency key>), max_running, rate per per (\"1s\", \"1m\"), burst; it holds from the next claim (admins).", "Limit", s.limitSet),
		"limit.list":        rpcMethod("List a context's limits, each with the runs it counts now.", "{items: [Limit]}", s.limitList),
		"limit.delete":      rpcMethod("Remove a limit of a context by scope (admins).", "{deleted}", s.limitDelete),
	}
	jc := m["job.create"]
	jc.batch = s.jobCreateBatch
	m["job.create"] = jc
	for name, dm := range s.dispatcher.rpcMethods() {
		m[name] = dm
	}
	return m
}

type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	ID      json.RawMessage `json:"id"`
}

type rpcError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
	ID      json.RawMessage `json:"id"`
}

// apiMetrics count the API's calls on both transports.
type apiMetrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	submitted prometheus.Counter
	// queuePauses counts queue.pause and queue.resume calls that changed a queue.
	queuePauses *prometheus.CounterVec
	// debounced counts the jobs a later submission of their debounce key cancelled;
	// limitChanges the limits set and removed (limit.set, limit.delete).
	debounced    prometheus.Counter
	limitChanges *prometheus.CounterVec
}

func newAPIMetrics(reg prometheus.Registerer) *apiMetrics {
	f := promauto.With(reg)
	return &apiMetrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_api_requests_total",
			Help: "API requests by transport (jsonrpc, grpc), method and result code, spelled as gRPC codes on both transports (OK, InvalidArgument, NotFound, …; a JSON-RPC error counts as its gRPC equivalent, docs/api.md)."}, []string{"transport", "method", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "hero_api_request_duration_seconds", Help: "API request handling time by transport and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30, 300}}, []string{"transport", "method"}),
		submitted: f.NewCounter(prometheus.CounterOpts{Name: "hero_jobs_submitted_total",
			Help: "Standalone jobs created and dispatched by job.submit, job.submit_batch and job.run (not those a unique_key or a chosen id found existing)."}),
		queuePauses: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_queue_pauses_total",
			Help: "Job queues paused (op=pause) and resumed (op=resume) by queue.pause and queue.resume (calls that found the queue so already not counted)."}, []string{"op"}),
		debounced: f.NewCounter(prometheus.CounterOpts{Name: "hero_jobs_debounced_total",
			Help: "Jobs ended cancelled, never run, because a later submission of their debounce_key came within the window."}),
		limitChanges: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_limit_changes_total",
			Help: "Run and rate limits set (op=set) and removed (op=delete) by limit.set and limit.delete (a delete that found none not counted)."}, []string{"op"}),
	}
}

func (m *apiMetrics) observe(transport, method, code string, start time.Time) {
	m.requests.WithLabelValues(transport, method, code).Inc()
	m.duration.WithLabelValues(transport, method).Observe(time.Since(start).Seconds())
}

// observeAll is observe for requests of one method that began at start and end now
// together (a stream's batch), codes each one's result: each label set is looked up
// once.
func (m *apiMetrics) observeAll(transport, method string, codes []string, start time.Time) {
	if len(codes) == 0 {
		return
	}
	took := time.Since(start).Seconds()
	d := m.duration.WithLabelValues(transport, method)
	n := 0
	for i, code := range codes {
		d.Observe(took)
		if i+1 == len(codes) || codes[i+1] != code {
			m.requests.WithLabelValues(transport, method, code).Add(float64(i + 1 - n))
			n = i + 1
		}
	}
}

// jsonrpcServer serves JSON-RPC 2.0 over HTTP: POST / with one request or a batch.
// The whole body is one signed request (a batch is signed once).
type jsonrpcServer struct {
	auth         *authenticator
	limits       *callerLimits
	methods      map[string]method
	discover     []byte
	log          zerolog.Logger
	maxBody      int64
	maxBatch     int
	writeTimeout time.Duration
	m            *apiMetrics
}

func newJSONRPCServer(s *service, a *authenticator, l *callerLimits, log zerolog.Logger, m *apiMetrics, cfg *Config) *jsonrpcServer {
	srv := &jsonrpcServer{auth: a, limits: l, methods: s.methods(), log: log, m: m,
		maxBody: int64(cfg.MaxBodyBytes), maxBatch: cfg.MaxBatch, writeTimeout: cfg.HTTPWriteTimeout}
	srv.discover = openRPCDocument(srv.methods)
	return srv
}

// waitingMethods are the JSON-RPC methods that wait for something: their response is
// exempt from the write timeout (their own timeouts bound them) and each holds one of
// the caller's waiting slots.
var waitingMethods = map[string]bool{"job.run": true, "flow.wait": true, "dispatcher.run_job": true}

func (j *jsonrpcServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "JSON-RPC 2.0: POST a request object to /", http.StatusMethodNotAllowed)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(j.writeTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, j.maxBody))
	if err != nil {
		writeJSON(w, rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"),
			Error: &rpcError{Code: codeInvalidRequest, Message: fmt.Sprintf("invalid request: body larger than %d bytes (--max-body-bytes) or unreadable", j.maxBody)}})
		return
	}
	digest := auth.Digest(body)
	trimmed := bytes.TrimSpace(body)
	if name, dup := duplicateKey(trimmed); dup {
		writeJSON(w, rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: codeInvalidRequest,
			Message: fmt.Sprintf("invalid request: the body repeats the member %q in one object; a request must mean one thing to every reader of what was signed (docs/api.md, Signed requests)", name)}})
		return
	}
	var reqs []json.RawMessage
	batch := len(trimmed) > 0 && trimmed[0] == '['
	if !batch {
		reqs = []json.RawMessage{trimmed}
	} else {
		if err := json.Unmarshal(trimmed, &reqs); err != nil {
			writeJSON(w, parseError(err))
			return
		}
		if len(reqs) == 0 {
			writeJSON(w, rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: codeInvalidRequest, Message: "invalid request: empty batch"}})
			return
		}
		if len(reqs) > j.maxBatch {
			writeJSON(w, rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: codeInvalidRequest,
				Message: fmt.Sprintf("invalid request: a batch of %d requests is more than the %d accepted (--max-batch); split it", len(reqs), j.maxBatch)}})
			return
		}
	}
	parsed := make([]parsedRequest, len(reqs))
	needAuth, waits := false, false
	for i, raw := range reqs {
		parsed[i] = parseRequest(raw)
		if parsed[i].err == nil && parsed[i].req.Method != "rpc.discover" {
			needAuth = true
		}
		waits = waits || waitingMethods[parsed[i].req.Method]
	}
	var p Principal
	if needAuth {
		p, err = j.auth.authenticate(r.Context(), credentials{
			transport: "jsonrpc", target: auth.JSONRPCTarget, digest: digest, peer: r.RemoteAddr,
			authorization: r.Header.Get("Authorization"),
			signed: auth.Credentials{Actor: r.Header.Get(auth.HeaderActor), Timestamp: r.Header.Get(auth.HeaderTimestamp),
				Nonce: r.Header.Get(auth.HeaderNonce), Signature: r.Header.Get(auth.HeaderSignature)},
		})
		if err == nil {
			err = j.limits.allow(p.key(), len(reqs))
			var tm *tooManyError
			if errors.As(err, &tm) {
				w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(tm.RetryAfter.Seconds())), 10))
			}
		}
		if err != nil {
			j.reply(w, batch, j.failAll(parsed, toAPIError(err)))
			return
		}
	}
	ctx, tperr := withTraceparent(r.Context(), r.Header.Values(model.TraceparentHeader))
	if tperr != nil {
		j.reply(w, batch, j.failAll(parsed, tperr))
		return
	}
	if waits {
		// A wait may last its own timeout: no read or write deadline meanwhile (a read
		// deadline would also cancel the request's context when it passes).
		_ = rc.SetWriteDeadline(time.Time{})
		_ = rc.SetReadDeadline(time.Time{})
	}
	var out []rpcResponse
	for i := 0; i < len(parsed); {
		if n := j.batchRun(parsed[i:]); n > 1 {
			out = append(out, j.handleRun(ctx, p, parsed[i:i+n])...)
			i += n
			continue
		}
		if resp, reply := j.handle(ctx, p, &parsed[i]); reply {
			out = append(out, resp)
		}
		i++
	}
	j.reply(w, batch, out)
}

// batchRun is how many requests from the first on call the same method that answers
// batches (method.batch): 0 or 1 when the first is to be handled on its own.
func (j *jsonrpcServer) batchRun(parsed []parsedRequest) int {
	first := &parsed[0]
	if first.err != nil || j.methods[first.req.Method].batch == nil {
		return 0
	}
	n := 1
	for n < len(parsed) && parsed[n].err == nil && parsed[n].req.Method == first.req.Method {
		n++
	}
	return n
}

// handleRun answers consecutive requests of one method through its batch form, with
// the replies, metrics and logs that handle gives each request.
func (j *jsonrpcServer) handleRun(ctx context.Context, p Principal, run []parsedRequest) []rpcResponse {
	name := run[0].req.Method
	params := make([]json.RawMessage, len(run))
	for i := range run {
		params[i] = run[i].req.Params
	}
	answers := j.methods[name].batch(ctx, p, params)
	var out []rpcResponse
	for i := range run {
		pr, a := &run[i], answers[i]
		resp := rpcResponse{JSONRPC: "2.0", ID: pr.id, Result: a.result}
		code := codes.OK.String()
		if a.err != nil {
			ae := toAPIError(a.err)
			if ae.Code == codeInternal {
				j.log.Error().Err(a.err).Str("method", name).Msg("api call failed")
			}
			resp = rpcResponse{JSONRPC: "2.0", ID: pr.id, Error: &rpcError{Code: ae.Code, Message: ae.Msg, Data: ae.Data}}
			code = grpcCode(ae.Code).String()
		}
		j.m.observe("jsonrpc", name, code, pr.start)
		if !pr.notification {
			out = append(out, resp)
		}
	}
	return out
}

// reply writes the responses: an array for a batch, one object, or nothing (only
// notifications).
func (j *jsonrpcServer) reply(w http.ResponseWriter, batch bool, out []rpcResponse) {
	switch {
	case len(out) == 0:
		w.WriteHeader(http.StatusNoContent)
	case batch:
		writeJSON(w, out)
	default:
		writeJSON(w, out[0])
	}
}

// failAll answers every request of a body with the same error (a refused
// authentication or rate limit).
func (j *jsonrpcServer) failAll(parsed []parsedRequest, e *apiError) []rpcResponse {
	var out []rpcResponse
	for i := range parsed {
		pr := &parsed[i]
		if pr.err != nil {
			out = append(out, *pr.err)
			continue
		}
		j.m.observe("jsonrpc", j.methodLabel(pr.req.Method), grpcCode(e.Code).String(), pr.start)
		if !pr.notification {
			out = append(out, rpcResponse{JSONRPC: "2.0", ID: pr.id, Error: &rpcError{Code: e.Code, Message: e.Msg, Data: e.Data}})
		}
	}
	return out
}

// methodLabel is a method's metric label: its name if it exists, else "unknown"
// (label values never come from what a client may invent).
func (j *jsonrpcServer) methodLabel(name string) string {
	if _, ok := j.methods[name]; ok || name == "rpc.discover" {
		return name
	}
	return "unknown"
}

func parseError(err error) rpcResponse {
	return rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: codeParse, Message: "parse error: " + err.Error()}}
}

// parsedRequest is one request of a body, decoded; err is set when it is not a
// valid request object (its answer).
type parsedRequest struct {
	req          rpcRequest
	id           json.RawMessage
	notification bool
	err          *rpcResponse
	start        time.Time
}

func parseRequest(raw []byte) parsedRequest {
	pr := parsedRequest{start: time.Now(), id: json.RawMessage("null")}
	fail := func(resp rpcResponse) parsedRequest { pr.err = &resp; return pr }
	if !json.Valid(raw) {
		return fail(parseError(errors.New("the body is not valid JSON")))
	}
	if k, f, ok := caseVariantMember(raw); ok {
		return fail(rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: codeInvalidRequest,
			Message: fmt.Sprintf("invalid request: member %q: names are case-sensitive (%q)", k, f)}})
	}
	if err := json.Unmarshal(raw, &pr.req); err != nil {
		return fail(rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: codeInvalidRequest, Message: "invalid request: not a request object"}})
	}
	pr.notification = len(pr.req.ID) == 0
	if !pr.notification {
		pr.id = pr.req.ID
	}
	if pr.req.JSONRPC != "2.0" {
		return fail(rpcResponse{JSONRPC: "2.0", ID: pr.id, Error: &rpcError{Code: codeInvalidRequest, Message: fmt.Sprintf("invalid request: jsonrpc must be \"2.0\", not %q", pr.req.JSONRPC)}})
	}
	if pr.req.Method == "" {
		return fail(rpcResponse{JSONRPC: "2.0", ID: pr.id, Error: &rpcError{Code: codeInvalidRequest, Message: "invalid request: method is missing"}})
	}
	return pr
}

// caseVariantMember finds a member of the request object raw that is one of the
// request's names (jsonrpc, id, method, params) in other letter cases: Go's decoder
// takes "Method" for method, so {"method":"actor.load","Method":"context.delete"}
// ran context.delete while every reader of method saw actor.load. (A params' own
// names are not checked here.)
func caseVariantMember(raw []byte) (member, name string, ok bool) {
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return "", "", false // not an object: the decode says so
	}
	for k := range members {
		for _, f := range []string{"jsonrpc", "id", "method", "params"} {
			if k != f && strings.EqualFold(k, f) {
				return k, f, true
			}
		}
	}
	return "", "", false
}

// handle runs one request as p; reply=false for a notification (no id).
func (j *jsonrpcServer) handle(ctx context.Context, p Principal, pr *parsedRequest) (rpcResponse, bool) {
	if pr.err != nil {
		j.m.observe("jsonrpc", "invalid", grpcCode(pr.err.Error.Code).String(), pr.start)
		return *pr.err, true
	}
	fail := func(e *apiError, method string) (rpcResponse, bool) {
		j.m.observe("jsonrpc", method, grpcCode(e.Code).String(), pr.start)
		return rpcResponse{JSONRPC: "2.0", ID: pr.id, Error: &rpcError{Code: e.Code, Message: e.Msg, Data: e.Data}}, !pr.notification
	}
	name := pr.req.Method
	if name == "rpc.discover" {
		j.m.observe("jsonrpc", name, codes.OK.String(), pr.start)
		return rpcResponse{JSONRPC: "2.0", ID: pr.id, Result: json.RawMessage(j.discover)}, !pr.notification
	}
	m, ok := j.methods[name]
	if !ok {
		return fail(&apiError{Code: codeMethodNotFound, Msg: fmt.Sprintf("method not found: %q (rpc.discover lists the methods)", name)}, "unknown")
	}
	if waitingMethods[name] {
		release, err := j.limits.wait(p.key())
		if err != nil {
			return fail(toAPIError(err), name)
		}
		defer release()
	}
	result, err := m.call(ctx, p, pr.req.Params)
	if err != nil {
		ae := toAPIError(err)
		if ae.Code == codeInternal {
			j.log.Error().Err(err).Str("method", name).Msg("api call failed")
		}
		return fail(ae, name)
	}
	j.m.observe("jsonrpc", name, codes.OK.String(), pr.start)
	return rpcResponse{JSONRPC: "2.0", ID: pr.id, Result: result}, !pr.notification
}

// decodeParams decodes the params object strictly.
func decodeParams(raw json.RawMessage, into any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	if raw[0] != '{' {
		return invalidParams("params", "params must be one object, e.g. {\"context_id\": 1}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				field = "params"
			}
			return invalidParams(field, "%s: want %s, got %s", field, typeName(te.Type.String()), te.Value)
		}
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			name := strings.Trim(f, `"`)
			return invalidParams(name, "unknown field %s", f)
		}
		return invalidParams("params", "%s", strings.TrimPrefix(msg, "json: "))
	}
	return nil
}

func typeName(t string) string {
	switch {
	case strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "int"):
		return "an integer (" + t + ")"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "main."), strings.HasPrefix(t, "*main."), strings.HasPrefix(t, "model."):
		return "an object"
	case t == "string":
		return "a string"
	case t == "bool", t == "*bool":
		return "true or false"
	}
	return t
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
