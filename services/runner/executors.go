package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/execcore"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/rrq"
	"github.com/hero-coordinator/hero/lib/store"
)

// Handler jobs run in executor processes over the RRQ executor protocol (seed 004,
// lib/rrq). The runner keeps a pool per --executors entry and context, routes a job to the pool
// named by its function_name's prefix (or, without one, by its script type), and maps
// the outcome onto the job: success → finished with the result; retry → error, retried
// after retry_after_seconds; timeout and error → error under the retry policy;
// error type handler_not_found → fatal (straight to the dead-letter queue).

type executorMetrics struct {
	restarts   *prometheus.CounterVec
	crashes    *prometheus.CounterVec
	violations *prometheus.CounterVec
	calls      *prometheus.CounterVec
	healthy    *prometheus.GaugeVec
	// startSeconds: how long pools took to start (their processes accepting connections)
	startSeconds *prometheus.HistogramVec
	// callsOf: calls' children by executor, callSeconds hero_job_run_duration_seconds's by
	// script type: resolved once, not for every handler job
	callsOf     *resolved[handlerCallCounters]
	callSeconds *resolved[prometheus.Observer]
}

// call counts a handler call of executor name with outcome (handlerCallOutcomes).
func (em *executorMetrics) call(name, outcome string) {
	c, ok := em.callsOf.get(name, func(name string) handlerCallCounters { return newHandlerCallCounters(em.calls, name) }).byOutcome[outcome]
	if ok {
		c.Inc()
		return
	}
	em.calls.WithLabelValues(name, outcome).Inc()
}

func newExecutorMetrics(reg prometheus.Registerer) executorMetrics {
	f := promauto.With(reg)
	em := executorMetrics{
		restarts: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_executor_restarts_total",
			Help: "Executor processes restarted (they died, or were killed after ignoring a cancel), by executor."}, []string{"executor"}),
		crashes: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_executor_crashes_total",
			Help: "Executor processes that failed to start or exited unasked (not a clean exit after their connection closed), by executor."}, []string{"executor"}),
		healthy: f.NewGaugeVec(prometheus.GaugeOpts{Name: "hero_executor_pool_healthy",
			Help: "1 while the executor's pools work here; 0 while one crash-loops or cannot start (the runner then leaves the executor's jobs to other runners)."}, []string{"executor"}),
		violations: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_executor_protocol_violations_total",
			Help: "Bad frames and responses from executors (dropped; the runner stays healthy), by executor and kind."}, []string{"executor", "kind"}),
		startSeconds: f.NewHistogramVec(prometheus.HistogramOpts{Name: "hero_executor_pool_start_seconds",
			Help:    "Time an executor pool took to start, from its first process's launch until every process accepts connections (sandbox included), by executor.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"executor"}),
		calls: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_handler_calls_total",
			Help: "Handler calls by executor and outcome (success, retry, timeout, error, failed: no outcome)."}, []string{"executor", "outcome"}),
	}
	em.callsOf, em.callSeconds = &resolved[handlerCallCounters]{}, &resolved[prometheus.Observer]{}
	return em
}

// execHealth holds the executors whose pools crash-loop or cannot start here. While
// one is unhealthy the runner claims none of its handler jobs when another live
// process of the context has it healthy (that one takes them), and fails them with a
// clear error when none has ("alone"); /readyz says why. After executorRetryAfter it
// tries its pool again.
type execHealth struct {
	mu  sync.Mutex
	bad map[string]unhealthy
}

type unhealthy struct {
	err   error
	since time.Time
	// alone: when this process last looked, no other live process of the context had
	// the executor healthy; it then keeps claiming the executor's jobs to fail them.
	alone bool
	// marked: the contexts where this process's unhealthy mark is stored.
	marked map[uint32]bool
}

// executorRetryAfter is how long an unhealthy executor's jobs are left to other
// runners before this one tries its pool again.
const executorRetryAfter = 30 * time.Second

