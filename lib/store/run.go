package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// The runner's side of a job: start (after the claim), finish (with the ack and the
// result message, atomically), logs, and stop requests.

// StartOutcome says what a claimed job is to the runner.
type StartOutcome int

const (
	StartRun     StartOutcome = iota // run it
	StartGone                        // the job hash is gone: acked, nothing to do
	StartDone                        // already ended (a duplicate delivery): acked
	StartStopped                     // stop was requested before it started: finish it as stopped
)

// claimStartScript claims the oldest job of a queue and marks it started, in one round
// trip: KEYS queue, processing list, leases, events; ARGV worker, queue name, lease
// expiry ms, claim id, now_ms, n, then n field/value items to set and the fields to
// clear (ClaimStart builds both lists and applies them to the reply). The claim id is written
// into the job: only this run may finish it (a job queued again while a first run of
// it ends is run anew). It returns false when the queue is empty, else {item, code,
// attempt, job hash as a flat list}: the runner learns everything about the job in the
// same round trip. An item that is no job key, a job that is gone (code 1) and a job
// that already ended (code 2) are dropped from the processing list at once.
var claimStartScript = newLibScript(`
local proc, leases, ek = KEYS[2], KEYS[3], KEYS[4]
local worker, qname, exp, claim, now_ms, nset = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local item = redis.call('LMOVE', KEYS[1], proc, 'RIGHT', 'LEFT')
if not item then return false end
local member = worker .. '\t' .. qname .. '\t' .. item .. '\t' .. claim
redis.call('ZADD', leases, exp, member)
-- One read of the whole hash; the reply is that hash before this script's changes,
-- which the caller applies itself (it knows them).
local flat = {}
if string.match(item, '^job:%d+:%d+$') then flat = redis.call('HGETALL', item) end
local h = {}
for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
local st = h['status']
if not st or st == 'finished' or st == 'error' then
  redis.call('LREM', proc, 1, item)
  redis.call('ZREM', leases, member)
  if st then return {item, 2, 0, {}} end
  return {item, 1, 0, {}}
end
local attempt = tonumber(h['attempt'] or '1') or 1
local prev = h['worker']
local flow = h['flow_id'] or '0'
local id = h['id'] or ''
local caller = h['caller_id'] or ''
local set, clear = {}, {}
for i = 7, 6 + nset do set[#set + 1] = ARGV[i] end
for i = 7 + nset, #ARGV do if h[ARGV[i]] then clear[#clear + 1] = ARGV[i] end end
redis.call('HSET', item, unpack(set))
index_job(caller .. ':' .. id, st, 'started')
if #clear > 0 then redis.call('HDEL', item, unpack(clear)) end
if flow ~= '0' and flow ~= '' then
  local dag = 'coord:dag:' .. flow
  if redis.call('HGET', dag, 's:' .. id) == 'dispatched' then redis.call('HSET', dag, 's:' .. id, 'running') end
end
local detail = 'attempt ' .. attempt .. ' on ' .. worker
if st == 'started' and prev and prev ~= worker then detail = detail .. ' (taken over from ' .. prev .. ')' end
redis.call('XADD', ek, 'MAXLEN', '~', ` + strconv.Itoa(EventsMaxLen) + `, '*', 'type', 'job.started', 'actor', 'runner', 'time_ms', now_ms, 'flow_id', flow, 'job_id', id, 'caller_id', caller, 'status', 'started', 'detail', detail)
local code = 0
if h['stop_requested'] == '1' then code = 3 end
return {item, code, attempt, flat}
`)

