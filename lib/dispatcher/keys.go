package dispatcher

import "strings"

// DefaultPrefix is the seed's namespace: every key of the protocol starts with it.
const DefaultPrefix = "hero:"

// Keys names every key of the protocol under one prefix. The seed's keys are
// <prefix>job:<id>, <prefix>work_queue:<worker_id>, <prefix>stop_queue:<worker_id> and
// <prefix>reply:<id>. What this implementation adds lives under <prefix>coord:, which
// none of the seed's patterns (in particular <prefix>job:*) can match.
type Keys struct{ Prefix string }

// NewKeys returns the keys under prefix ("" means DefaultPrefix).
func NewKeys(prefix string) Keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Keys{Prefix: prefix}
}

// ---- the seed's keys ----

// Job is the job hash: <prefix>job:<job_id>.
func (k Keys) Job(id string) string { return k.Prefix + "job:" + id }

// JobPattern matches every job hash (for SCAN MATCH).
func (k Keys) JobPattern() string { return globEscape(k.Prefix) + "job:*" }

// JobID extracts the job id from a job key ("" if key is not a job key).
func (k Keys) JobID(key string) string {
	id, ok := strings.CutPrefix(key, k.Prefix+"job:")
	if !ok {
		return ""
	}
	return id
}

// WorkQueue is a worker's work queue: clients LPUSH job ids.
func (k Keys) WorkQueue(workerID string) string { return k.Prefix + "work_queue:" + workerID }

// StopQueue is a worker's stop queue: clients LPUSH the ids of jobs to stop.
func (k Keys) StopQueue(workerID string) string { return k.Prefix + "stop_queue:" + workerID }

// Reply is a job's reply list: the worker LPUSHes the result when the job ends.
func (k Keys) Reply(id string) string { return k.Prefix + "reply:" + id }

// ---- our keys (docs/dispatcher.md) ----

func (k Keys) coord() string { return k.Prefix + "coord:" }

// Procs is the zset of our worker processes → last heartbeat (Unix ms).
func (k Keys) Procs() string { return k.coord() + "procs" }

// Proc is a hash describing one worker process (worker_ids, host, pid, started_at).
func (k Keys) Proc(proc string) string { return k.coord() + "proc:" + proc }

// Processing is the list of job ids one process claimed from one worker id's work
// queue and has not finished (the reliable claim).
func (k Keys) Processing(proc, workerID string) string {
	return k.coord() + "processing:" + proc + ":" + workerID
}

// ProcessingPattern matches every processing list of one process.
func (k Keys) ProcessingPattern(proc string) string {
	return globEscape(k.coord()+"processing:"+proc+":") + "*"
}

// Claims is the hash job id → process of every job one of our processes started.
func (k Keys) Claims() string { return k.coord() + "claims" }

// Ctl is one process's control list: stop requests forwarded by another process.
func (k Keys) Ctl(proc string) string { return k.coord() + "ctl:" + proc }

// StopMark says a stop was requested for a job that was not running anywhere of ours
// when the request came: the job ends as "stopped" if a worker of ours takes it.
func (k Keys) StopMark(id string) string { return k.coord() + "stop:" + id }

// Waiting is the zset of one worker id's jobs waiting for their dependencies → time
// (Unix ms) of the next safety re-check.
func (k Keys) Waiting(workerID string) string { return k.coord() + "waiting:" + workerID }

// Dependents is the set of "<worker_id>\t<job_id>" waiting for one job to end.
func (k Keys) Dependents(id string) string { return k.coord() + "dependents:" + id }

// Log is the bounded copy of a job's output (stdout and stderr) kept in Redis.
func (k Keys) Log(id string) string { return k.coord() + "log:" + id }

// globEscape escapes the glob characters of a literal key part for SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
