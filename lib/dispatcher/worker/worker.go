package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/dispatcher"
	"github.com/hero-coordinator/hero/lib/execcore"
	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/obs"
	"github.com/hero-coordinator/hero/lib/sandbox"
	"github.com/hero-coordinator/hero/lib/tick"
)

// Log keys added by this package (obs has the others).
const (
	KeyWorkerID = "worker_id"
	KeyJobID    = obs.KeyJobID
)

// Spec is one worker id served and the interpreter its scripts run under.
type Spec struct {
	ID   string   // the worker_id: jobs come from <prefix>work_queue:<ID>
	Argv []string // interpreter command and arguments; the script comes on stdin
}

// Params configure a Worker. Zero values take the defaults shown.
type Params struct {
	Redis   *redis.Client // on the protocol's DB; its pool needs len(Workers)+4 connections or more
	Prefix  string        // key prefix (default "hero:")
	Workers []Spec        // worker ids served, at least one

	// LogDir confines log_path: a job's log file must lie inside it ("" = jobs with a
	// log_path are refused).
	LogDir string
	// Concurrency is how many jobs of one worker id run at once (default 1). A job
	// with concurrent=false runs alone: it waits for the running ones and nothing else
	// of its worker id starts until it ends; concurrent=true jobs share the slots.
	Concurrency int
	// ProcessID names this process in heartbeats and claims ([A-Za-z0-9._-]; default
	// <host>-<pid>). It must be unique among live processes.
	ProcessID string

	Heartbeat         time.Duration // heartbeat period (default 2s)
	StaleAfter        time.Duration // a process without a heartbeat this long is dead (default 15s; at least 2×Heartbeat)
	DependencyRecheck time.Duration // safety re-check of jobs waiting for dependencies (default 10s)
	ReplyTTL          time.Duration // expiry of reply lists (default 1h)
	StopMarkTTL       time.Duration // how long a stop request for a queued job is remembered (default 24h)
	LogTTL            time.Duration // expiry of the Redis copy of a job's output (default 7 days)
	OutputMaxBytes    int           // stdout kept as the output field (default 1 MiB)
	LogMaxBytes       int           // stdout+stderr kept in the Redis copy (default 4 MiB)
	KillGrace         time.Duration // SIGTERM → SIGKILL on stop and timeout (default 500ms)
	DrainTimeout      time.Duration // at shutdown, how long running jobs may finish before being handed back (default 0: at once)
	// Sandbox runs each job's process (nil: a plain process group); Limits bound it.
	Sandbox      *sandbox.Sandbox
	Limits       sandbox.Limits
	WorkDir      string        // parent of the jobs' scratch directories (default os.TempDir())
	BlockTimeout time.Duration // blocking pops are re-issued after this (default 10s)

	Log        zerolog.Logger
	Registerer prometheus.Registerer // nil: metrics are not exported
}

var processIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// DefaultProcessID is <host>-<pid> with the characters a process id may not hold
// replaced by '_'.
func DefaultProcessID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "worker"
	}
	b := []byte(host)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return fmt.Sprintf("%s-%d", b, os.Getpid())
}

// Worker is the worker side of the protocol: it serves one or more worker ids.
type Worker struct {
	p      Params
	rdb    *redis.Client
	keys   dispatcher.Keys
	specs  []Spec
	proc   string
	log    zerolog.Logger
	m      *workerMetrics
	slots  map[string]chan struct{}
	byStop map[string]string // stop queue key → worker id

	// core holds the jobs this process runs, by job id (the execution's tag: its
	// worker id). Its job context outlives Run's ctx: running jobs finish their
	// writes; its end context ends when the shutdown's drain gives up: writes retried
	// through a Redis fault stop then (what they leave claimed is handed back).
	core  *execcore.Tracker[string]
	ready chan struct{}

	ownsRedis bool // opened by Config.Open: Run closes it
}

