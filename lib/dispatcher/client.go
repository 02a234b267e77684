package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"
)

// ErrNotFound is returned for a job id without a job hash.
var ErrNotFound = errors.New("not found")

// ErrTimeout is returned by RunJobAndAwaitResult when no reply came in time.
var ErrTimeout = errors.New("timed out")

// NotFoundError names the missing job.
type NotFoundError struct{ ID string }

func (e *NotFoundError) Error() string   { return fmt.Sprintf("job %q not found", e.ID) }
func (e *NotFoundError) Is(t error) bool { return t == ErrNotFound }

// TimeoutError names the job whose reply did not come; the job itself goes on.
type TimeoutError struct {
	ID   string
	Wait time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("no reply for job %s within %s (the job is not stopped; get_job_status tells how it goes)", e.ID, e.Wait)
}
func (e *TimeoutError) Is(t error) bool { return t == ErrTimeout }

// InvalidJobError is a job the client refuses to store.
type InvalidJobError struct {
	Field string
	Msg   string
}

func (e *InvalidJobError) Error() string { return e.Msg }

// ClientOptions configure a Client.
type ClientOptions struct {
	Prefix string // key prefix; "" = DefaultPrefix ("hero:")
	// LogDir is the only directory JobLogs reads log_path files from ("" = it reads
	// none and returns the copy kept in Redis). A job hash is writable by anyone with
	// access to Redis, so log_path is never trusted beyond this directory.
	LogDir      string
	MaxLogBytes int                   // largest log file read by JobLogs (default 4 MiB)
	Registerer  prometheus.Registerer // nil: no metrics
}

// Client is the dispatcher side of the protocol: it creates and submits jobs, lists
// them, reads their status and logs, asks for stops and runs a job synchronously. rdb
// must be on the protocol's DB.
type Client struct {
	rdb     *redis.Client
	keys    Keys
	logDir  string
	maxLog  int
	created prometheus.Counter

	ownsRedis bool
}

// Close closes the Redis connection if the client opened it (ClientConfig.Open).
func (c *Client) Close() error {
	if c.ownsRedis {
		return c.rdb.Close()
	}
	return nil
}

// NewClient returns a client; an unreadable LogDir is an error.
func NewClient(rdb *redis.Client, opt ClientOptions) (*Client, error) {
	dir, err := CleanLogDir(opt.LogDir)
	if err != nil {
		return nil, fmt.Errorf("dispatcher log directory: %v", err)
	}
	c := &Client{rdb: rdb, keys: NewKeys(opt.Prefix), logDir: dir, maxLog: opt.MaxLogBytes}
	if c.maxLog <= 0 {
		c.maxLog = 4 << 20
	}
	reg := opt.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	c.created = promauto.With(reg).NewCounter(prometheus.CounterOpts{Name: "hero_dispatcher_jobs_created_total",
		Help: "Hero Dispatcher jobs created by this process (dispatcher side)."})
	return c, nil
}

// Keys returns the client's key names.
func (c *Client) Keys() Keys { return c.keys }

// Redis returns the underlying client.
func (c *Client) Redis() *redis.Client { return c.rdb }

// validate checks what the client can check before storing a job.
func validateJob(j *Job) error {
	switch {
	case j == nil:
		return &InvalidJobError{Field: "job", Msg: "job is required"}
	case strings.TrimSpace(j.Script) == "":
		return &InvalidJobError{Field: FieldScript, Msg: "script is required"}
	case j.ID != "" && (strings.ContainsAny(j.ID, " \t\r\n") || len(j.ID) > 256):
		return &InvalidJobError{Field: FieldID, Msg: fmt.Sprintf("id %q must be at most 256 characters without spaces", j.ID)}
	case j.Timeout < 0:
		return &InvalidJobError{Field: FieldTimeout, Msg: "timeout must not be negative"}
	case j.Retries < 0 || j.Retries > MaxRetries:
		return &InvalidJobError{Field: FieldRetries, Msg: fmt.Sprintf("retries must be from 0 to %d", MaxRetries)}
	}
	for k := range j.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return &InvalidJobError{Field: FieldEnvVars, Msg: fmt.Sprintf("env_vars: %q is not a variable name", k)}
		}
	}
	for _, d := range j.AllDependencies() {
		if d == j.ID && d != "" {
			return &InvalidJobError{Field: FieldDependencies, Msg: "a job cannot depend on itself"}
		}
	}
	return nil
}

