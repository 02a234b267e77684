package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/execcore"
	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/procrun"
	"github.com/hero-coordinator/hero/lib/sandbox"
	"github.com/hero-coordinator/hero/lib/store"
)

// maxResultValue limits a value written to $HERO_RESULT_FILE, maxResultFile the
// whole file.
const (
	maxResultValue = 32 << 10
	maxResultFile  = 1 << 20
)

// resultFileName is $HERO_RESULT_FILE's name in the job's work directory.
const resultFileName = "result"

var resultKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// execution is one running job: a process, or (handler jobs) a request to an
// executor. Kill reasons: timeout, stopped, lost_lease, handed_back, or a sandbox
// limit.
type execution = execcore.Execution[model.JobRef]

// execute runs one claimed and started job to its end.
func (r *runner) execute(ctx context.Context, db *store.DB, cl *store.Claim, outcome store.StartOutcome, j *model.Job) {
	defer r.holding.remove(cl.ID) // claim added it
	// The lease is kept from the claim until the end is written, not only while the
	// process runs: a start (a sandbox made, the environment read) or an end's write
	// slower than the lease would otherwise let it expire under a live run, and a
	// claim would take its slot under a run limit (lua/lib_limit.lua) or a sweep
	// queue the job again.
	lease := r.keepLease(ctx, db, cl, j)
	defer lease.Stop()
	if j.TraceID == "" {
		j.TraceID = randHex(16) // a claim that stored none: this attempt's own trace
	}
	log := r.jobLog(db.ContextID, j)
	st := metricType(j)
	r.jobCounters(st).started.Inc()
	// A job a finish took (cl.Taken) was stamped started at its dependency's end:
	// its start is now, when this process goes on to run it.
	startedMs := j.StartedAtMs
	var begun time.Time
	if cl.Taken {
		begun = time.Now()
		startedMs = begun.UnixMilli()
	}
	if j.ReadyAtMs > 0 && len(j.Dependends) > 0 {
		r.m.depStart.Observe(float64(startedMs-j.ReadyAtMs) / 1000)
	}
	if j.DispatchedMs > 0 {
		r.m.queueWait.Observe(float64(startedMs-j.DispatchedMs) / 1000)
	}
	if outcome == store.StartStopped {
		r.finish(ctx, db, cl, j, store.JobOutcome{Status: model.JobError, Error: "stopped", ExitCode: -1, Fatal: true}, "stopped", log)
		return
	}
	if r.cfg.pause != nil {
		r.cfg.pause("claimed", 0)
	}
	res, release := r.kinds[r.kindOf(j)].run(ctx, r, db, cl, j, log)
	if release != nil {
		defer release() // its sandbox's teardown, once its end is written
	}
	if res.reason == execcore.ReasonHandedBack {
		log.Info().Msg("job handed back at shutdown")
		return
	}
	if res.reason == "executor_unhealthy" {
		// Back on its queue at once (a runner with a healthy pool takes it).
		r.releaseClaims(ctx, db, []string{cl.ID})
		log.Warn().Str("function_name", j.FunctionName).Msg("executor unhealthy here: job handed back to its queue")
		return
	}
	if res.reason == "lost_lease" {
		r.m.lostLeases.Inc()
		r.m.failed.WithLabelValues(st, "lost_lease").Inc()
		log.Warn().Msg("lease lost: another claim took the job after its lease expired; stopped here")
		return
	}
	if cl.Taken && res.outcome.StartedAt.IsZero() {
		res.outcome.StartedAt = begun // a handler's: when it went to its executor
	}
	r.finish(ctx, db, cl, j, res.outcome, res.reason, log)
}

// jobFields adds a job's fields to each line its logger (execute's) writes, as the
// line is written: a handler job's run writes none unless something goes wrong, and
// the logger's context (zerolog's With) was a 512-byte buffer filled for every job.
type jobFields struct {
	ctx, flow, job, caller, attempt uint32
	trace                           string
}

// jobLog is the logger of a job's run (its lines carry the job's fields: jobFields).
func (r *runner) jobLog(ctxID uint32, j *model.Job) zerolog.Logger {
	return r.log.Hook(&jobFields{ctx: ctxID, flow: j.FlowID, job: j.ID, caller: j.CallerID, attempt: j.Attempt, trace: j.TraceID})
}