// New checks the parameters and returns a worker; Run starts it.
func New(p Params) (*Worker, error) {
	if p.Redis == nil {
		return nil, errors.New("dispatcher worker: no Redis client")
	}
	if len(p.Workers) == 0 {
		return nil, errors.New("dispatcher worker: no worker ids to serve")
	}
	seen := map[string]bool{}
	for _, s := range p.Workers {
		if s.ID == "" || strings.ContainsAny(s.ID, " \t\r\n") {
			return nil, fmt.Errorf("dispatcher worker: worker id %q must be non-empty without spaces", s.ID)
		}
		if seen[s.ID] {
			return nil, fmt.Errorf("dispatcher worker: worker id %q given twice", s.ID)
		}
		seen[s.ID] = true
		if len(s.Argv) == 0 || s.Argv[0] == "" {
			return nil, fmt.Errorf("dispatcher worker: worker id %q has no interpreter", s.ID)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&p.Heartbeat, 2*time.Second)
	def(&p.StaleAfter, 15*time.Second)
	def(&p.DependencyRecheck, 10*time.Second)
	def(&p.ReplyTTL, time.Hour)
	def(&p.StopMarkTTL, 24*time.Hour)
	def(&p.LogTTL, 7*24*time.Hour)
	def(&p.KillGrace, 500*time.Millisecond)
	def(&p.BlockTimeout, 10*time.Second)
	if p.DrainTimeout < 0 {
		p.DrainTimeout = 0
	}
	if p.StaleAfter < 2*p.Heartbeat {
		return nil, fmt.Errorf("dispatcher worker: stale-after (%s) must be at least twice the heartbeat (%s)", p.StaleAfter, p.Heartbeat)
	}
	if p.Concurrency <= 0 {
		p.Concurrency = 1
	}
	if p.Concurrency > 4096 {
		return nil, errors.New("dispatcher worker: concurrency must be at most 4096")
	}
	if p.OutputMaxBytes <= 0 {
		p.OutputMaxBytes = 1 << 20
	}
	if p.LogMaxBytes <= 0 {
		p.LogMaxBytes = 4 << 20
	}
	if p.WorkDir == "" {
		p.WorkDir = os.TempDir()
	}
	if st, err := os.Stat(p.WorkDir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("dispatcher worker: work directory %q is not a directory", p.WorkDir)
	}
	if p.ProcessID == "" {
		p.ProcessID = DefaultProcessID()
	}
	if !processIDRE.MatchString(p.ProcessID) {
		return nil, fmt.Errorf("dispatcher worker: process id %q must be 1-128 characters of [A-Za-z0-9._-]", p.ProcessID)
	}
	dir, err := dispatcher.CleanLogDir(p.LogDir)
	if err != nil {
		return nil, fmt.Errorf("dispatcher worker: log directory: %v", err)
	}
	p.LogDir = dir
	if ps := p.Redis.Options().PoolSize; ps > 0 && ps < len(p.Workers)+4 {
		return nil, fmt.Errorf("dispatcher worker: the Redis pool (%d) must have at least %d connections (one blocking connection per worker id, one for stop requests, the rest for work)", ps, len(p.Workers)+4)
	}
	w := &Worker{
		p: p, rdb: p.Redis, keys: dispatcher.NewKeys(p.Prefix), specs: p.Workers, proc: p.ProcessID,
		log:   p.Log.With().Str(obs.KeyWorker, p.ProcessID).Logger(),
		slots: map[string]chan struct{}{}, byStop: map[string]string{}, core: execcore.NewTracker[string](),
	}
	for _, s := range w.specs {
		w.slots[s.ID] = make(chan struct{}, p.Concurrency)
		w.byStop[w.keys.StopQueue(s.ID)] = s.ID
	}
	w.ready = make(chan struct{})
	w.m = newWorkerMetrics(p.Registerer, w)
	return w, nil
}

// ProcessID is the name of this process in heartbeats and claims.
func (w *Worker) ProcessID() string { return w.proc }

// Keys returns the worker's key names.
func (w *Worker) Keys() dispatcher.Keys { return w.keys }

// Ready is closed once Run has registered the process and waits for jobs.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// Run serves until ctx ends, then lets the running jobs finish for DrainTimeout,
// stops the rest and hands them back to their work queues, and unregisters. It
// returns an error only when it cannot start (Redis unreachable).
func (w *Worker) Run(ctx context.Context) error {
	if err := w.register(ctx); err != nil {
		if w.ownsRedis {
			_ = w.rdb.Close()
		}
		return err
	}
	ids := make([]string, len(w.specs))
	for i, s := range w.specs {
		ids[i] = s.ID
	}
	w.log.Info().Strs("worker_ids", ids).Int("concurrency", w.p.Concurrency).Str("log_dir", w.p.LogDir).Msg("hero dispatcher worker serving")

	// The claim loops and the sweeps end with ctx; the heartbeat and the stop watcher
	// go on while running jobs drain.
	bgCtx, stopBg := context.WithCancel(context.Background())
	var claims, bg sync.WaitGroup
	for _, s := range w.specs {
		claims.Add(1)
		go func(s Spec) {
			defer claims.Done()
			w.claimLoop(ctx, s)
		}(s)
	}
	claims.Add(1)
	go func() {
		defer claims.Done()
		w.sweepLoop(ctx)
	}()
	bg.Add(2)
	go func() {
		defer bg.Done()
		w.stopLoop(bgCtx)
	}()
	go func() {
		defer bg.Done()
		w.heartbeatLoop(bgCtx)
	}()
	close(w.ready)
	<-ctx.Done()
	claims.Wait()
	w.drain()
	stopBg()
	bg.Wait()
	w.unregister()
	w.core.Close()
	w.log.Info().Msg("hero dispatcher worker stopped")
	if w.ownsRedis {
		_ = w.rdb.Close()
	}
	return nil
}

// register hands back what a previous process of the same id left (a restart) and
// announces this one.
func (w *Worker) register(ctx context.Context) error {
	if n, err := w.requeueProc(ctx, w.proc, "-"); err != nil {
		return fmt.Errorf("dispatcher worker: redis: %w", err)
	} else if n > 0 {
		w.log.Info().Int("jobs", n).Msg("took back jobs this process id held before a restart")
	}
	return w.announce(ctx)
}

func (w *Worker) announce(ctx context.Context) error {
	ids := make([]string, len(w.specs))
	for i, s := range w.specs {
		ids[i] = s.ID
	}
	host, _ := os.Hostname()
	_, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, w.keys.Proc(w.proc), "worker_ids", dispatcher.FormatList(ids), "host", host, "pid", os.Getpid(), "started_at", dispatcher.FormatTime(time.Now()))
		p.ZAdd(ctx, w.keys.Procs(), redis.Z{Score: float64(time.Now().UnixMilli()), Member: w.proc})
		return nil
	})
	if err != nil {
		return fmt.Errorf("dispatcher worker: redis: %w", err)
	}
	return nil
}