// prepare fills what a new job gets: a UUID v4 id, timestamps, status dispatched.
func prepare(j *Job, workerID string) {
	if j.ID == "" {
		j.ID = NewJobID()
	}
	now := time.Now().UTC()
	if j.CreatedAt.IsZero() {
		j.CreatedAt = now
	}
	j.UpdatedAt = now
	j.Status = StatusDispatched
	j.Output, j.Error = "", ""
	if workerID != "" {
		j.WorkerID = workerID
	}
}

func (c *Client) store(ctx context.Context, p redis.Pipeliner, j *Job) {
	// A job id used again starts clean: no fields, reply, stop request or log of a
	// previous run remain.
	p.Del(ctx, c.keys.Job(j.ID), c.keys.Reply(j.ID), c.keys.StopMark(j.ID), c.keys.Log(j.ID))
	p.HSet(ctx, c.keys.Job(j.ID), hashArgs(j.Hash())...)
}

// CreateJob stores a job (HSET <prefix>job:<id>): a new UUID v4 id when it has none,
// created_at/updated_at now, status dispatched. It does not queue it.
func (c *Client) CreateJob(ctx context.Context, j *Job) error {
	if err := validateJob(j); err != nil {
		return err
	}
	prepare(j, "")
	if _, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		c.store(ctx, p, j)
		return nil
	}); err != nil {
		return err
	}
	c.created.Inc()
	return nil
}

// SubmitJob stores a job and queues it for a worker (HSET, then LPUSH
// <prefix>work_queue:<worker_id> <id>, in one transaction). workerID "" uses the
// job's worker_id.
func (c *Client) SubmitJob(ctx context.Context, j *Job, workerID string) error {
	if err := validateJob(j); err != nil {
		return err
	}
	if workerID == "" {
		workerID = j.WorkerID
	}
	if strings.TrimSpace(workerID) == "" {
		return &InvalidJobError{Field: FieldWorkerID, Msg: "worker_id is required"}
	}
	prepare(j, workerID)
	if _, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		c.store(ctx, p, j)
		p.LPush(ctx, c.keys.WorkQueue(workerID), j.ID)
		return nil
	}); err != nil {
		return err
	}
	c.created.Inc()
	return nil
}

// ListJobs returns one page of job ids (SCAN cursor MATCH <prefix>job:* COUNT
// count, never KEYS) and the cursor of the next page (0 when done). As with SCAN, a
// page may be empty before the end and an id may come twice over a whole iteration.
func (c *Client) ListJobs(ctx context.Context, cursor uint64, count int64) ([]string, uint64, error) {
	if count <= 0 {
		count = 100
	}
	keys, next, err := c.rdb.Scan(ctx, cursor, c.keys.JobPattern(), count).Result()
	if err != nil {
		return nil, 0, err
	}
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		if id := c.keys.JobID(k); id != "" {
			ids = append(ids, id)
		}
	}
	return ids, next, nil
}

// JobStatus reads a job (HGETALL <prefix>job:<id>); a missing job is ErrNotFound.
// Fields that cannot be read (another writer's bad value) are left zero.
func (c *Client) JobStatus(ctx context.Context, id string) (*Job, error) {
	h, err := c.rdb.HGetAll(ctx, c.keys.Job(id)).Result()
	if err != nil {
		return nil, err
	}
	if len(h) == 0 {
		return nil, &NotFoundError{ID: id}
	}
	j, _ := ParseJob(id, h)
	return j, nil
}

// JobLogs is what is known of a job's output.
type JobLogs struct {
	ID        string
	Status    Status
	LogPath   string
	Stored    string // the bounded copy our workers keep in Redis (<prefix>coord:log:<id>)
	HasStored bool
	File      string // log_path's content, when it lies in the client's LogDir and could be read
	FileRead  bool
	Truncated bool   // File is only the first MaxLogBytes
	FileError string // why log_path was not read
	Output    string // the job's output field
}

// Text returns the best log there is and where it came from: the log_path file, else
// the Redis copy, else the job's output.
func (l *JobLogs) Text() (text, source string) {
	switch {
	case l.FileRead:
		return l.File, "file"
	case l.HasStored:
		return l.Stored, "redis"
	}
	return l.Output, "output"
}

