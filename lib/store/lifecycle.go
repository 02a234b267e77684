package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// ErrConflict is an operation refused because of the object's state (a running flow
// cannot be deleted, …); the message says why and what to do.
var ErrConflict = errors.New("conflict")

// ConflictError names the object and the reason.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string   { return e.Msg }
func (e *ConflictError) Is(t error) bool { return t == ErrConflict }

// ---- cancel ----

// finalizeLua ends a flow whose nodes are all final: result map, status, retention.
// It expects dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor, retention_ms.
const finalizeLua = `
local function finalize(dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor, retention_ms)
  local failed = tonumber(redis.call('HGET', dag, 'failed') or '0')
  local fst = 'finished'
  if failed > 0 or redis.call('HGET', fk, 'cancelled_by') then fst = 'error' end
  local flat = redis.call('HGETALL', rk)
  local result = '{}'
  if #flat > 0 then
    local m = {}
    for j = 1, #flat, 2 do m[flat[j]] = flat[j + 1] end
    result = cjson.encode(m)
  end
  set_flow(flow, fst, 'result', result, 'finished_at', now_s, 'finished_at_ms', now_ms, 'updated_at', now_s)
  redis.call('DEL', rk)
  event('flow.' .. fst, actor, now_ms, flow, '0', caller, fst, redis.call('HGET', fk, 'error') or '')
  local keep = tonumber(redis.call('HGET', 'context:' .. ctx, 'retention_seconds') or '0') or 0
  if keep > 0 then retention_ms = keep * 1000 end
  redis.call('SELECT', 0)
  redis.call('SREM', 'coord:flows:active', ctx .. ':' .. flow)
  if tonumber(retention_ms) > 0 then
    redis.call('ZADD', 'coord:expire', tonumber(now_ms) + tonumber(retention_ms), ctx .. ':flow:' .. flow)
  end
  redis.call('PUBLISH', 'coord:flowdone', ctx .. ':' .. flow)
  redis.call('SELECT', tonumber(ctx))
  return fst
end
`

// cancelFlowScript: ARGV ctx, flow, actor, now_s, now_ms, reason, retention ms.
// Nodes that have not started are cancelled at once (their jobs never run); running
// ones get a stop request in their runner's control list. Returns {code, status,
// running job ids…}: 0 = the flow had ended already, 1 = cancelled.
var cancelFlowScript = newLibScript(finalizeLua + `
local ctx, flow, actor, now_s, now_ms, reason, retention_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local fk = 'flow:' .. flow
local st = redis.call('HGET', fk, 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if st == 'finished' or st == 'error' then return {0, st} end
local caller = redis.call('HGET', fk, 'caller_id') or '0'
redis.call('HSET', fk, 'cancelled_by', actor, 'error', reason, 'updated_at', now_s)
event('flow.cancelled', actor, now_ms, flow, '0', caller, st, reason)
local jobs = cjson.decode(redis.call('HGET', fk, 'jobs') or '[]')
if st == 'dispatched' then
  for _, id in ipairs(jobs) do
    id = tostring(id)
    if redis.call('EXISTS', 'job:' .. caller .. ':' .. id) == 1 then
      set_job(caller, id, 'error', 'error', reason, 'updated_at', now_s)
    end
  end
  set_flow(flow, 'error', 'finished_at', now_s, 'finished_at_ms', now_ms, 'updated_at', now_s)
  event('flow.error', actor, now_ms, flow, '0', caller, 'error', reason)
  local keep = tonumber(redis.call('HGET', 'context:' .. ctx, 'retention_seconds') or '0') or 0
  if keep > 0 then retention_ms = keep * 1000 end
  if tonumber(retention_ms) > 0 then
    redis.call('SELECT', 0)
    redis.call('ZADD', 'coord:expire', tonumber(now_ms) + tonumber(retention_ms), ctx .. ':flow:' .. flow)
  end
  return {1, 'error'}
end
local dag = 'coord:dag:' .. flow
local out = {1, 'started'}
local stops = {}
for _, id in ipairs(jobs) do
  id = tostring(id)
  local s = redis.call('HGET', dag, 's:' .. id)
  local jk = 'job:' .. caller .. ':' .. id
  if s == 'pending' or s == 'ready' or s == 'dispatched' then
    redis.call('HSET', dag, 's:' .. id, 'cancelled', 'e:' .. id, reason)
    redis.call('HDEL', dag, 'due:' .. id)
    redis.call('HINCRBY', dag, 'terminal', 1)
    set_job(caller, id, 'error', 'error', reason, 'stop_requested', '1', 'updated_at', now_s)
    event('job.cancelled', actor, now_ms, flow, id, caller, 'error', reason)
  elseif s == 'running' then
    redis.call('HSET', jk, 'stop_requested', '1')
    local w = redis.call('HGET', jk, 'worker')
    if w then stops[#stops + 1] = {w, ctx .. ':' .. caller .. ':' .. id} end
    out[#out + 1] = id
  end
end
if tonumber(redis.call('HGET', dag, 'terminal')) >= tonumber(redis.call('HGET', dag, 'total')) then
  out[2] = finalize(dag, fk, 'coord:flowres:' .. flow, flow, caller, ctx, now_s, now_ms, actor, retention_ms)
end
if #stops > 0 then
  redis.call('SELECT', 0)
  for _, s in ipairs(stops) do
    redis.call('LPUSH', 'coord:ctl:' .. s[1], s[2])
    redis.call('EXPIRE', 'coord:ctl:' .. s[1], 3600)
  end
end
return out
`)