// unregister hands back anything still in this process's processing lists and
// removes the process.
func (w *Worker) unregister() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := w.requeueProc(ctx, w.proc, "-")
	if err != nil {
		w.log.Error().Err(err).Msg("hand back jobs at shutdown")
		return
	}
	if n > 0 {
		w.m.handedBack.Add(float64(n))
		w.log.Info().Int("jobs", n).Msg("handed unfinished jobs back to their work queues")
	}
}

// requeueProc runs the requeue script for one process (cutoff "-": unconditionally).
func (w *Worker) requeueProc(ctx context.Context, proc, cutoff string) (int, error) {
	workerIDs, err := w.procWorkerIDs(ctx, proc)
	if err != nil {
		return 0, err
	}
	a := &requeueArgs{ProcsKey: w.keys.Procs(), ProcessKey: w.keys.Proc(proc), ControlKey: w.keys.Ctl(proc), ClaimsKey: w.keys.Claims(),
		Process: proc, Cutoff: cutoff, Now: dispatcher.FormatTime(time.Now()), Prefix: w.keys.Job("")}
	for _, id := range workerIDs {
		a.ListsKeys = append(a.ListsKeys, w.keys.Processing(proc, id), w.keys.WorkQueue(id))
	}
	n, err := a.run(ctx, clientRunner{w.rdb})
	return int(n), err
}

