-- standalone_done: applies the end of a standalone job (one of no flow): a retry is
-- scheduled while attempts are left; else a failed job goes to the DLQ, and the job's
-- retention starts and its waiters are told.
--
-- KEYS: [1] job:<caller>:<id>, [2] coord:events.
-- ARGV: [1] context id, [2] caller id, [3] job id, [4] attempt, [5] status, [6] error,
--   [7] fatal (1/0), [8] retries (-1: the job's own), [9] backoff (ms), [10] now (s),
--   [11] now (ms), [12] actor, [13] retention (ms; context:<ctx>.retention_seconds wins).
-- Reply: {code, "", retry due (ms)}: code 0 nothing changed (a stale or repeated end),
--   1 applied, 2 retry scheduled.
-- Derives: context DB: context:<ctx>, coord:dlq (dead_letter); DB 0 (SELECT 0): coord:due,
--   coord:expire, coord:jobdone (PUBLISH).

local jk, ek = KEYS[1], KEYS[2]
local ctx, caller, id, attempt, status, err = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local fatal, retries, backoff, now_s, now_ms, actor = ARGV[7] == '1', tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10], ARGV[11], ARGV[12]
-- What the end depends on, in one read of the job.
local cur = redis.call('HMGET', jk, 'retries', 'stop_requested', 'fatal', 'attempt', 'done_attempt')
if retries < 0 then retries = tonumber(cur[1] or '0') or 0 end
if cur[2] == '1' or cur[3] == '1' then fatal = true end
local a = tonumber(cur[4] or '0')
if a ~= attempt then return {0, '', 0} end
local as = int(a)
if cur[5] == as then return {0, '', 0} end
redis.call('HSET', jk, 'done_attempt', as)
if status ~= JOB_FINISHED and (not fatal) and a <= retries then
  local ra = tonumber(redis.call('HGET', jk, 'retry_after_ms') or '')
  if ra then backoff = ra; redis.call('HDEL', jk, 'retry_after_ms') end
  local due = tonumber(now_ms) + backoff
  redis.call('XADD', ek, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'type', EV_JOB_RETRIED, 'actor', actor, 'time_ms', now_ms, 'job_id', id, 'caller_id', caller, 'status', JOB_ERROR,
    'detail', 'attempt ' .. a .. ' failed: ' .. err .. '; attempt ' .. (a + 1) .. ' in ' .. backoff .. ' ms')
  redis.call('SELECT', 0)
  redis.call('ZADD', K_DUE, due, 'retry:' .. ctx .. ':0:' .. caller .. ':' .. id)
  return {2, '', due}
end
if status ~= JOB_FINISHED then dead_letter(caller, id, '0', now_ms, actor, err) end
local retention_ms = tonumber(ARGV[13]) or 0
local keep = tonumber(redis.call('HGET', K_CONTEXT .. ctx, 'retention_seconds') or '0') or 0
if keep > 0 then retention_ms = keep * 1000 end
redis.call('SELECT', 0)
if retention_ms > 0 then
  redis.call('ZADD', K_EXPIRE, int(tonumber(now_ms) + retention_ms), ctx .. ':job:' .. caller .. ':' .. id)
end
redis.call('PUBLISH', K_JOB_DONE, ctx .. ':' .. caller .. ':' .. id)
return {1, '', 0}