// CancelFlow cancels a flow: jobs not started never start, running ones are stopped
// (their runners get a stop request at once), and the flow ends error with the
// reason. It returns the ids of the jobs being stopped. ended=true: the flow had
// ended already and nothing changed.
func (d *DB) CancelFlow(ctx context.Context, flowID uint32, actor string, retention time.Duration) (stopping []uint32, ended bool, err error) {
	now := time.Now()
	reason := "cancelled by actor " + actor
	if strings.HasPrefix(actor, ActorOperator) {
		reason = "cancelled by " + actor // "operator:<fingerprint>"
	}
	res, err := d.Eval(ctx, cancelFlowScript, nil, d.ContextID, flowID, actor, now.Unix(), now.UnixMilli(), reason, retention.Milliseconds())
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOTFOUND") {
			return nil, false, notFound("flow %d in context %d", flowID, d.ContextID)
		}
		return nil, false, fmt.Errorf("cancel flow %d: %w", flowID, err)
	}
	vals := res.([]any)
	if n, _ := vals[0].(int64); n == 0 {
		return nil, true, nil
	}
	return parseIDs(vals[2:]), false, nil
}

// ---- delete ----

// deleteJobLua removes a job and everything it owns. It expects caller, id.
const deleteJobLua = `
-- delete_messages removes the messages listed in the set key (and the set).
local function delete_messages(key)
  for _, mk in ipairs(redis.call('SMEMBERS', key)) do
    redis.call('UNLINK', mk)
    local mc, mi = string.match(mk, '^message:(%d+):(%d+)$')
    if mc then redis.call('ZREM', 'coord:idx:messages', mc .. ':' .. mi) end
    redis.call('LREM', 'msg_out', 0, mk)
    redis.call('LREM', 'msg_in', 0, mk)
  end
  redis.call('UNLINK', key)
end
local function delete_job(caller, id)
  local jk = 'job:' .. caller .. ':' .. id
  local st = redis.call('HGET', jk, 'status')
  local stype = redis.call('HGET', jk, 'script_type')
  local runner = redis.call('HGET', jk, 'runner_id')
  local m = caller .. ':' .. id
  delete_messages('coord:jobmsgs:' .. m)
  local fn = redis.call('HGET', jk, 'function_name')
  local exec = fn and string.match(fn, '^([^#]+)#')
  if exec then stype = 'exec:' .. exec end -- an executor's handler job: its queue
  if stype then
    redis.call('LREM', 'queue:' .. stype, 0, jk)
    if runner and runner ~= '0' then redis.call('LREM', 'coord:rq:' .. runner .. ':' .. stype, 0, jk) end
  end
  redis.call('UNLINK', jk, 'coord:log:' .. m)
  redis.call('ZREM', 'coord:idx:jobs', m)
  if st then redis.call('ZREM', 'coord:idx:jobs:' .. st, m) end
  redis.call('ZREM', 'coord:dlq', m)
end
`