// procWorkerIDs finds the worker ids a process served: its record, plus (for a
// record lost or a process of another configuration) its processing lists.
func (w *Worker) procWorkerIDs(ctx context.Context, proc string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(id string) {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	if proc == w.proc {
		for _, s := range w.specs {
			add(s.ID)
		}
	}
	raw, err := w.rdb.HGet(ctx, w.keys.Proc(proc), "worker_ids").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var ids []string
	if raw != "" && json.Unmarshal([]byte(raw), &ids) == nil {
		for _, id := range ids {
			add(id)
		}
	}
	prefix := w.keys.Processing(proc, "")
	iter := w.rdb.Scan(ctx, 0, w.keys.ProcessingPattern(proc), 200).Iterator()
	for iter.Next(ctx) {
		add(strings.TrimPrefix(iter.Val(), prefix))
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// ---- the claim loop ----

// claimLoop takes jobs of one worker id: a free slot, then BLMOVE from the right end
// of the work queue (clients LPUSH: first in, first out) into this process's
// processing list, so that a crash never loses a claimed job.
func (w *Worker) claimLoop(ctx context.Context, s Spec) {
	b, release := w.openBlocking(ctx, "claim")
	if b == nil {
		return
	}
	defer release()
	log := w.log.With().Str(KeyWorkerID, s.ID).Logger()
	slots := w.slots[s.ID]
	src, dst := w.keys.WorkQueue(s.ID), w.keys.Processing(w.proc, s.ID)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		// Not ctx: the pop is woken by CLIENT UNBLOCK, so the connection stays sound.
		id, err := b.conn.BLMove(context.Background(), src, dst, "RIGHT", "LEFT", w.p.BlockTimeout).Result()
		if errors.Is(err, redis.Nil) {
			<-slots
			continue
		}
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return
			}
			log.Error().Err(err).Msg("wait for jobs")
			if !fault.Sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			if !w.reconnect(ctx, b, "claim") {
				return
			}
			w.handBackOrphans(ctx, s, log)
			continue
		}
		backoff = 100 * time.Millisecond
		if ctx.Err() != nil {
			// Claimed while shutting down: it stays in the processing list, and the
			// shutdown hands it back.
			<-slots
			return
		}
		w.claimed(ctx, s, id, log.With().Str(KeyJobID, id).Logger())
	}
}

// handBackOrphans puts back on the work queue the jobs of this worker id's
// processing list that this process does not hold: a pop whose answer the broken
// connection lost moved its job there, and nothing else would ever run it. The claim
// loop of the worker id calls it, so no claim of that id is under way.
func (w *Worker) handBackOrphans(ctx context.Context, s Spec, log zerolog.Logger) {
	ids, err := w.rdb.LRange(ctx, w.keys.Processing(w.proc, s.ID), 0, -1).Result()
	if err != nil {
		return // the next reconnect looks again
	}
	for _, id := range ids {
		if w.core.Lookup(id) == nil {
			log.Warn().Str(KeyJobID, id).Msg("job claimed by a pop whose answer was lost: back on its work queue")
			w.handBackOne(s, id, log)
		}
	}
}