// markUnhealthy records that an executor's pool crash-loops or cannot start.
func (r *runner) markUnhealthy(name string, ctxID uint32, err error) {
	r.exh.mu.Lock()
	if r.exh.bad == nil {
		r.exh.bad = map[string]unhealthy{}
	}
	u, was := r.exh.bad[name]
	u.err, u.since = err, time.Now()
	if !was {
		// Its jobs are still claimed, until one finds another live runner with the
		// executor healthy (unhealthyHere): none may be left waiting in the queue.
		u.alone = true
	}
	r.exh.bad[name] = u
	r.exh.mu.Unlock()
	r.em.healthy.WithLabelValues(name).Set(0)
	r.log.Error().Str("executor", name).Uint32(obs.KeyContextID, ctxID).Err(err).Dur("retry_after", executorRetryAfter).
		Msg("executor unhealthy: its jobs are left to other runners, or fail when no runner can take them")
}

// markHealthy records that an executor's pool answers again, and removes this
// process's unhealthy marks of it.
func (r *runner) markHealthy(name string) {
	r.exh.mu.Lock()
	u, was := r.exh.bad[name]
	delete(r.exh.bad, name)
	r.exh.mu.Unlock()
	r.em.healthy.WithLabelValues(name).Set(1)
	if !was {
		return
	}
	r.log.Info().Str("executor", name).Msg("executor healthy again")
	for ctxID := range u.marked {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if db, err := r.store.Ctx(ctxID); err == nil {
				if err := db.ClearExecutorUnhealthy(ctx, name, r.cfg.WorkerID); err != nil {
					r.log.Warn().Err(err).Str("executor", name).Uint32(obs.KeyContextID, ctxID).Msg("clear the executor's unhealthy mark (it ends by itself)")
				}
			}
		}()
	}
}

// executorHealth is nil for a healthy executor, else why it is not (until
// executorRetryAfter has passed since it was found unhealthy).
func (r *runner) executorHealth(name string) error {
	r.exh.mu.Lock()
	defer r.exh.mu.Unlock()
	u, ok := r.exh.bad[name]
	if !ok || time.Since(u.since) > executorRetryAfter {
		return nil
	}
	return u.err
}

// claimsExecutor reports whether the claim loop takes the executor's jobs: while its
// pool is healthy here, or unhealthy and no other process can take them (to fail them).
func (r *runner) claimsExecutor(name string) bool {
	r.exh.mu.Lock()
	defer r.exh.mu.Unlock()
	u, ok := r.exh.bad[name]
	return !ok || u.alone || time.Since(u.since) > executorRetryAfter
}

// unhealthyHere decides the fate of a job taken from an executor's queue while this
// process's pool of it is unhealthy (why): handed back when another live runner
// process of the context has the executor healthy (it takes the job), else failed with
// a clear error — only when none can run it. This process's mark in the context lets
// the others tell the same.
func (r *runner) unhealthyHere(ctx context.Context, db *store.DB, execName string, why error, log zerolog.Logger) runResult {
	until := time.Now().Add(executorRetryAfter)
	if err := db.MarkExecutorUnhealthy(ctx, execName, r.cfg.WorkerID, until); err != nil {
		log.Warn().Err(err).Msg("store the executor's unhealthy mark")
	}
	elsewhere, err := db.ExecutorHealthyElsewhere(ctx, execName, r.cfg.WorkerID)
	r.exh.mu.Lock()
	if u, ok := r.exh.bad[execName]; ok {
		if u.marked == nil {
			u.marked = map[uint32]bool{}
		}
		u.marked[db.ContextID] = true
		u.alone = err == nil && !elsewhere
		r.exh.bad[execName] = u
	}
	r.exh.mu.Unlock()
	if err != nil || elsewhere {
		if err != nil {
			log.Warn().Err(err).Msg("cannot tell whether another runner has the executor healthy: job handed back")
		}
		return runResult{reason: "executor_unhealthy"}
	}
	r.em.call(execName, "failed")
	// A retry goes when this runner tries its pool again, not at once: the job's
	// retries are not all spent while the pool is down.
	return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, RetryAfter: r.untilRetried(execName),
		Error: fmt.Sprintf("executor %s cannot run in context %d: no live runner has a healthy pool of it (on %s: %v)", execName, db.ContextID, r.cfg.WorkerID, why)}, "executor"}
}