// deleteJobScript: ARGV ctx, caller, id, force, actor, now_ms.
var deleteJobScript = newLibScript(deleteJobLua + `
local ctx, caller, id, force, actor, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5], ARGV[6]
local jk = 'job:' .. caller .. ':' .. id
local st = redis.call('HGET', jk, 'status')
if not st then return redis.error_reply('NOTFOUND job') end
local flow = redis.call('HGET', jk, 'flow_id')
if flow and flow ~= '0' and redis.call('EXISTS', 'flow:' .. flow) == 1 then
  return redis.error_reply('CONFLICT job ' .. id .. ' belongs to flow ' .. flow .. '; delete the flow (flow.delete) instead')
end
if st == 'started' and not force then
  return redis.error_reply('CONFLICT job ' .. id .. ' is running; stop it first (job.stop) or delete with force')
end
delete_job(caller, id)
event('job.deleted', actor, now_ms, '0', id, caller, st, '')
redis.call('SELECT', 0)
redis.call('ZREM', 'coord:expire', ctx .. ':job:' .. caller .. ':' .. id)
redis.call('ZREM', 'coord:due', 'retry:' .. ctx .. ':0:' .. caller .. ':' .. id)
return 1
`)

// DeleteJob removes a job that belongs to no flow, with its log and messages.
func (d *DB) DeleteJob(ctx context.Context, callerID, id uint32, force bool, actor string) error {
	_, err := d.Eval(ctx, deleteJobScript, nil, d.ContextID, callerID, id, boolArg(force), actor, time.Now().UnixMilli())
	return scriptErr(err, fmt.Sprintf("job %d of caller %d in context %d", id, callerID, d.ContextID))
}

// deleteFlowScript: ARGV ctx, flow, force, actor, now_ms. A started flow is refused
// (cancel it first); force deletes it anyway (retention of an ended flow uses it too).
var deleteFlowScript = newLibScript(deleteJobLua + `
local ctx, flow, force, actor, now_ms = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4], ARGV[5]
local fk = 'flow:' .. flow
local st = redis.call('HGET', fk, 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if st == 'started' and not force then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' is running; cancel it first (flow.cancel)')
end
local caller = redis.call('HGET', fk, 'caller_id') or '0'
local jobs = cjson.decode(redis.call('HGET', fk, 'jobs') or '[]')
for _, id in ipairs(jobs) do
  id = tostring(id)
  if redis.call('HGET', 'job:' .. caller .. ':' .. id, 'flow_id') == flow then delete_job(caller, id) end
end
delete_messages('coord:flowmsgs:' .. flow)
redis.call('UNLINK', fk, 'coord:dag:' .. flow, 'coord:flowres:' .. flow)
redis.call('ZREM', 'coord:idx:flows', flow)
redis.call('ZREM', 'coord:idx:flows:' .. st, flow)
event('flow.deleted', actor, now_ms, flow, '0', caller, st, '')
redis.call('SELECT', 0)
redis.call('SREM', 'coord:flows:active', ctx .. ':' .. flow)
redis.call('ZREM', 'coord:expire', ctx .. ':flow:' .. flow)
for _, id in ipairs(jobs) do
  redis.call('ZREM', 'coord:due', 'retry:' .. ctx .. ':' .. flow .. ':' .. caller .. ':' .. tostring(id))
end
return 1
`)