func (h *jobFields) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Uint32(obs.KeyContextID, h.ctx).Uint32(obs.KeyFlowID, h.flow).Uint32(obs.KeyJobID, h.job).Uint32(obs.KeyCallerID, h.caller).
		Uint32("attempt", h.attempt).Str("trace_id", h.trace)
}

func (r *runner) finish(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job, o store.JobOutcome, reason string, log zerolog.Logger) {
	st := metricType(j)
	ok, err := r.writeEnd(ctx, store.Finish{DB: db, Claim: cl, Job: j, Outcome: o}, log)
	if errors.Is(err, errHandedOver) {
		log.Warn().Str("state_dir", r.cfg.StateDir).Msg("job's end not written before the shutdown: kept for the restart under this worker id")
		return
	}
	if err != nil {
		log.Error().Err(err).Msg("finish job")
		return
	}
	if !ok {
		log.Warn().Msg("job was taken over by another runner; result dropped")
		return
	}
	if o.Status == model.JobFinished {
		r.jobCounters(st).finished.Inc()
		log.Debug().Msg("job finished") // a line a job: debug (an error's lines keep their level)
	} else {
		r.m.failed.WithLabelValues(st, reason).Inc()
		log.Info().Str("error", o.Error).Msg("job failed")
	}
}

// errHandedOver: the shutdown came before Redis took a job's end; the end is in the
// state directory, for the restart.
var errHandedOver = errors.New("job end handed over to the restart")

// writeEnd writes a run's end (ends that arrive together go in one round trip:
// r.finisher). A passing Redis fault does not lose it: from the first failure on the
// end is also kept in the state directory, the job's lease is extended whenever Redis
// answers, and the write is tried again with backoff until it is written (its file
// then removed) or the shutdown gives up waiting (errHandedOver: the file stays). A
// lasting error drops it (the lease brings the job back).
func (r *runner) writeEnd(ctx context.Context, f store.Finish, log zerolog.Logger) (bool, error) {
	bo := fault.Backoff{Max: 500 * time.Millisecond} // Redis may be back only briefly
	saved := ""
	defer func() {
		if saved != "" {
			_ = os.Remove(saved)
		}
	}()
	lastExtend := time.Now()
	for {
		ok, err := r.finisher.Do(ctx, f)
		if err == nil || !fault.Transient(err) {
			return ok, err
		}
		r.m.endRetries.Inc()
		if saved == "" {
			path, serr := r.savePending(f)
			if serr != nil {
				log.Error().Err(serr).Msg("keep the job's end in the state directory")
			}
			saved = path
			log.Warn().Err(err).Msg("write the job's end: Redis unavailable; retrying")
		} else {
			log.Debug().Err(err).Msg("write the job's end: retrying")
		}
		if time.Since(lastExtend) >= r.cfg.Heartbeat {
			if _, err := f.DB.ExtendLease(ctx, f.Claim, r.cfg.Lease); err == nil {
				lastExtend = time.Now()
			}
		}
		if !bo.Sleep(r.core.EndCtx()) {
			if saved != "" {
				saved = "" // the file stays for the restart
				return false, errHandedOver
			}
			return false, err
		}
	}
}

type runResult struct {
	outcome store.JobOutcome
	reason  string
}

// scratchDir makes the job's work directory (r.sandbox.WorkDir under --work-dir).
// A failure is the host's (a full disk, a directory gone), never the job's: it is
// made again, as a sandbox that could not be prepared is (execcore.SandboxTries
// tries, execcore.SandboxRetryWait × the tries so far after each), before the job
// ends in error; a shutdown meanwhile hands the job back (it has not started).
func (r *runner) scratchDir(pattern string, log zerolog.Logger) (string, func(), runResult, bool) {
	for try := 1; ; try++ {
		dir, remove, err := r.sandbox.WorkDir(r.cfg.WorkDir, pattern)
		if err == nil {
			return dir, remove, runResult{}, true
		}
		if try >= execcore.SandboxTries {
			log.Error().Err(err).Int("tries", try).Msg("runner cannot make the job's scratch directory: the job ends in error")
			return "", nil, runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1,
				Error: fmt.Sprintf("runner cannot make a scratch directory (%d tries): %v", try, err)}, "start_error"}, false
		}
		log.Warn().Err(err).Int("try", try).Msg("runner cannot make the job's scratch directory: trying again")
		if r.onScratchRetry != nil {
			r.onScratchRetry(try)
		}
		t := time.NewTimer(time.Duration(try) * execcore.SandboxRetryWait)
		select {
		case <-t.C:
		case <-r.core.EndCtx().Done():
			t.Stop()
			return "", nil, runResult{reason: execcore.ReasonHandedBack}, false
		}
	}
}