// untilRetried is how long until this runner tries an unhealthy executor's pool again
// (executorRetryAfter after it was found unhealthy), at least a second.
func (r *runner) untilRetried(name string) time.Duration {
	r.exh.mu.Lock()
	defer r.exh.mu.Unlock()
	return max(time.Second, time.Until(r.exh.bad[name].since.Add(executorRetryAfter)))
}

// executorsReady is the runner's /readyz check: an error naming every unhealthy executor.
func (r *runner) executorsReady(context.Context) error {
	var errs []string
	for _, name := range r.executorNames() {
		if err := r.executorHealth(name); err != nil {
			errs = append(errs, fmt.Sprintf("executor %s unhealthy: %v", name, err))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// executorNames lists the configured executors.
func (r *runner) executorNames() []string {
	var out []string
	for _, e := range r.cfg.executors {
		out = append(out, e.name)
	}
	sort.Strings(out)
	return out
}

// logLines writes an executor process's output into the runner's log, a line per event.
type logLines struct {
	log    zerolog.Logger
	stream string
}

func (l logLines) Write(p []byte) (int, error) {
	l.log.Info().Str("stream", l.stream).Msg(string(trimNL(p)))
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

// randHex returns n random bytes as hex: trace and span ids, which must be unlikely to
// repeat, not secret (math/rand: no system call; a claim makes one per free slot).
func randHex(n int) string {
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rand.Uint64())
	}
	return hex.EncodeToString(b[:n])
}

// traceparent is the W3C traceparent of a job's attempt: the job's trace id (stored at
// the claim: the producer's when it handed one in), a new span id per call, and the
// producer's flags (else sampled, 01).
func traceparent(j *model.Job) string {
	flags := "01"
	if j.Traceparent != "" {
		if tp, err := model.ParseTraceparent(j.Traceparent); err == nil {
			flags = tp.Flags
		}
	}
	return model.Traceparent{TraceID: j.TraceID, ParentID: randHex(8), Flags: flags}.String()
}

// runHandler calls a handler job's function in its executor pool.
func (r *runner) runHandler(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job, log zerolog.Logger) (rr runResult) {
	execName, handler := j.Handler()
	if execName == "" {
		execName = string(j.ScriptType)
	}
	ref := model.JobRef{ContextID: db.ContextID, CallerID: j.CallerID, ID: j.ID}
	// Tracked before its pool is there (a context's pool may take a moment to start):
	// a stop meanwhile is kept and honoured below.
	ex := r.core.Put(ref)
	defer r.core.Remove(ex)
	// A job taken from the executor's own queue is left to another runner while this
	// runner's pool of it crash-loops or cannot start.
	fromExecQueue := strings.HasSuffix(cl.Queue, ":"+model.ExecQueueSuffix(execName))
	if herr := r.executorHealth(execName); herr != nil && fromExecQueue {
		return r.unhealthyHere(ctx, db, execName, herr, log)
	}
	pool, err := r.acquirePool(ctx, execName, db.ContextID)
	if errors.Is(err, errNoExecutor) {
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Fatal: true,
			Error: fmt.Sprintf("no executor %q on this runner (it has: %v)", execName, r.executorNames())}, "no_executor"}
	}
	if err != nil && ctx.Err() == nil {
		herr := fmt.Errorf("could not start: %w", err)
		r.markUnhealthy(execName, db.ContextID, herr)
		if fromExecQueue {
			return r.unhealthyHere(ctx, db, execName, herr, log)
		}
	}
	if err != nil {
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1,
			Error: fmt.Sprintf("executor %s could not start for context %d: %v", execName, db.ContextID, err)}, "executor"}
	}
	defer r.releasePool(poolKey{execName, db.ContextID})
	req, refused := r.handlerRequest(ctx, db, cl, j, ref, handler)
	if refused != nil {
		return *refused
	}
	// The call's logger, built only for a line it writes (a rare warning): building it
	// for every call was half of the 4% of the runner's CPU that its loggers took.
	hlog := func() zerolog.Logger {
		return log.With().Str("executor", execName).Str("function", handler).Str("request_id", req.RequestID).Logger()
	}
	// The call's header line goes into the job's log with the job's end (one round
	// trip less per call) when there is an attempt to tell apart: a retry, or a call
	// that did not succeed (its trace is then kept for the attempts after it). A first
	// attempt that succeeds leaves the log empty, as a script's first attempt writes
	// no header: its trace id, worker and attempt are the job's own fields (the log
	// key was a twelfth of a finished job's memory).
	defer func() {
		if j.Attempt > 1 || rr.outcome.Status != model.JobFinished {
			rr.outcome.Log = []byte(fmt.Sprintf("--- attempt %d: %s#%s on %s (request %s, trace %s) ---\n", max(j.Attempt, 1), execName, handler, r.cfg.WorkerID, req.RequestID, j.TraceID))
			rr.outcome.LogMax = r.cfg.LogMaxBytes
		}
	}()

	res := r.callHandler(ctx, db, cl, j, ex, pool, req, hlog)
	reason := ex.Reason()
	switch reason {
	case execcore.ReasonHandedBack, "lost_lease":
		return runResult{reason: reason}
	case "timeout":
		r.em.call(execName, "timeout")
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: "timeout"}, "timeout"}
	case "stopped":
		r.em.call(execName, "error")
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: "stopped", Fatal: true}, "stopped"}
	}
	if res.err != nil && errors.Is(res.err, rrq.ErrNotReady) {
		// No process of the pool became ready (it cannot start, or not within the
		// executor's wait=): unhealthy here, as a pool that cannot start.
		r.markUnhealthy(execName, db.ContextID, res.err)
	}
	if res.err != nil && fromExecQueue && errors.Is(res.err, rrq.ErrUnavailable) {
		// Never delivered: while the pool is unhealthy here, another runner takes the
		// job, or it fails when none can — as a new job would.
		if herr := r.executorHealth(execName); herr != nil {
			return r.unhealthyHere(ctx, db, execName, herr, hlog())
		}
	}
	if res.err != nil {
		return r.handlerFailed(execName, res.err, hlog())
	}
	return r.handlerOutcome(execName, res.out)
}