// JobLogs reads a job's logs: HGETALL for log_path and output, the Redis copy, and
// the log_path file when it lies inside the client's log directory.
func (c *Client) JobLogs(ctx context.Context, id string) (*JobLogs, error) {
	var hcmd *redis.MapStringStringCmd
	var lcmd *redis.StringCmd
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		hcmd = p.HGetAll(ctx, c.keys.Job(id))
		lcmd = p.Get(ctx, c.keys.Log(id))
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	h := hcmd.Val()
	if len(h) == 0 {
		return nil, &NotFoundError{ID: id}
	}
	j, _ := ParseJob(id, h)
	out := &JobLogs{ID: id, Status: j.Status, LogPath: j.LogPath, Output: j.Output}
	if lcmd.Err() == nil {
		out.Stored, out.HasStored = lcmd.Val(), true
	}
	if j.LogPath != "" {
		if c.logDir == "" {
			out.FileError = "this dispatcher reads no log files (no log directory configured)"
		} else if s, trunc, err := readLogFile(c.logDir, j.LogPath, c.maxLog); err != nil {
			out.FileError = err.Error()
		} else {
			out.File, out.FileRead, out.Truncated = s, true, trunc
		}
	}
	return out, nil
}

// StopJob asks the job's worker to stop it (LPUSH <prefix>stop_queue:<worker_id>
// <id>, the worker_id read from the job). It returns the worker id.
func (c *Client) StopJob(ctx context.Context, id string) (string, error) {
	h, err := c.rdb.HGetAll(ctx, c.keys.Job(id)).Result()
	if err != nil {
		return "", err
	}
	if len(h) == 0 {
		return "", &NotFoundError{ID: id}
	}
	w := h[FieldWorkerID]
	if strings.TrimSpace(w) == "" {
		return "", &InvalidJobError{Field: FieldWorkerID, Msg: fmt.Sprintf("job %s has no worker_id: no stop queue to send to", id)}
	}
	if err := c.rdb.LPush(ctx, c.keys.StopQueue(w), id).Err(); err != nil {
		return "", err
	}
	return w, nil
}

// RunResult is the end of a synchronous run: the reply the worker pushed and the job
// as read right after it (Status tells success from failure).
type RunResult struct {
	Job   *Job
	Reply string
}

// RunJobAndAwaitResult stores and queues a job, then waits for its reply: HSET, LPUSH
// <prefix>work_queue:<worker_id>, BLPOP <prefix>reply:<id> <timeout>. timeout is
// rounded up to whole seconds; 0 waits until ctx ends. On timeout the error is a
// *TimeoutError (errors.Is ErrTimeout) and the job goes on.
func (c *Client) RunJobAndAwaitResult(ctx context.Context, j *Job, workerID string, timeout time.Duration) (*RunResult, error) {
	if err := c.SubmitJob(ctx, j, workerID); err != nil {
		return nil, err
	}
	reply, err := c.awaitReply(ctx, j.ID, timeout)
	if err != nil {
		return nil, err
	}
	got, err := c.JobStatus(ctx, j.ID)
	if err != nil {
		return nil, err
	}
	return &RunResult{Job: got, Reply: reply}, nil
}

// awaitReply blocks on the reply list (BLPOP): once with the timeout, or — with no
// timeout — again and again until ctx ends.
func (c *Client) awaitReply(ctx context.Context, id string, timeout time.Duration) (string, error) {
	key := c.keys.Reply(id)
	if timeout > 0 {
		secs := (timeout + time.Second - 1) / time.Second * time.Second
		res, err := c.rdb.BLPop(ctx, secs, key).Result()
		if errors.Is(err, redis.Nil) {
			return "", &TimeoutError{ID: id, Wait: secs}
		}
		if err != nil {
			return "", err
		}
		return res[1], nil
	}
	start := time.Now()
	for {
		if ctx.Err() != nil {
			return "", &TimeoutError{ID: id, Wait: time.Since(start).Round(time.Second)}
		}
		res, err := c.rdb.BLPop(ctx, 5*time.Second, key).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return "", &TimeoutError{ID: id, Wait: time.Since(start).Round(time.Second)}
			}
			return "", err
		}
		return res[1], nil
	}
}