// claimed prepares a job just moved into the processing list. It owns one slot of
// the worker id and either passes it on to the job's goroutine or frees it.
func (w *Worker) claimed(ctx context.Context, s Spec, id string, log zerolog.Logger) {
	slots := w.slots[s.ID]
	weight := 1
	free := func() {
		for i := 0; i < weight; i++ {
			<-slots
		}
	}
	ex, fresh := w.core.Add(id, s.ID)
	if !fresh {
		// The same id was queued twice and runs here already: the running one's end
		// acknowledges one entry; this one is dropped.
		_ = w.rdb.LRem(w.core.JobCtx(), w.keys.Processing(w.proc, s.ID), 1, id).Err()
		log.Warn().Msg("job id queued again while it runs in this process: duplicate dropped")
		free()
		return
	}
	keep := false
	defer func() {
		if !keep {
			w.core.Remove(ex)
			free()
		}
	}()
	h, err := w.rdb.HGetAll(w.core.JobCtx(), w.keys.Job(id)).Result()
	if err != nil {
		log.Error().Err(err).Msg("read job; handing it back")
		w.handBackOne(s, id, log)
		return
	}
	if len(h) == 0 {
		_ = w.rdb.LRem(w.core.JobCtx(), w.keys.Processing(w.proc, s.ID), 1, id).Err()
		w.m.errors.WithLabelValues(s.ID, "unknown_job").Inc()
		log.Warn().Msg("job id on the work queue has no job hash: skipped")
		return
	}
	j, derr := dispatcher.ParseJob(id, h)
	if msg := w.invalid(j, derr); msg != "" {
		w.finish(s, ex, j, outcome{status: dispatcher.StatusError, err: msg, reason: "invalid"}, log)
		return
	}
	if deps := j.AllDependencies(); len(deps) > 0 {
		res, err := w.park(s, j, deps)
		if err != nil {
			log.Error().Err(err).Msg("check dependencies; handing the job back")
			w.handBackOne(s, id, log)
			return
		}
		switch res[0] {
		case "ready":
		case "waiting":
			log.Info().Strs("dependencies", deps).Msg("job waits for its dependencies")
			return
		case "stopped":
			w.m.jobs.WithLabelValues(s.ID, string(dispatcher.StatusError)).Inc()
			w.m.errors.WithLabelValues(s.ID, "stopped").Inc()
			log.Info().Msg("job stopped before it started")
			w.ended(id)
			return
		case "failed":
			i, _ := strconv.Atoi(res[1])
			d := deps[max(0, min(i-1, len(deps)-1))]
			w.finish(s, ex, j, outcome{status: dispatcher.StatusError, err: fmt.Sprintf("dependency %s failed", d), reason: "dependency_failed"}, log)
			return
		case "dropped":
			log.Info().Msg("job stopped before it started: dropped from the queue")
			return
		default: // lost
			return
		}
	}
	if !j.Concurrent && cap(slots) > 1 {
		// Not concurrent: it runs alone. Take every slot of the worker id (waiting for
		// the running jobs); the claim loop takes nothing meanwhile.
		for weight < cap(slots) {
			select {
			case slots <- struct{}{}:
				weight++
			case <-ctx.Done():
				return // stays in the processing list: the shutdown hands it back
			}
		}
	}
	keep = true
	w.core.Begin()
	go func() {
		defer func() {
			w.core.Remove(ex)
			free()
			w.core.Done()
		}()
		w.execute(s, ex, j, log)
	}()
}

// invalid says why a job hash cannot run ("" when it can).
func (w *Worker) invalid(j *dispatcher.Job, derr error) string {
	if strings.TrimSpace(j.Script) == "" {
		return "invalid job: script is missing"
	}
	var de dispatcher.DecodeError
	if errors.As(derr, &de) {
		for _, f := range []string{dispatcher.FieldTimeout, dispatcher.FieldRetries, dispatcher.FieldConcurrent, dispatcher.FieldEnvVars, dispatcher.FieldPrerequisites, dispatcher.FieldDependencies} {
			if fe := de.Field(f); fe != nil {
				return "invalid job: " + fe.Error()
			}
		}
	}
	for _, d := range j.AllDependencies() {
		if d == j.ID {
			return "invalid job: it depends on itself"
		}
	}
	if j.LogPath != "" {
		if _, err := dispatcher.ResolveLogPath(w.p.LogDir, j.LogPath); err != nil {
			return err.Error()
		}
	}
	return ""
}