// DeleteFlow removes a flow with its jobs, their logs and messages, its DAG state and
// results. A running flow is refused unless force.
func (d *DB) DeleteFlow(ctx context.Context, flowID uint32, force bool, actor string) error {
	_, err := d.Eval(ctx, deleteFlowScript, nil, d.ContextID, flowID, boolArg(force), actor, time.Now().UnixMilli())
	return scriptErr(err, fmt.Sprintf("flow %d in context %d", flowID, d.ContextID))
}

// deleteRunnerScript: ARGV ctx, runner, force, actor, now_ms, script types (JSON list
// of every known type). The runner leaves the context's wakers sets (keys.Wakers) of
// every script type and of the executors it announced, and its wake lists lose the
// context's tokens (DB 0; the lists are shared with the server's other contexts).
var deleteRunnerScript = newLibScript(`
local ctx, id, force, actor, now_ms = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4], ARGV[5]
local rk = 'runner:' .. id
if redis.call('EXISTS', rk) == 0 then return redis.error_reply('NOTFOUND runner') end
local all = cjson.decode(ARGV[6])
if not force then
  for _, t in ipairs(all) do
    local n = redis.call('LLEN', 'coord:rq:' .. id .. ':' .. t)
    if n > 0 then
      return redis.error_reply('CONFLICT runner ' .. id .. ' has ' .. n .. ' job(s) pinned to it waiting in coord:rq:' .. id .. ':' .. t .. '; delete them or delete with force')
    end
  end
end
local have = redis.call('HGET', rk, 'script_types')
if have and have ~= '' then
  for _, t in ipairs(cjson.decode(have)) do
    if redis.call('HINCRBY', 'coord:script_types', t, -1) <= 0 then redis.call('HDEL', 'coord:script_types', t) end
  end
end
local queues = {}
for _, t in ipairs(all) do queues[#queues + 1] = 'queue:' .. t end
local ex = redis.call('HGET', rk, 'executors')
if ex and ex ~= '' then
  local ok, v = pcall(cjson.decode, ex)
  if ok and type(v) == 'table' then
    for _, e in ipairs(v) do queues[#queues + 1] = 'queue:exec:' .. e end
  end
end
for _, q in ipairs(queues) do redis.call('SREM', 'coord:wakers:' .. q, id) end
local dels = {rk, 'coord:runner:' .. id .. ':procs'}
for _, t in ipairs(all) do dels[#dels + 1] = 'coord:rq:' .. id .. ':' .. t end
redis.call('UNLINK', unpack(dels))
redis.call('ZREM', 'coord:idx:runners', id)
event('runner.deleted', actor, now_ms, '0', '0', '0', '', 'runner ' .. id)
redis.call('SELECT', 0)
for _, q in ipairs(queues) do
  redis.call('LREM', 'coord:wake:runner:' .. id .. ':' .. q, 0, ctx)
  if string.sub(q, 1, 6) == 'queue:' then
    redis.call('LREM', 'coord:wake:runner:' .. id .. ':coord:rq:' .. id .. ':' .. string.sub(q, 7), 0, ctx)
  end
end
redis.call('SREM', 'coord:runner:' .. id .. ':contexts', ctx)
redis.call('PUBLISH', 'coord:control', 'runner-deleted:' .. ctx .. ':' .. id)
return 1
`)