// ClaimStart claims the oldest job of a queue under a lease and marks it started, in
// one round trip: Claim and StartJob together. traceID (W3C, 32 hex digits) is stored
// as the job's trace_id. It returns a nil claim when the queue is empty; with
// StartGone or StartDone the item is already acked.
func (d *DB) ClaimStart(ctx context.Context, queue, consumer string, lease time.Duration, traceID string) (*Claim, StartOutcome, *model.Job, error) {
	now := time.Now()
	c := &Claim{Queue: queue, Consumer: consumer, ID: newClaimID()}
	// What a start writes into the job: the script sets these fields, and applies
	// them to the hash it returns (as it was before) here, from the same list.
	secs := strconv.FormatInt(now.Unix(), 10)
	set := []string{"status", string(model.JobStarted), "worker", consumer, "claim", c.ID,
		"started_at", secs, "started_at_ms", strconv.FormatInt(now.UnixMilli(), 10), "updated_at", secs}
	if traceID != "" {
		set = append(set, "trace_id", traceID)
	}
	args := []any{consumer, queue, now.Add(lease).UnixMilli(), c.ID, now.UnixMilli(), len(set)}
	for _, v := range set {
		args = append(args, v)
	}
	for _, v := range startClears {
		args = append(args, v)
	}
	res, err := d.Eval(ctx, claimStartScript, []string{queue, keys.Processing(consumer), keys.Leases, keys.Events}, args...)
	if err == redis.Nil {
		return nil, StartGone, nil, nil
	}
	if err != nil {
		return nil, StartGone, nil, fmt.Errorf("claim and start from %s of context %d: %w", queue, d.ContextID, err)
	}
	vals, _ := res.([]any)
	if len(vals) != 4 {
		return nil, StartGone, nil, fmt.Errorf("claim and start from %s of context %d: unexpected reply %v", queue, d.ContextID, res)
	}
	c.Item, _ = vals[0].(string)
	if _, _, err := keys.ParseJobKey(c.Item); err != nil {
		return c, StartGone, nil, fmt.Errorf("dropped queue item %q of %s: %w", c.Item, queue, err)
	}
	out, j, err := d.started(c.Item, vals[1:], func(h map[string]string) {
		for i := 0; i+1 < len(set); i += 2 {
			h[set[i]] = set[i+1]
		}
		for _, k := range startClears {
			delete(h, k)
		}
	})
	return c, out, j, err
}

// startClears are the fields of an earlier run's end that a start removes.
var startClears = []string{"error", "exit_code", "finished_at", "finished_at_ms"}

// started reads a start script's {code, attempt, job hash}.
func (d *DB) started(item string, vals []any, patch func(map[string]string)) (StartOutcome, *model.Job, error) {
	if len(vals) != 3 {
		return StartGone, nil, fmt.Errorf("start job %s: unexpected reply %v", item, vals)
	}
	code, _ := vals[0].(int64)
	out := StartOutcome(code)
	if out == StartGone || out == StartDone {
		return out, nil, nil
	}
	h := flatMap(vals[2])
	if patch != nil {
		patch(h)
	}
	var j model.Job
	if err := model.FromHash(item, h, &j); err != nil {
		return StartGone, nil, err
	}
	if j.ContextID == 0 {
		j.ContextID = d.ContextID
	}
	return out, &j, nil
}

// JobOutcome is how a run ended.
type JobOutcome struct {
	Status     model.JobStatus // finished or error
	Error      string
	ExitCode   int
	Result     map[string]string
	Fatal      bool          // no retry (stopped, no interpreter, …)
	RetryAfter time.Duration // an executor asked to be retried after this long
	Log        []byte        // appended to the job's log with the end (e.g. a handler call's header)
	LogMax     int           // the log's cap in bytes (0: MaxLogBytes)
}