// runScript runs the job's script under its interpreter with a clean environment. It
// sets release to its sandbox's teardown when that is left for after the job's end is
// written (execcore.Run.WaitKept).
func (r *runner) runScript(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job, log zerolog.Logger, release *func()) runResult {
	interp, ok := r.cfg.interpreters[j.ScriptType]
	if !ok {
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Fatal: true,
			Error: fmt.Sprintf("no interpreter configured for script_type %q", j.ScriptType)}, "no_interpreter"}
	}
	// With a sandbox, the work directory is in the job's own filesystem (nothing on
	// the host), the one a sandbox made ahead has made already (sandbox.JobDir: the
	// job starts without a program run to make it); without one, a host directory
	// removed after the job.
	pattern := fmt.Sprintf("hero-job-%d-%d-%d-", db.ContextID, j.CallerID, j.ID)
	if r.sandbox.Mode() == sandbox.ModeBwrap {
		pattern = sandbox.JobDir
	}
	dir, removeDir, failed, ok := r.scratchDir(pattern, log)
	if !ok {
		return failed
	}
	defer removeDir()
	// The job's environment and its context's limits: one round trip.
	var reads startReads
	var bo fault.Backoff
	var err error
	for {
		reads, err = r.readForStart(ctx, db, cl, j)
		if err == nil || !fault.Transient(err) {
			break
		}
		// A passing fault is waited out: it is no failure of the job. A shutdown
		// meanwhile hands the job back (it has not started).
		if !bo.Sleep(r.core.EndCtx()) {
			return runResult{reason: execcore.ReasonHandedBack}
		}
	}
	if err != nil {
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: "prepare environment: " + err.Error()}, "start_error"}
	}
	env := r.environment(db, j, reads, filepath.Join(dir, resultFileName), dir)

	logw := newLogWriter(ctx, db, j.CallerID, j.ID, r.cfg.LogMaxBytes)
	if j.Attempt > 1 {
		_, _ = logw.Write([]byte(fmt.Sprintf("--- attempt %d on %s ---\n", j.Attempt, r.cfg.WorkerID)))
	}
	ex := r.core.Put(model.JobRef{ContextID: db.ContextID, CallerID: j.CallerID, ID: j.ID})
	defer r.core.Remove(ex)
	lim, refused := r.jobLimits(j, reads.limits)
	if refused != nil {
		logw.Close()
		return *refused
	}
	run, err := ex.Start(execcore.Process{
		Argv: interp, Dir: dir, Env: env, Script: j.Script, Sandbox: r.sandbox, Limits: lim,
		Log: logw, OutputMax: r.cfg.OutputMaxBytes, KillGrace: r.cfg.KillGrace,
		OnLimit: ex.Kill, // a job over a memory or process limit is stopped at once, its whole tree
		Result:  resultFileName, ResultMax: maxResultFile,
		OnSandboxRetry: func(try int, err error) {
			log.Warn().Err(err).Int("try", try).Msg("the job's sandbox could not be prepared: trying again")
		},
	})
	if err != nil {
		logw.Close()
		return startFailure(err, ex.Reason(), interp[0], j.ScriptType, log)
	}
	// A stop that came between the claim and the start is honoured now.
	if j.StopAsked && ex.Reason() == "" {
		run.Kill("stopped")
	}
	sv := supervise(j, run.OnTimeout(time.Duration(j.Timeout)*time.Second, ex.Kill))
	res := run.WaitKept()
	sv.Stop()
	start := run.StartedAt()
	elapsed := time.Since(start)
	log.Info().Str("sandbox", r.sandbox.Mode()).Str("limits", lim.String()).Int("exit_code", res.ExitCode).Str("signal", res.Signal).
		Dur("elapsed", elapsed).Msg("job execution")
	r.m.duration.WithLabelValues(string(j.ScriptType)).Observe(elapsed.Seconds())
	logw.Close()
	rr := r.scriptOutcome(ctx, db, j, ex, res, lim, log, elapsed)
	rr.outcome.StartedAt = start // its started_at_us: when its process was about to run, not its claim
	*release = run.Release
	return rr
}