// park runs the dependency check (lua/park.lua).
func (w *Worker) park(s Spec, j *dispatcher.Job, deps []string) ([]string, error) {
	now := time.Now()
	ttl := max(w.p.StopMarkTTL, 24*time.Hour)
	a := &parkArgs{ProcKey: w.keys.Processing(w.proc, s.ID), JobKey: w.keys.Job(j.ID), StopKey: w.keys.StopMark(j.ID), ReplyKey: w.keys.Reply(j.ID),
		WaitingKey: w.keys.Waiting(s.ID), ID: j.ID, Now: dispatcher.FormatTime(now), ReplyTTLMs: w.p.ReplyTTL.Milliseconds(),
		RecheckMs: now.Add(w.p.DependencyRecheck).UnixMilli(), Member: s.ID + "\t" + j.ID, DependentsTTLMs: ttl.Milliseconds(), N: int64(len(deps))}
	for _, d := range deps {
		a.DepsKeys = append(a.DepsKeys, w.keys.Job(d))
	}
	for _, d := range deps {
		a.DepsKeys = append(a.DepsKeys, w.keys.Dependents(d))
	}
	res, err := a.run(w.core.JobCtx(), clientRunner{w.rdb})
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, errors.New("park: empty answer")
	}
	if res[0] == "failed" && len(res) < 2 {
		res = append(res, "1")
	}
	return res, nil
}

// handBackOne puts one claimed job back at the consuming end of its queue.
func (w *Worker) handBackOne(s Spec, id string, log zerolog.Logger) {
	err := w.retryWrite(log, "hand the job back", func(ctx context.Context) error {
		_, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.LRem(ctx, w.keys.Processing(w.proc, s.ID), 1, id)
			p.RPush(ctx, w.keys.WorkQueue(s.ID), id)
			return nil
		})
		return err
	})
	if err != nil {
		log.Error().Err(err).Msg("hand the job back (it stays claimed until this process stops)")
	}
}

// retryWrite runs a write (each try with 5 s), again with backoff while it fails
// with a passing Redis fault, until it succeeds or the shutdown's drain ends.
func (w *Worker) retryWrite(log zerolog.Logger, what string, write func(ctx context.Context) error) error {
	var bo fault.Backoff
	for {
		ctx, cancel := context.WithTimeout(w.core.JobCtx(), 5*time.Second)
		err := write(ctx)
		cancel()
		if err == nil || !fault.Transient(err) {
			return err
		}
		w.m.finishRetries.Inc()
		log.Warn().Err(err).Msg(what + ": Redis unavailable; retrying")
		if !bo.Sleep(w.core.EndCtx()) {
			return err
		}
	}
}

// ended releases the jobs that wait for this one: each goes back to its work queue,
// where its next claim sees the dependency's end.
func (w *Worker) ended(id string) {
	var members []string
	err := w.retryWrite(w.log.With().Str(KeyJobID, id).Logger(), "read the jobs waiting for an ended job", func(ctx context.Context) error {
		var err error
		members, err = w.rdb.SMembers(ctx, w.keys.Dependents(id)).Result()
		return err
	})
	if err != nil || len(members) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(w.core.JobCtx(), 5*time.Second)
	defer cancel()
	for _, m := range members {
		wid, jid, ok := strings.Cut(m, "\t")
		if !ok {
			continue
		}
		if n, err := (&releaseArgs{WaitingKey: w.keys.Waiting(wid), QueueKey: w.keys.WorkQueue(wid), ID: jid}).run(ctx, clientRunner{w.rdb}); err == nil && n == 1 {
			w.log.Debug().Str(KeyJobID, jid).Str("dependency", id).Msg("dependency ended: waiting job back on its queue")
		}
	}
	_ = w.rdb.Del(ctx, w.keys.Dependents(id)).Err()
}