// finishJobScript: KEYS job, processing list, leases, msg_out, events, log;
// ARGV worker, lease member, item, status, error, exit code, result JSON, fatal, now_s,
// now_ms, ctx, caller, id, flow, retry-after ms, claim id, log chunk, log cap, then the
// result message's field/value pairs. Only the run that holds the job's current claim can finish it.
// Only the worker that holds the job can finish it; a second finish changes nothing.
var finishJobScript = newLibScript(`
local jk, proc, leases, mo, ek = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local worker, member, item, status, err, code, result, fatal = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local now_s, now_ms, ctx, caller, id, flow, retry_after = ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14], tonumber(ARGV[15])
redis.call('LREM', proc, 1, item)
redis.call('ZREM', leases, member)
local cur = redis.call('HMGET', jk, 'claim', 'status')
if cur[1] ~= ARGV[16] or cur[2] ~= 'started' then return 0 end
local set = {'status', status, 'exit_code', code, 'result', result, 'finished_at', now_s, 'finished_at_ms', now_ms, 'updated_at', now_s}
local del = {}
if err ~= '' then set[#set + 1] = 'error'; set[#set + 1] = err else del[#del + 1] = 'error' end
if fatal == '1' then set[#set + 1] = 'fatal'; set[#set + 1] = '1' else del[#del + 1] = 'fatal' end
if retry_after and retry_after > 0 then set[#set + 1] = 'retry_after_ms'; set[#set + 1] = retry_after else del[#del + 1] = 'retry_after_ms' end
redis.call('HSET', jk, unpack(set))
if #del > 0 then redis.call('HDEL', jk, unpack(del)) end
index_job(caller .. ':' .. id, 'started', status)
if ARGV[17] ~= '' then
  local lk, max = KEYS[6], tonumber(ARGV[18])
  local len = redis.call('STRLEN', lk)
  if len < max then
    local chunk = ARGV[17]
    if len + #chunk > max then chunk = string.sub(chunk, 1, max - len) .. '\n[log truncated at ' .. max .. ' bytes]\n' end
    redis.call('APPEND', lk, chunk)
  end
end
local ev = 'job.finished'
if status ~= 'finished' then ev = 'job.failed' end
redis.call('XADD', ek, 'MAXLEN', '~', ` + strconv.Itoa(EventsMaxLen) + `, '*', 'type', ev, 'actor', 'runner', 'time_ms', now_ms, 'flow_id', flow, 'job_id', id, 'caller_id', caller, 'status', status, 'detail', err)
local mk = store_message(caller, 19, now_ms)
track_msg(caller, id, mk)
redis.call('LPUSH', mo, mk)
redis.call('SELECT', 0)
redis.call('LPUSH', 'coord:wake:msg_out', ctx)
return 1
`)

// FinishJob records a run's end, acks the claim and pushes the result message
// (kind job_result) on msg_out, in one step. false: the job was not held by this
// worker any more (its lease was lost), nothing but the ack happened.
func (d *DB) FinishJob(ctx context.Context, c *Claim, j *model.Job, o JobOutcome) (bool, error) {
	now := time.Now()
	item := keys.Job(j.CallerID, j.ID)
	worker := c.Consumer
	result := o.Result
	if result == nil {
		result = map[string]string{}
	}
	final := *j
	final.Status, final.Error, final.ExitCode, final.Result, final.Fatal = o.Status, o.Error, o.ExitCode, result, o.Fatal
	final.FinishedAt, final.FinishedAtMs = now.Unix(), now.UnixMilli()
	final.Script = "" // the result message does not need to carry the source again
	m := model.Message{
		CallerID: j.CallerID, ContextID: d.ContextID, MessageType: model.MessageTypeJob, MessageFormatType: model.FormatText,
		Message: "result of job " + j.GlobalKey(), Job: []model.Job{final}, Status: model.MessageDispatched,
		CreatedAt: now.Unix(), UpdatedAt: now.Unix(), CreatedAtMs: now.UnixMilli(), FlowID: j.FlowID, Kind: model.KindJobResult,
	}
	logMax := o.LogMax
	if logMax <= 0 {
		logMax = MaxLogBytes
	}
	fatal := "0"
	if o.Fatal {
		fatal = "1"
	}
	args := []any{worker, c.member(), item, string(o.Status), o.Error, o.ExitCode, model.EncodeField(result), fatal,
		now.Unix(), now.UnixMilli(), d.ContextID, j.CallerID, j.ID, j.FlowID, o.RetryAfter.Milliseconds(), c.ID, o.Log, logMax}
	fields := model.HashFields(&m)
	for i := 0; i < len(fields); i += 2 {
		if fields[i] == "id" {
			continue
		}
		args = append(args, fields[i], fields[i+1])
	}
	res, err := d.Eval(ctx, finishJobScript, []string{item, keys.Processing(c.Consumer), keys.Leases, keys.MsgOut, keys.Events, keys.JobLog(j.CallerID, j.ID)}, args...)
	if err != nil {
		return false, fmt.Errorf("finish job %s: %w", j.GlobalKey(), err)
	}
	n, _ := res.(int64)
	return n == 1, nil
}