func allTypesJSON() string {
	var parts []string
	for _, t := range model.ScriptTypes() {
		parts = append(parts, strconv.Quote(string(t)))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// DeleteRunner removes a runner record, its process heartbeats and its pinned queues.
// Jobs waiting in its pinned queues refuse the delete unless force.
func (d *DB) DeleteRunner(ctx context.Context, runnerID uint32, force bool, actor string) error {
	_, err := d.Eval(ctx, deleteRunnerScript, nil, d.ContextID, runnerID, boolArg(force), actor, time.Now().UnixMilli(), allTypesJSON())
	return scriptErr(err, fmt.Sprintf("runner %d in context %d", runnerID, d.ContextID))
}

// DeleteContext removes a context: every key of its database, and its entries in DB 0
// (registry, active flows, due work, expiries, wake lists). A context with running
// flows is refused unless force.
func (s *Store) DeleteContext(ctx context.Context, ctxID uint32, force bool) error {
	db, err := s.Ctx(ctxID)
	if err != nil {
		return err
	}
	if _, err := s.LoadContext(ctx, ctxID); err != nil {
		return err
	}
	prefix := strconv.FormatUint(uint64(ctxID), 10) + ":"
	coord := s.Coord(ctxID) // its coordination entries; the registry is on the primary
	active, err := coord.SMembers(ctx, keys.ActiveFlows).Result()
	if err != nil {
		return err
	}
	var running []string
	for _, a := range active {
		if strings.HasPrefix(a, prefix) {
			running = append(running, a)
		}
	}
	if len(running) > 0 && !force {
		return &ConflictError{Msg: fmt.Sprintf("context %d has %d running flow(s); cancel them or delete with force", ctxID, len(running))}
	}
	// The context's tokens on its runners' wake lists go too: collect the runners before
	// the flush.
	var runners *redis.StringSliceCmd
	if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
		runners = p.ZRange(ctx, keys.RunnerIndex, 0, -1)
		return nil
	}); err != nil {
		return err
	}
	if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.FlushDBAsync(ctx)
		return nil
	}); err != nil {
		return fmt.Errorf("empty the database of context %d: %w", ctxID, err)
	}
	var wake []string // wake lists shared with the server's other contexts
	for _, r := range runners.Val() {
		if n, err := strconv.ParseUint(r, 10, 32); err == nil {
			for _, t := range model.ScriptTypes() {
				wake = append(wake, keys.WakeRunner(uint32(n), keys.Queue(string(t))), keys.WakeRunner(uint32(n), keys.PinnedQueue(uint32(n), string(t))))
			}
		}
	}
	due, _ := coord.ZRange(ctx, keys.Due, 0, -1).Result()
	exp, _ := coord.ZRange(ctx, keys.Expire, 0, -1).Result()
	rdue, _ := coord.ZRange(ctx, keys.RemoteDue, 0, -1).Result()
	_, err = coord.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, a := range running {
			p.SRem(ctx, keys.ActiveFlows, a)
		}
		for _, m := range due {
			if strings.HasPrefix(m, "retry:"+prefix) {
				p.ZRem(ctx, keys.Due, m)
			}
		}
		for _, m := range exp {
			if strings.HasPrefix(m, prefix) {
				p.ZRem(ctx, keys.Expire, m)
			}
		}
		for _, m := range rdue {
			if strings.HasPrefix(m, strconv.FormatUint(uint64(ctxID), 10)+"|") {
				p.ZRem(ctx, keys.RemoteDue, m)
			}
		}
		for _, w := range wake {
			p.LRem(ctx, w, 0, ctxID) // the context's tokens only
		}
		for _, r := range runners.Val() {
			if n, err := strconv.ParseUint(r, 10, 32); err == nil {
				p.SRem(ctx, keys.RunnerContexts(uint32(n)), ctxID)
			}
		}
		p.ZRem(ctx, keys.Busy, ctxID)
		return nil
	})
	if err != nil {
		return err
	}
	_, err = s.G().TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, keys.Contexts, strconv.FormatUint(uint64(ctxID), 10))
		p.Publish(ctx, keys.Control, "context-deleted:"+strconv.FormatUint(uint64(ctxID), 10))
		return nil
	})
	return err
}

// ---- retention ----

