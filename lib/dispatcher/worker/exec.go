package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/dispatcher"
	"github.com/hero-coordinator/hero/lib/execcore"
	"github.com/hero-coordinator/hero/lib/procrun"
	"github.com/hero-coordinator/hero/lib/retry"
)

// Reasons a job is killed by the worker rather than by its own timeout.
const (
	reasonStopRequested = "stopped_by_request"      // the seed's error for a running job stopped
	reasonHandedBack    = execcore.ReasonHandedBack // shutdown: back to the work queue
	reasonLost          = "lost"                    // another process took the job over
)

// execution is one job claimed by this process: its key the job id, its tag the
// worker id.
type execution = execcore.Execution[string]

// outcome is how a job ends.
type outcome struct {
	status dispatcher.Status
	output string
	err    string
	reason string // metrics label for errors
}

// execute runs a prepared job: start, log file, attempts, finish.
func (w *Worker) execute(s Spec, ex *execution, j *dispatcher.Job, log zerolog.Logger) {
	ctx := w.core.JobCtx()
	res, err := (&startArgs{ProcKey: w.keys.Processing(w.proc, s.ID), JobKey: w.keys.Job(j.ID), ClaimsKey: w.keys.Claims(), StopKey: w.keys.StopMark(j.ID),
		ReplyKey: w.keys.Reply(j.ID), LogKey: w.keys.Log(j.ID),
		ID: j.ID, Process: w.proc, Now: dispatcher.FormatTime(time.Now()), ReplyTTLMs: w.p.ReplyTTL.Milliseconds()}).run(ctx, clientRunner{w.rdb})
	if err != nil {
		log.Error().Err(err).Msg("start job; handing it back")
		w.handBackOne(s, j.ID, log)
		return
	}
	switch res {
	case "ok":
	case "stopped":
		w.m.jobs.WithLabelValues(s.ID, string(dispatcher.StatusError)).Inc()
		w.m.errors.WithLabelValues(s.ID, "stopped").Inc()
		log.Info().Msg("job stopped before it started")
		w.ended(j.ID)
		return
	case "dropped":
		log.Info().Msg("job stopped before it started: dropped from the queue")
		return
	case "gone":
		w.m.errors.WithLabelValues(s.ID, "unknown_job").Inc()
		log.Warn().Msg("job hash deleted before the job started: skipped")
		return
	default:
		log.Warn().Msg("claim lost before the job started (another process took it over)")
		return
	}
	w.m.jobs.WithLabelValues(s.ID, string(dispatcher.StatusStarted)).Inc()
	log.Info().Msg("job started")
	// log_path was checked lexically before the claim went on; opening it through
	// os.Root also refuses a symlink that leads out of the log directory.
	var file *os.File
	if j.LogPath != "" {
		f, err := dispatcher.OpenLogFile(w.p.LogDir, j.LogPath)
		if err != nil {
			w.finish(s, ex, j, outcome{status: dispatcher.StatusError, err: err.Error(), reason: "log_path"}, log)
			return
		}
		file = f
		defer func() { _ = file.Close() }()
	}

	logw := newRedisLog(ctx, w, j.ID)
	sinks := procrun.Multi{logw}
	if file != nil {
		sinks = append(sinks, file)
	}
	start := time.Now()
	attempts := 1 + j.Retries
	var o outcome
	for n := 1; n <= attempts; n++ {
		if n > 1 {
			_, _ = fmt.Fprintf(sinks, "--- attempt %d of %d ---\n", n, attempts)
			log.Info().Int("attempt", n).Str("error", o.err).Msg("retrying job")
		}
		var retryable bool
		o, retryable = w.attempt(s, ex, j, n, sinks)
		// lib/retry's rules, with no backoff: a worker retries at once, in place
		next := retry.Decide(retry.Attempt{Number: n, Retries: j.Retries, Succeeded: o.status == dispatcher.StatusFinished,
			Fatal: !retryable, StopRequested: ex.Reason() != ""}, 0)
		if next.Outcome != retry.Retry {
			break
		}
	}
	logw.Close()
	w.m.duration.WithLabelValues(s.ID).Observe(time.Since(start).Seconds())
	switch ex.Reason() {
	case reasonHandedBack:
		log.Info().Msg("job handed back at shutdown")
		return // still in the processing list: unregister puts it back on its queue
	case reasonLost:
		log.Warn().Msg("job taken over by another process: stopped here, result dropped")
		return
	}
	w.finish(s, ex, j, o, log)
}