// handlerRequest builds a handler job's execution request: its function, args and
// kwargs (a refusal when they are not JSON of the right kind), its dependencies'
// results in kwargs["hero_deps"], its deadline and trace.
func (r *runner) handlerRequest(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job, ref model.JobRef, handler string) (rrq.ExecutionRequest, *runResult) {
	jobID := ref.String()
	req := rrq.ExecutionRequest{
		ProtocolVersion: rrq.ProtocolVersion, RequestID: rrq.NewUUID(), JobID: jobID, FunctionName: handler,
		Context: rrq.ExecutionContext{
			JobID: jobID, Attempt: int(max(j.Attempt, 1)), QueueName: cl.Queue, WorkerID: r.cfg.WorkerID,
			EnqueueTime:  time.UnixMilli(max(j.DispatchedMs, j.CreatedAtMs)),
			TraceContext: map[string]string{model.TraceparentHeader: traceparent(j)},
		},
	}
	refuse := func(fatal bool, msg string) (rrq.ExecutionRequest, *runResult) {
		return req, &runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Fatal: fatal, Error: msg}, "start_error"}
	}
	if len(j.Args) > 0 {
		if err := json.Unmarshal(j.Args, &req.Args); err != nil {
			return refuse(true, "args is not a JSON array")
		}
	}
	if len(j.Kwargs) > 0 {
		if err := json.Unmarshal(j.Kwargs, &req.Kwargs); err != nil {
			return refuse(true, "kwargs is not a JSON object")
		}
	}
	if len(j.Dependends) > 0 {
		// A handler reads its direct dependencies' results in kwargs["hero_deps"]:
		// {"<job id>": result}, as a script reads HERO_DEP_<id>_<KEY> (depResults).
		deps, err := r.depResults(ctx, db, j)
		if err != nil {
			return refuse(false, "read dependencies' results: "+err.Error())
		}
		if req.Kwargs == nil {
			req.Kwargs = map[string]json.RawMessage{}
		}
		if _, taken := req.Kwargs["hero_deps"]; !taken {
			b, err := json.Marshal(deps)
			if err != nil {
				return refuse(false, "encode dependencies' results: "+err.Error())
			}
			req.Kwargs["hero_deps"] = b
		}
	}
	if j.Timeout > 0 {
		d := time.Now().Add(time.Duration(j.Timeout) * time.Second)
		req.Context.Deadline = &d
	}
	return req, nil
}