// startFailure is the outcome of a script whose process could not start (killed: its
// execution's kill reason). A sandbox that could not be prepared is the runner's
// fault: execcore tried it again already (execcore.SandboxTries), and a kill that
// ended the tries ends the job as that kill does (handed back at the shutdown: no end).
func startFailure(err error, killed, interpreter string, st model.ScriptType, log zerolog.Logger) runResult {
	switch killed {
	case execcore.ReasonHandedBack, "lost_lease":
		return runResult{reason: killed}
	case "stopped":
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: "stopped", Fatal: true}, "stopped"}
	}
	o := store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: err.Error()}
	var se *execcore.StartError
	if errors.As(err, &se) {
		switch se.Step {
		case execcore.StepSandbox:
			o.Error = fmt.Sprintf("runner cannot prepare the sandbox (%d tries): %v", se.Tries, se.Err)
			log.Error().Err(se.Err).Int("tries", se.Tries).Msg("runner cannot prepare the job's sandbox: the job ends in error")
		case execcore.StepStart:
			o.Fatal = true
			o.Error = fmt.Sprintf("cannot start interpreter %q for script_type %q: %v", interpreter, st, se.Err)
		default:
			o.Error = se.Err.Error()
		}
	}
	return runResult{o, "start_error"}
}

// scriptOutcome is the outcome of a script's process that ran: a limit it went over,
// the reason it was killed, a result file the runner does not take (not a regular
// file, too large), else its exit code and the result file's KEY=VALUE lines (bad
// lines are warned about in the job's log).
func (r *runner) scriptOutcome(ctx context.Context, db *store.DB, j *model.Job, ex *execution, res execcore.Ended, lim sandbox.Limits, log zerolog.Logger, elapsed time.Duration) runResult {
	output := map[string]string{"output": res.Output}
	if res.Limit != "" {
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: res.ExitCode, Error: limitError(res.Limit, lim), Result: output}, res.Limit}
	}
	switch reason := ex.Reason(); reason {
	case execcore.ReasonHandedBack, "lost_lease":
		return runResult{reason: reason}
	case "timeout":
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: res.ExitCode, Error: "timeout", Result: output}, "timeout"}
	case "stopped":
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: res.ExitCode, Error: "stopped", Fatal: true, Result: output}, "stopped"}
	}
	if p := res.ResultFile.Problem; p != "" {
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: res.ExitCode, Error: "result file: " + p, Result: output}, "result_file"}
	}
	result := map[string]string{}
	if warnings := parseResult(res.ResultFile.Data, result); len(warnings) > 0 {
		logw := newLogWriter(ctx, db, j.CallerID, j.ID, r.cfg.LogMaxBytes)
		for _, w := range warnings {
			_, _ = logw.Write([]byte("[hero] warning: " + w + "\n"))
		}
		logw.Close()
	}
	result["output"] = res.Output
	if res.Err != nil || res.ExitCode != 0 {
		return runResult{store.JobOutcome{Status: model.JobError, ExitCode: res.ExitCode, Error: res.Describe(), Result: result}, "exit_code"}
	}
	log.Debug().Dur("elapsed", elapsed).Msg("script exited 0")
	return runResult{store.JobOutcome{Status: model.JobFinished, ExitCode: 0, Result: result}, ""}
}

// jobLimits works out the job's limits from its own, its context's (read, from the
// start's reads) and the runner's (sandbox.Resolve). A job asking for more than it
// may is refused (no retry: it would ask again).
func (r *runner) jobLimits(j *model.Job, read func() (defaults, max *model.JobLimits, err error)) (sandbox.Limits, *runResult) {
	defaults, max, err := read()
	if err != nil {
		return sandbox.Limits{}, &runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Error: "read the context's job limits: " + err.Error()}, "start_error"}
	}
	lim, err := sandbox.Resolve(j.Limits, defaults, max, r.cfg.Sandbox.Limits(), r.cfg.Sandbox.Max())
	if err != nil {
		return sandbox.Limits{}, &runResult{store.JobOutcome{Status: model.JobError, ExitCode: -1, Fatal: true, Error: "limits refused: " + err.Error()}, "limits_refused"}
	}
	return lim, nil
}