// ---- stop requests ----

// stopLoop watches every served stop queue and this process's control list with one
// blocking pop (no polling).
func (w *Worker) stopLoop(ctx context.Context) {
	b, release := w.openBlocking(ctx, "stop")
	if b == nil {
		return
	}
	defer release()
	ctl := w.keys.Ctl(w.proc)
	keys := []string{ctl}
	for _, s := range w.specs {
		keys = append(keys, w.keys.StopQueue(s.ID))
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		res, err := b.conn.BLPop(context.Background(), w.p.BlockTimeout, keys...).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.log.Error().Err(err).Msg("wait for stop requests")
			if !fault.Sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			if !w.reconnect(ctx, b, "stop") {
				return
			}
			continue
		}
		backoff = 100 * time.Millisecond
		key, id := res[0], res[1]
		if key == ctl {
			if ex := w.core.Lookup(id); ex != nil {
				ex.Kill(reasonStopRequested)
				w.log.Info().Str(KeyJobID, id).Str(KeyWorkerID, ex.Tag).Msg("stop request forwarded by another process: stopping the job")
			}
			continue
		}
		w.handleStop(w.byStop[key], id)
	}
}

// handleStop applies a stop request taken from a worker id's stop queue.
func (w *Worker) handleStop(workerID, id string) {
	log := w.log.With().Str(KeyWorkerID, workerID).Str(KeyJobID, id).Logger()
	if ex := w.core.Lookup(id); ex != nil {
		// Running (or about to): a running process is killed; a job not yet started
		// is ended below as "stopped" and its start sees the stop mark.
		ex.Kill(reasonStopRequested)
	}
	ctx, cancel := context.WithTimeout(w.core.JobCtx(), 5*time.Second)
	defer cancel()
	res, err := (&stopArgs{JobKey: w.keys.Job(id), ClaimsKey: w.keys.Claims(), StopKey: w.keys.StopMark(id), WaitingKey: w.keys.Waiting(workerID),
		ReplyKey: w.keys.Reply(id), ID: id, Now: dispatcher.FormatTime(time.Now()), StopTTLMs: w.p.StopMarkTTL.Milliseconds(),
		ReplyTTLMs: w.p.ReplyTTL.Milliseconds()}).run(ctx, clientRunner{w.rdb})
	if err != nil || len(res) == 0 {
		log.Error().Err(err).Msg("stop request")
		return
	}
	switch res[0] {
	case "claimed":
		owner := ""
		if len(res) > 1 {
			owner = res[1]
		}
		if owner == w.proc {
			log.Info().Msg("stop request: stopping the running job")
			return
		}
		_, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.LPush(ctx, w.keys.Ctl(owner), id)
			p.PExpire(ctx, w.keys.Ctl(owner), w.p.ReplyTTL)
			return nil
		})
		if err != nil {
			log.Error().Err(err).Str("owner", owner).Msg("forward stop request")
			return
		}
		log.Info().Str("owner", owner).Msg("stop request forwarded to the process running the job")
	case "stopped":
		w.m.jobs.WithLabelValues(workerID, string(dispatcher.StatusError)).Inc()
		w.m.errors.WithLabelValues(workerID, "stopped").Inc()
		log.Info().Msg("job stopped before it started")
		w.ended(id)
	case "final":
		log.Info().Msg("stop request for a job that has ended: ignored")
	case "foreign":
		log.Warn().Msg("stop request for a job started by a worker that is not ours: noted; it ends as stopped if one of ours takes it")
	case "missing":
		log.Warn().Msg("stop request for an unknown job: ignored")
	}
}

// ---- heartbeats, stale detection, dependency re-checks ----