// handlerCall is a handler call's answer: its outcome, or why there is none.
type handlerCall struct {
	out rrq.ExecutionOutcome
	err error
}

// callHandler sends the request to the pool and waits for its outcome, under the
// job's timeout and lease (supervise). A kill (a stop, the timeout, a hand-back, a lost
// lease) cancels the call: cancel frames first, then, after --executor-cancel-grace,
// the executor's process.
func (r *runner) callHandler(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job, ex *execution, pool *rrq.Pool, req rrq.ExecutionRequest, hlog func() zerolog.Logger) handlerCall {
	callCtx, cancelCall := context.WithCancel(ctx)
	defer cancelCall()
	cancel := func(reason string) {
		// A call still waiting for a process of its pool (none ready) has reached no
		// executor: it ends now (a job's timeout bounds that wait too).
		if _, running := pool.ProcessOf(req.RequestID); !running {
			cancelCall()
		}
		// Cancel frames first; an executor that has not answered within the grace
		// period is killed (and restarted by its pool); the call then fails.
		go func() {
			log := hlog()
			onErr := func(err error) { log.Warn().Err(err).Msg("send cancel frame") }
			if pool.Stop(req.JobID, req.RequestID, r.cfg.CancelGrace, callCtx.Done(), onErr) {
				log.Warn().Str("reason", reason).Dur("grace", r.cfg.CancelGrace).Msg("executor did not answer the cancel; process killed")
			}
		}()
	}
	ex.SetCancel(cancel)
	if j.StopAsked {
		ex.Kill("stopped")
	}
	if ex.Reason() != "" {
		cancelCall() // a stop or hand-back that came while the pool started
	}

	var res handlerCall
	start := time.Now()
	sv := supervise(j, execcore.Kills(ex.Kill))
	res.out, res.err = pool.Execute(callCtx, req)
	sv.Stop()
	r.em.callSeconds.get(metricType(j), func(st string) prometheus.Observer { return r.m.duration.WithLabelValues(st) }).Observe(time.Since(start).Seconds())
	return res
}

// handlerFailed is the outcome of a handler call that got no outcome (the executor
// crashed, was unavailable, or broke the protocol).
func (r *runner) handlerFailed(execName string, err error, log zerolog.Logger) runResult {
	r.em.call(execName, "failed")
	msg := "executor " + execName + ": " + err.Error()
	switch {
	case errors.Is(err, rrq.ErrExecutorCrashed):
		msg = "executor " + execName + " crashed during the call: " + err.Error()
	case errors.Is(err, rrq.ErrUnavailable):
		msg = "executor " + execName + " unavailable: " + err.Error()
	}
	log.Warn().Err(err).Msg("handler call failed")
	return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: msg}, "executor"}
}