// attempt runs the script once. retry says whether a failure may be retried.
func (w *Worker) attempt(s Spec, ex *execution, j *dispatcher.Job, n int, sinks io.Writer) (outcome, bool) {
	if r := ex.Reason(); r != "" {
		return outcome{status: dispatcher.StatusError, err: r, reason: r}, false
	}
	dir, remove, err := w.workDir()
	if err != nil {
		return outcome{status: dispatcher.StatusError, err: "worker cannot make a scratch directory: " + err.Error(), reason: "start_error"}, false
	}
	defer remove()
	// The same sandbox as the runner's jobs (when there is one): seed-000 scripts are
	// someone's code too.
	run, err := ex.Start(execcore.Process{
		Argv: s.Argv, Dir: dir, Env: environment(j, s.ID, dir, n), Script: j.Script,
		Sandbox: w.p.Sandbox, Limits: w.p.Limits,
		Log: sinks, OutputMax: w.p.OutputMaxBytes, KillGrace: w.p.KillGrace,
	})
	if err != nil {
		return outcome{status: dispatcher.StatusError, err: startError(err, s.Argv[0]), reason: "start_error"}, false
	}
	sv := execcore.Supervise(j.Timeout, run.OnTimeout(j.Timeout, run.Kill), 0, nil)
	res := run.Wait()
	sv.Stop()
	if r := ex.Reason(); r != "" {
		return outcome{status: dispatcher.StatusError, output: res.Output, err: r, reason: r}, false
	}
	if res.Killed == "timeout" {
		return outcome{status: dispatcher.StatusError, output: res.Output, err: "timeout", reason: "timeout"}, true
	}
	if res.Err != nil || res.ExitCode != 0 {
		return outcome{status: dispatcher.StatusError, output: res.Output, err: res.Describe(), reason: "exit_code"}, true
	}
	return outcome{status: dispatcher.StatusFinished, output: res.Output}, false
}

// workDir is an attempt's work directory: with a sandbox, one of the job's own
// filesystem (nothing on the host); else a new host directory, removed after it.
func (w *Worker) workDir() (string, func(), error) {
	if w.p.Sandbox != nil {
		return w.p.Sandbox.WorkDir(w.p.WorkDir, "hero-dispatcher-")
	}
	dir, err := os.MkdirTemp(w.p.WorkDir, "hero-dispatcher-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// startError is the error of an attempt that could not start.
func startError(err error, interpreter string) string {
	var se *execcore.StartError
	if !errors.As(err, &se) {
		return err.Error()
	}
	switch se.Step {
	case execcore.StepSandbox:
		return "cannot prepare the sandbox: " + se.Err.Error()
	case execcore.StepStart:
		return fmt.Sprintf("cannot start interpreter %q: %v", interpreter, se.Err)
	}
	return se.Err.Error()
}

// environment is the job's whole environment: nothing of the worker's own leaks in.
// PATH, HOME (the scratch directory) and LANG; the job's env_vars (which may replace
// them); HERO_JOB_ID, HERO_WORKER_ID and HERO_ATTEMPT.
func environment(j *dispatcher.Job, workerID, dir string, attempt int) []string {
	env := execcore.CleanEnv(dir)
	for k, v := range j.EnvVars {
		env[k] = v
	}
	env["HERO_JOB_ID"] = j.ID
	env["HERO_WORKER_ID"] = workerID
	env["HERO_ATTEMPT"] = strconv.Itoa(attempt)
	return execcore.EnvList(env)
}

// finish writes the job's end, pushes the reply and releases the jobs waiting for it.
func (w *Worker) finish(s Spec, ex *execution, j *dispatcher.Job, o outcome, log zerolog.Logger) {
	reply := o.output
	if o.status != dispatcher.StatusFinished {
		reply = o.err
	}
	// A passing Redis fault does not lose the end: it is written again, with backoff,
	// until it is (or the shutdown's drain ends; the job then stays claimed, and the
	// shutdown or a restart hands it back). A try whose answer was lost may have
	// written it: a later "claim lost" then means written.
	var n, tries int
	err := w.retryWrite(log, "write the job's end", func(ctx context.Context) error {
		tries++
		r, err := (&finishArgs{ProcKey: w.keys.Processing(w.proc, s.ID), JobKey: w.keys.Job(j.ID), ClaimsKey: w.keys.Claims(), ReplyKey: w.keys.Reply(j.ID),
			StopKey: w.keys.StopMark(j.ID), ID: j.ID, Process: w.proc, Now: dispatcher.FormatTime(time.Now()), Status: string(o.status),
			Output: o.output, Err: o.err, Payload: reply, ReplyTTLMs: w.p.ReplyTTL.Milliseconds()}).run(ctx, clientRunner{w.rdb})
		n = int(r)
		return err
	})
	uncertain := tries > 1
	if err != nil {
		log.Error().Err(err).Msg("write the job's end (it stays claimed; the shutdown or a restart hands it back)")
		return
	}
	if n == 0 && uncertain {
		log.Info().Msg("job's end already written by a try whose answer was lost")
		n = 1
	}
	if n == 0 {
		log.Warn().Msg("claim lost (another process took the job over): result dropped")
		return
	}
	w.m.jobs.WithLabelValues(s.ID, string(o.status)).Inc()
	if o.status == dispatcher.StatusFinished {
		log.Info().Msg("job finished")
	} else {
		w.m.errors.WithLabelValues(s.ID, o.reason).Inc()
		log.Info().Str("error", o.err).Msg("job failed")
	}
	w.ended(j.ID)
}

// newRedisLog streams a job's output into its bounded Redis copy (lib/procrun's
// Batcher: 32 KiB or 50 ms), so that another container can follow it.
func newRedisLog(ctx context.Context, w *Worker, id string) *procrun.Batcher {
	key := w.keys.Log(id)
	return procrun.NewBatcher(func(chunk []byte) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		// best effort: the output's file and its end are what count
		_, _ = (&appendLogArgs{LogKey: key, Chunk: string(chunk), Max: int64(w.p.LogMaxBytes), TTLMs: w.p.LogTTL.Milliseconds()}).run(cctx, clientRunner{w.rdb})
	})
}