// heartbeatLoop refreshes this process's heartbeat every Heartbeat period.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	tick.Every(ctx, w.p.Heartbeat, func() { w.heartbeat(ctx) })
}

// heartbeat refreshes this process's heartbeat. If another process removed it as
// stale (a pause longer than StaleAfter), the jobs it requeued are stopped here and
// the process announces itself again.
func (w *Worker) heartbeat(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, w.p.Heartbeat)
	ok, err := (&heartbeatArgs{ProcsKey: w.keys.Procs(), Process: w.proc, NowMs: time.Now().UnixMilli()}).run(hctx, clientRunner{w.rdb})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error().Err(err).Msg("heartbeat")
		}
		return
	}
	if ok == 1 {
		return
	}
	w.log.Warn().Msg("this process was taken for dead (no heartbeat for too long): its jobs went back to their queues")
	for _, ex := range w.core.Running() {
		if pos := w.rdb.LPos(ctx, w.keys.Processing(w.proc, ex.Tag), ex.Key, redis.LPosArgs{}); errors.Is(pos.Err(), redis.Nil) {
			ex.Kill(reasonLost)
		}
	}
	if err := w.announce(ctx); err != nil {
		w.log.Error().Err(err).Msg("announce again")
	}
}

// sweepLoop requeues the jobs of dead processes (every heartbeat period) and
// re-checks jobs waiting for dependencies (every DependencyRecheck: a safety net
// for dependencies that ended outside this implementation).
func (w *Worker) sweepLoop(ctx context.Context) {
	stale := time.NewTicker(w.p.Heartbeat)
	defer stale.Stop()
	deps := time.NewTicker(w.p.DependencyRecheck)
	defer deps.Stop()
	w.sweepStale(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-stale.C:
			w.sweepStale(ctx)
		case <-deps.C:
			w.recheckWaiting(ctx)
		}
	}
}

// sweepStale requeues the jobs of our processes whose heartbeat is older than
// StaleAfter. Only processes in <prefix>coord:procs are considered: a job taken by a
// worker of another implementation (no heartbeat of ours) is never touched.
func (w *Worker) sweepStale(ctx context.Context) {
	cutoff := time.Now().Add(-w.p.StaleAfter).UnixMilli()
	procs, err := w.rdb.ZRangeByScore(ctx, w.keys.Procs(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(cutoff, 10), Count: 100}).Result()
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error().Err(err).Msg("stale sweep")
		}
		return
	}
	for _, p := range procs {
		if p == w.proc {
			continue
		}
		n, err := w.requeueProc(ctx, p, strconv.FormatInt(cutoff, 10))
		if err != nil {
			w.log.Error().Err(err).Str("process", p).Msg("requeue the jobs of a dead process")
			continue
		}
		if n < 0 {
			continue // it heart-beat meanwhile
		}
		w.m.requeued.Add(float64(n))
		w.log.Warn().Str("process", p).Int("jobs", n).Msg("worker process stopped heart-beating: its jobs are back on their work queues")
	}
}

// recheckWaiting sends waiting jobs whose re-check time has come back to their queue;
// the claim checks their dependencies again.
func (w *Worker) recheckWaiting(ctx context.Context) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, s := range w.specs {
		ids, err := w.rdb.ZRangeByScore(ctx, w.keys.Waiting(s.ID), &redis.ZRangeBy{Min: "-inf", Max: now, Count: 1000}).Result()
		if err != nil {
			continue
		}
		for _, id := range ids {
			// best effort: the dependency's end or the recheck releases it again
			_, _ = (&releaseArgs{WaitingKey: w.keys.Waiting(s.ID), QueueKey: w.keys.WorkQueue(s.ID), ID: id}).run(ctx, clientRunner{w.rdb})
		}
	}
}

// drain lets the running jobs finish for DrainTimeout, then stops the rest; the ones
// stopped this way stay in the processing list and unregister hands them back.
func (w *Worker) drain() { w.core.Drain(w.p.DrainTimeout) }