// handlerOutcome maps a handler's outcome onto the job: success → finished with the
// result; retry → error, retried after retry_after_seconds; timeout and error → error
// under the retry policy; error type handler_not_found → fatal.
func (r *runner) handlerOutcome(execName string, out rrq.ExecutionOutcome) runResult {
	r.em.call(execName, string(out.Status))
	switch out.Status {
	case rrq.StatusSuccess:
		result, raw, err := resultMap(out.Result)
		if err != nil {
			return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: err.Error()}, "exit_code"}
		}
		return runResult{store.JobOutcome{Status: model.JobFinished, Result: result, ResultJSON: raw}, ""}
	case rrq.StatusRetry:
		o := store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: "retry requested" + errSuffix(out.Error)}
		if ra := out.RetryAfter(); ra > 0 {
			o.RetryAfter = ra
		}
		return runResult{o, "exit_code"}
	case rrq.StatusTimeout:
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: "timeout" + errSuffix(out.Error)}, "timeout"}
	default:
		o := store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: "handler error" + errSuffix(out.Error)}
		if out.Error != nil {
			o.Error = out.Error.Error()
			if out.Error.Type == rrq.ErrorTypeHandlerNotFound {
				o.Fatal = true // no retry helps: straight to the dead-letter queue
			}
		}
		return runResult{o, "exit_code"}
	}
}

func errSuffix(e *rrq.ExecutionError) string {
	if e == nil {
		return ""
	}
	return ": " + e.Error()
}

// resultMap turns a handler's JSON result into the job's result map (the seed's
// strings): the top-level keys of an object (values that are not strings as compact
// JSON text); any other JSON value as "output". It also returns the result itself as
// compact JSON, kept as the job's result_json (nil for null or no result).
func resultMap(raw json.RawMessage) (map[string]string, json.RawMessage, error) {
	out := map[string]string{}
	if len(raw) == 0 || string(raw) == "null" {
		return out, nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, nil, fmt.Errorf("the handler's result is not JSON")
	}
	compact := json.RawMessage(buf.Bytes())
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(compact, &obj); err == nil && obj != nil {
		for k, v := range obj {
			var s string
			if err := json.Unmarshal(v, &s); err == nil {
				out[k] = s
			} else {
				out[k] = string(v)
			}
		}
		return out, compact, nil
	}
	out["output"] = string(compact)
	return out, compact, nil
}

// depResults reads the results of a job's direct dependencies, for hero_deps: a
// handler's result_json when it has one (an object as it is, any other value as
// {"output": value}), else its string map (a script's KEY=VALUE lines).
func (r *runner) depResults(ctx context.Context, db *store.DB, j *model.Job) (map[string]any, error) {
	out := map[string]any{}
	if j.DepResults != nil {
		// A job sent from another node: its dependencies ran there (string maps).
		for k, v := range j.DepResults {
			out[k] = v
		}
		return out, nil
	}
	cmds := make([]*redis.SliceCmd, len(j.Dependends))
	if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range j.Dependends {
			cmds[i] = p.HMGet(ctx, keys.Job(j.CallerID, d), "result", "result_json")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for i, d := range j.Dependends {
		vals := cmds[i].Val()
		if len(vals) == 2 {
			if rj, _ := vals[1].(string); rj != "" && json.Valid([]byte(rj)) {
				if rj[0] == '{' {
					out[fmt.Sprint(d)] = json.RawMessage(rj)
				} else {
					out[fmt.Sprint(d)] = map[string]json.RawMessage{"output": json.RawMessage(rj)}
				}
				continue
			}
		}
		var res string
		if len(vals) > 0 {
			res, _ = vals[0].(string)
		}
		var holder struct {
			Result map[string]string `hash:"result"`
		}
		_ = model.FromHash(keys.Job(j.CallerID, d), map[string]string{"result": res}, &holder)
		if holder.Result == nil {
			holder.Result = map[string]string{}
		}
		out[fmt.Sprint(d)] = holder.Result
	}
	return out, nil
}