// MaxLogBytes caps a job's stored log by default.
const MaxLogBytes = 4 << 20

// appendLogScript: KEYS log; ARGV chunk, max bytes, ttl seconds (0 none). Appends
// within the cap; past it, one truncation note. Returns the new length.
var appendLogScript = NewScript(`
local len = redis.call('STRLEN', KEYS[1])
local max = tonumber(ARGV[2])
if len >= max then return len end
local chunk = ARGV[1]
if len + #chunk > max then
  chunk = string.sub(chunk, 1, max - len) .. '\n[log truncated at ' .. max .. ' bytes]\n'
end
return redis.call('APPEND', KEYS[1], chunk)
`)

// AppendLog appends to a job's log (bounded).
func (d *DB) AppendLog(ctx context.Context, callerID, id uint32, chunk []byte, max int) error {
	if max <= 0 {
		max = MaxLogBytes
	}
	_, err := d.Eval(ctx, appendLogScript, []string{keys.JobLog(callerID, id)}, chunk, max)
	return err
}

// ReadLog returns a job's log from offset (at most limit bytes) and the next offset.
func (d *DB) ReadLog(ctx context.Context, callerID, id uint32, offset, limit int64) ([]byte, int64, error) {
	if offset < 0 {
		offset = 0
	}
	if limit <= 0 {
		limit = 1 << 20
	}
	var cmd *redis.StringCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.GetRange(ctx, keys.JobLog(callerID, id), offset, offset+limit-1)
		return nil
	}); err != nil {
		return nil, offset, fmt.Errorf("read log of job %d:%d: %w", callerID, id, err)
	}
	b := []byte(cmd.Val())
	return b, offset + int64(len(b)), nil
}

// RequestStop marks a job to be stopped. If a worker runs it, the worker's control list
// in DB 0 gets the request. It returns the worker ("" if none) and the job's status.
func (d *DB) RequestStop(ctx context.Context, callerID, id uint32, actor string) (worker string, status model.JobStatus, err error) {
	j, err := d.LoadJob(ctx, callerID, id)
	if err != nil {
		return "", "", err
	}
	if j.Status.Terminal() {
		return "", j.Status, nil
	}
	now := time.Now()
	_, err = d.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keys.Job(callerID, id), "stop_requested", "1", "updated_at", now.Unix())
		AddEvent(ctx, p, &Event{Type: "job.stop_requested", Actor: actor, FlowID: j.FlowID, JobID: id, CallerID: callerID, Status: string(j.Status)})
		if j.Status == model.JobStarted && j.Worker != "" {
			p.Select(ctx, 0)
			p.LPush(ctx, keys.StopList(j.Worker), model.JobRef{ContextID: d.ContextID, CallerID: callerID, ID: id}.String())
			p.Expire(ctx, keys.StopList(j.Worker), time.Hour)
		}
		return nil
	})
	if err != nil {
		return "", "", fmt.Errorf("stop job %d:%d: %w", callerID, id, err)
	}
	if j.Status == model.JobStarted {
		return j.Worker, j.Status, nil
	}
	return "", j.Status, nil
}