// startReads are what a script's start reads from Redis: its flow's env_vars, its
// direct dependencies' results (both as stored, "" absent), its context's job limits;
// from the claim's reply when it held them (store.Claim's Reads), else in one round
// trip (readForStart).
type startReads struct {
	flowEnv string
	deps    []string
	limits  func() (defaults, max *model.JobLimits, err error)
}

// readForStart reads a script's startReads: those the claim returned (cl.Reads), else
// in one pipeline.
func (r *runner) readForStart(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job) (startReads, error) {
	if rd := cl.Reads; rd != nil && len(rd.DepResults) == len(j.Dependends) {
		return startReads{flowEnv: rd.FlowEnv, deps: rd.DepResults, limits: func() (*model.JobLimits, *model.JobLimits, error) {
			return db.DecodeContextLimits(rd.JobDefaults, rd.JobMax)
		}}, nil
	}
	var flowEnv *redis.StringCmd
	deps := make([]*redis.StringCmd, len(j.Dependends))
	var limits func() (defaults, max *model.JobLimits, err error)
	_, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
		if j.FlowID != 0 {
			flowEnv = p.HGet(ctx, keys.Flow(j.FlowID), "env_vars")
		}
		for i, d := range j.Dependends {
			deps[i] = p.HGet(ctx, keys.Job(j.CallerID, d), "result")
		}
		limits = db.QueueContextLimits(ctx, p)
		return nil
	})
	if err != nil && err != redis.Nil {
		return startReads{}, err
	}
	s := startReads{deps: make([]string, len(deps)), limits: limits}
	if flowEnv != nil {
		s.flowEnv = flowEnv.Val()
	}
	for i, c := range deps {
		s.deps[i] = c.Val()
	}
	return s, nil
}

// environment builds a clean environment: PATH, HOME, LANG; the flow's env_vars; the
// job's (the job wins); the HERO_ variables; the direct dependencies' results (read:
// readForStart's).
func (r *runner) environment(db *store.DB, j *model.Job, read startReads, resultFile, dir string) []string {
	env := execcore.CleanEnv(dir)
	if read.flowEnv != "" {
		var holder struct {
			EnvVars map[string]string `hash:"env_vars"`
		}
		if err := model.FromHash(keys.Flow(j.FlowID), map[string]string{"env_vars": read.flowEnv}, &holder); err == nil {
			for k, v := range holder.EnvVars {
				env[k] = v
			}
		}
	}
	for k, v := range j.EnvVars {
		env[k] = v
	}
	for i, d := range j.Dependends {
		var res map[string]string
		if j.DepResults != nil {
			// A job sent from another node: its dependencies ran there.
			res = j.DepResults[strconv.FormatUint(uint64(d), 10)]
		} else {
			var holder struct {
				Result map[string]string `hash:"result"`
			}
			if err := model.FromHash(keys.Job(j.CallerID, d), map[string]string{"result": read.deps[i]}, &holder); err == nil {
				res = holder.Result
			}
		}
		for k, v := range res {
			if k == "output" || !resultKeyRE.MatchString(k) {
				continue
			}
			env[fmt.Sprintf("HERO_DEP_%d_%s", d, k)] = v
		}
	}
	env["HERO_CONTEXT_ID"] = strconv.FormatUint(uint64(db.ContextID), 10)
	env["HERO_FLOW_ID"] = strconv.FormatUint(uint64(j.FlowID), 10)
	env["HERO_JOB_ID"] = strconv.FormatUint(uint64(j.ID), 10)
	env["HERO_CALLER_ID"] = strconv.FormatUint(uint64(j.CallerID), 10)
	env["HERO_ATTEMPT"] = strconv.FormatUint(uint64(j.Attempt), 10)
	env["HERO_RESULT_FILE"] = resultFile
	// The attempt's trace (W3C; the producer's when it handed one in), as OpenTelemetry
	// SDKs read it from the environment.
	env["TRACEPARENT"] = traceparent(j)
	return execcore.EnvList(env)
}

