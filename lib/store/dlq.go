package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
)

// The dead-letter queue of a context is the zset coord:dlq: "<caller>:<id>" → when the
// job failed for good (ms). The job hash keeps everything else: its last error, its
// attempt count, and dlq_at_ms. Retention deletes the entries with the jobs.

// DLQPage lists DLQ entries newest first (members "<caller>:<id>").
func (d *DB) DLQPage(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	return d.Page(ctx, keys.DLQ, cursor, limit)
}

// DLQHas reports whether a job is in the DLQ.
func (d *DB) DLQHas(ctx context.Context, callerID, id uint32) (bool, error) {
	var cmd *redis.FloatCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.ZScore(ctx, keys.DLQ, fmt.Sprintf("%d:%d", callerID, id))
		return nil
	}); err != nil {
		return false, err
	}
	return cmd.Err() == nil, nil
}

// DLQPurge removes entries: the given members, or all of them. The jobs stay (until
// their retention).
func (d *DB) DLQPurge(ctx context.Context, members []string, actor string) (int64, error) {
	var n *redis.IntCmd
	_, err := d.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if len(members) == 0 {
			n = p.ZCard(ctx, keys.DLQ)
			p.Unlink(ctx, keys.DLQ)
		} else {
			args := make([]any, len(members))
			for i, m := range members {
				args[i] = m
			}
			n = p.ZRem(ctx, keys.DLQ, args...)
		}
		AddEvent(ctx, p, &Event{Type: "dlq.purged", Actor: actor, Detail: strings.Join(members, ",")})
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n.Val(), nil
}

// requeueJobScript: ARGV ctx, caller, id, actor, now_s, now_ms. Resets a standalone
// job for a fresh run (attempts from 1) and takes it out of the DLQ.
var requeueJobScript = newLibScript(`
local ctx, caller, id, actor, now_s, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local jk = 'job:' .. caller .. ':' .. id
local st = redis.call('HGET', jk, 'status')
if not st then return redis.error_reply('NOTFOUND job') end
if st == 'started' or st == 'dispatched' then
  return redis.error_reply('CONFLICT job ' .. id .. ' is ' .. st .. ', not ended')
end
set_job(caller, id, 'dispatched', 'updated_at', now_s, 'result', '{}')
redis.call('HDEL', jk, 'result_json', 'attempt', 'done_attempt', 'error', 'exit_code', 'fatal', 'stop_requested', 'dlq_at_ms', 'retry_after_ms',
  'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms')
redis.call('ZREM', 'coord:dlq', caller .. ':' .. id)
event('job.requeued', actor, now_ms, '0', id, caller, 'dispatched', 'from the dead-letter queue')
redis.call('SELECT', 0)
redis.call('ZREM', 'coord:expire', ctx .. ':job:' .. caller .. ':' .. id)
return 1
`)

// ResetJob readies an ended standalone job to run again with a fresh attempt count.
func (d *DB) ResetJob(ctx context.Context, callerID, id uint32, actor string) error {
	now := time.Now()
	_, err := d.Eval(ctx, requeueJobScript, nil, d.ContextID, callerID, id, actor, now.Unix(), now.UnixMilli())
	return scriptErr(err, fmt.Sprintf("job %d of caller %d in context %d", id, callerID, d.ContextID))
}

// retryFlowScript: ARGV ctx, flow, actor, now_s, now_ms. Re-runs a failed flow's
// failed and cancelled nodes (fresh attempts), keeping the completed ones and their
// results. Returns {1, ready ids…}.
var retryFlowScript = newLibScript(`
local ctx, flow, actor, now_s, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local fk, dag, rk = 'flow:' .. flow, 'coord:dag:' .. flow, 'coord:flowres:' .. flow
local st = redis.call('HGET', fk, 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if st ~= 'error' then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' is ' .. st .. '; only a failed flow can be retried')
end
if redis.call('EXISTS', dag) == 0 then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' never started; start it (flow.start)')
end
local caller = redis.call('HGET', fk, 'caller_id') or '0'
local res = redis.call('HGET', fk, 'result')
if res and res ~= '' and res ~= '{}' then
  local ok, m = pcall(cjson.decode, res)
  if ok and type(m) == 'table' then
    for k, v in pairs(m) do redis.call('HSET', rk, k, v) end
  end
end
local jobs = cjson.decode(redis.call('HGET', fk, 'jobs') or '[]')
local rerun = {}
for _, id in ipairs(jobs) do
  id = tostring(id)
  local s = redis.call('HGET', dag, 's:' .. id)
  if s == 'failed' or s == 'cancelled' then rerun[id] = true end
end
local out = {1}
local terminal = 0
for _, id in ipairs(jobs) do
  id = tostring(id)
  if rerun[id] then
    local remaining = 0
    for _, d in ipairs(cjson.decode(redis.call('HGET', dag, 'p:' .. id) or '[]')) do
      if redis.call('HGET', dag, 's:' .. tostring(d)) ~= 'completed' then remaining = remaining + 1 end
    end
    local jk = 'job:' .. caller .. ':' .. id
    redis.call('HDEL', dag, 'e:' .. id, 'due:' .. id)
    redis.call('HDEL', jk, 'result_json', 'error', 'exit_code', 'fatal', 'stop_requested', 'dlq_at_ms', 'retry_after_ms', 'attempt',
      'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms', 'dispatched_at_ms')
    redis.call('ZREM', 'coord:dlq', caller .. ':' .. id)
    if remaining == 0 then
      redis.call('HSET', dag, 's:' .. id, 'ready', 'r:' .. id, 0, 'a:' .. id, 0)
      set_job(caller, id, 'dispatched', 'updated_at', now_s, 'ready_at_ms', now_ms, 'result', '{}')
      out[#out + 1] = id
    else
      redis.call('HSET', dag, 's:' .. id, 'pending', 'r:' .. id, remaining, 'a:' .. id, 0)
      set_job(caller, id, 'waiting_for_prerequisites', 'updated_at', now_s, 'result', '{}')
    end
  else
    terminal = terminal + 1
  end
end
redis.call('HSET', dag, 'terminal', terminal, 'failed', 0)
set_flow(flow, 'started', 'updated_at', now_s)
redis.call('HDEL', fk, 'error', 'failed_job', 'cancelled_by', 'finished_at', 'finished_at_ms', 'result')
event('flow.retried', actor, now_ms, flow, '0', caller, 'started', (#out - 1) .. ' job(s) ready to run again')
redis.call('SELECT', 0)
redis.call('SADD', 'coord:flows:active', ctx .. ':' .. flow)
redis.call('ZREM', 'coord:expire', ctx .. ':flow:' .. flow)
return out
`)

// RetryFlow re-runs a failed flow's failed and cancelled jobs; it returns the ids of
// the nodes ready to dispatch.
func (d *DB) RetryFlow(ctx context.Context, flowID uint32, actor string) ([]uint32, error) {
	now := time.Now()
	res, err := d.Eval(ctx, retryFlowScript, nil, d.ContextID, flowID, actor, now.Unix(), now.UnixMilli())
	if err != nil {
		return nil, scriptErr(err, fmt.Sprintf("flow %d in context %d", flowID, d.ContextID))
	}
	vals := res.([]any)
	return parseIDs(vals[1:]), nil
}