// Expired is an object whose retention ended.
type Expired struct {
	ContextID uint32
	Kind      string // "flow" or "job"
	FlowID    uint32
	CallerID  uint32
	JobID     uint32
	member    string
}

// PopExpired takes up to limit objects whose retention ended (they leave the
// coord:expire of their server).
func (s *Store) PopExpired(ctx context.Context, now time.Time, limit int) ([]Expired, error) {
	var e errs
	var out []Expired
	for _, m := range s.popDue(ctx, keys.Expire, now, limit, &e) {
		parts := strings.Split(m, ":")
		switch {
		case len(parts) == 3 && parts[1] == "flow":
			out = append(out, Expired{ContextID: parseU32(parts[0]), Kind: "flow", FlowID: parseU32(parts[2]), member: m})
		case len(parts) == 4 && parts[1] == "job":
			out = append(out, Expired{ContextID: parseU32(parts[0]), Kind: "job", CallerID: parseU32(parts[2]), JobID: parseU32(parts[3]), member: m})
		}
	}
	if len(out) == 0 && e.first != nil {
		return nil, fmt.Errorf("pop expired objects: %w", e.first)
	}
	return out, nil
}

// NextExpiry returns when the earliest retention ends (zero if none).
func (s *Store) NextExpiry(ctx context.Context) (time.Time, error) {
	return s.nextDue(ctx, keys.Expire)
}

// ExpireAt sets when retention deletes an object of a context (member as in
// coord:expire: "flow:<id>" or "job:<caller>:<id>"), in its server's DB 0.
func (s *Store) ExpireAt(ctx context.Context, ctxID uint32, member string, at time.Time) error {
	return s.Coord(ctxID).ZAdd(ctx, keys.Expire, redis.Z{Score: float64(at.UnixMilli()),
		Member: strconv.FormatUint(uint64(ctxID), 10) + ":" + member}).Err()
}

// trimEventsScript: KEYS events, flow index, job index; ARGV cutoff ms. Drops the
// events older than the cutoff, and never those of a flow or job still kept: the
// cutoff moves back to the creation of the oldest flow or job in the indexes (a
// shortened retention must not take the events of flows retained under the longer
// one). Returns the events dropped.
var trimEventsScript = NewScript(`
local cutoff = tonumber(ARGV[1])
for i = 2, 3 do
  local oldest = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if oldest[2] and tonumber(oldest[2]) < cutoff then cutoff = tonumber(oldest[2]) end
end
return redis.call('XTRIM', KEYS[1], 'MINID', string.format('%d', cutoff) .. '-0')
`)

// TrimEvents drops a context's events older than the cutoff, except those of the
// flows and jobs it still keeps (see trimEventsScript).
func (d *DB) TrimEvents(ctx context.Context, before time.Time) error {
	_, err := d.Eval(ctx, trimEventsScript, []string{keys.Events, keys.FlowIndex, keys.JobIndex}, before.UnixMilli())
	return err
}

// ---- helpers ----

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// scriptErr maps a script's NOTFOUND/CONFLICT replies onto the store's errors.
func scriptErr(err error, what string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "NOTFOUND"):
		return notFound("%s", what)
	case strings.HasPrefix(msg, "CONFLICT "):
		return &ConflictError{Msg: strings.TrimPrefix(msg, "CONFLICT ")}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// setJobStatusScript: ARGV caller, id, status, then field/value pairs.
var setJobStatusScript = newLibScript(`
local caller, id, st = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', 'job:' .. caller .. ':' .. id) == 0 then return 0 end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
set_job(caller, id, st, unpack(fields))
return 1
`)

// SetJobStatus changes a job's status (and other fields), keeping the status
// indexes right.
func (d *DB) SetJobStatus(ctx context.Context, callerID, id uint32, st model.JobStatus, fields ...any) error {
	args := append([]any{callerID, id, string(st)}, fields...)
	_, err := d.Eval(ctx, setJobStatusScript, nil, args...)
	return err
}