// parseResult reads the result file's KEY=VALUE lines; bad lines are skipped with a
// warning.
func parseResult(data []byte, into map[string]string) []string {
	var warnings []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), maxResultValue+1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			warnings = append(warnings, fmt.Sprintf("result file line %d has no '=': skipped", n))
		case !resultKeyRE.MatchString(k):
			warnings = append(warnings, fmt.Sprintf("result file line %d: key %q is not [A-Za-z_][A-Za-z0-9_]*: skipped", n, k))
		case k == "output":
			warnings = append(warnings, fmt.Sprintf("result file line %d: key \"output\" is reserved for stdout: skipped", n))
		case len(v) > maxResultValue:
			warnings = append(warnings, fmt.Sprintf("result file line %d: value of %s is %d bytes, more than %d: skipped", n, k, len(v), maxResultValue))
		default:
			into[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		warnings = append(warnings, "result file: "+err.Error())
	}
	return warnings
}

// newLogWriter streams a job's output into its Redis log (bounded), in lib/procrun's
// batches (32 KiB or 50 ms), so that job logs -f follows closely.
func newLogWriter(ctx context.Context, db *store.DB, caller, id uint32, max int) *procrun.Batcher {
	return procrun.NewBatcher(func(chunk []byte) { _ = db.AppendLog(ctx, caller, id, chunk, max) })
}

// supervise enforces a run's timeout (onTimeout: a script's run.OnTimeout, which
// counts from the job's own begin and spares a process that already ended; a
// handler's execcore.Kills). Its lease is kept by keepLease, from the claim on.
func supervise(j *model.Job, onTimeout func() time.Duration) *execcore.Supervision {
	return execcore.Supervise(time.Duration(j.Timeout)*time.Second, onTimeout, 0, nil)
}

// keepLease renews a claimed job's lease every heartbeat until Stop (after its end
// is written). A lease that expired and was swept (this process was stopped, or cut
// off from Redis, past it) is taken back while no other claim has taken the job; only
// a lease another claim took stops the run (that claim runs the job): its execution
// is killed ("lost_lease").
func (r *runner) keepLease(ctx context.Context, db *store.DB, cl *store.Claim, j *model.Job) *execcore.Supervision {
	ref := model.JobRef{ContextID: db.ContextID, CallerID: j.CallerID, ID: j.ID}
	return execcore.Supervise(0, nil, r.cfg.Heartbeat, func() {
		switch renewal, err := db.RenewLease(ctx, cl, r.cfg.Lease); {
		case err != nil:
		case renewal == store.LeaseLost:
			r.core.Stop(ref, "lost_lease")
		case renewal == store.LeaseRetaken:
			r.m.retaken.WithLabelValues("renewal").Inc()
			r.log.Warn().Uint32(obs.KeyContextID, db.ContextID).Uint32(obs.KeyFlowID, j.FlowID).Uint32(obs.KeyJobID, j.ID).Uint32(obs.KeyCallerID, j.CallerID).
				Msg("job's lease had expired and been swept while it ran here: taken back")
		}
	})
}

// limitError is the error of a job that went over a limit: the reason first, as the
// failure reason of hero_jobs_failed_total spells it.
func limitError(reason string, lim sandbox.Limits) string {
	switch reason {
	case sandbox.ReasonMemory:
		return fmt.Sprintf("memory_limit: the job used more than its %d MiB of memory and was killed", lim.MemoryBytes>>20)
	case sandbox.ReasonPids:
		return fmt.Sprintf("pids_limit: the job tried to have more than %d processes at once and was killed", lim.Pids)
	case sandbox.ReasonFileSize:
		return fmt.Sprintf("file_size_limit: the job wrote a file larger than %d MiB", lim.FileSizeBytes>>20)
	case sandbox.ReasonDisk:
		return fmt.Sprintf("disk_limit: the job's files filled its %d MiB of disk (its work directory and /tmp)", lim.DiskBytes>>20)
	}
	return reason
}

// metricType is a job's script_type label: its script type, or for a handler job
// without one (function_name "mailer#send_email") "exec:<executor>", as its queue is
// named: one spelling, never an empty label value.
func metricType(j *model.Job) string {
	if j.ScriptType != "" {
		return string(j.ScriptType)
	}
	if execName, _ := j.Handler(); execName != "" {
		return execLabels.get(execName, func(n string) string { return "exec:" + n })
	}
	return "none"
}

// execLabels are the script_type labels of handler jobs without a script type, by
// executor (bounded as the executors are): a job's label is looked up, not made again
// (metricType is read three times a job).
var execLabels resolved[string]
