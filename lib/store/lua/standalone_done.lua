-- standaloneDoneScript: a standalone job's end. KEYS job, events; ARGV ctx, caller, id,
-- attempt, status, error, fatal, retries, backoff ms, now_s, now_ms, actor, retention ms.

local jk, ek = KEYS[1], KEYS[2]
local ctx, caller, id, attempt, status, err = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local fatal, retries, backoff, now_s, now_ms, actor = ARGV[7] == '1', tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10], ARGV[11], ARGV[12]
if retries < 0 then retries = tonumber(redis.call('HGET', jk, 'retries') or '0') or 0 end
if redis.call('HGET', jk, 'stop_requested') == '1' or redis.call('HGET', jk, 'fatal') == '1' then fatal = true end
local a = tonumber(redis.call('HGET', jk, 'attempt') or '0')
if a ~= attempt then return {0, '', 0} end
if redis.call('HGET', jk, 'done_attempt') == tostring(a) then return {0, '', 0} end
redis.call('HSET', jk, 'done_attempt', a)
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
  redis.call('ZADD', K_EXPIRE, tonumber(now_ms) + retention_ms, ctx .. ':job:' .. caller .. ':' .. id)
end
redis.call('PUBLISH', K_JOB_DONE, ctx .. ':' .. caller .. ':' .. id)
return {1, '', 0}
