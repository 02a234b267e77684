-- lib_ck: concurrency keys (a job's concurrency_key and concurrency_limit), for the
-- scripts that queue jobs (lib_route), drop them (claim_start) and end their runs
-- (finish_jobs). A key's jobs in flight (queued or running) are the members of
-- coord:ckrun:<key>; at most the job's limit of them are in flight, the others wait
-- on coord:ckheld:<key> ("<queue>\t<job key>", the newest at the head) and go to
-- their queue, oldest first, as runs of the key end. So a queue holds at most limit
-- jobs of each key, and the keys take turns on the runners (round-robin by key).
--
--   - ck_route(ck, limit, q, jk, now_ms): in the context's DB, for job jk going to
--     queue q: true when it may go there now (it joins the key's jobs in flight);
--     else it is held (its held field says why, a job.held event) and false. A full
--     set first drops the members that are no longer in flight (ended, gone).
--   - ck_end(ck, jk, now_ms): jk leaves the key's jobs in flight and, when it was one,
--     the key's oldest held job that still waits goes to its queue's consuming end
--     (its held field removed, a job.released event; held jobs that ended or went
--     meanwhile are dropped), noted for ck_wake.
--   - ck_wake(ctx): in the context's DB, after the script's last ck_end or ck_route:
--     the wake tokens of the released jobs (lib_wake; SELECT 0, then back to ctx).
-- Needs lib_wake (and its lib_busy).

local ck_woken, ck_order
-- ck_reset: the state of one call, set anew by each (lib/store Script).
local function ck_reset() ck_woken, ck_order = {}, {} end
local function ck_in_flight(st) return st == JOB_DISPATCHED or st == JOB_STARTED end
-- ck_release: the oldest held job of key ck that still waits goes to its queue's
-- consuming end and joins the jobs in flight; false when none waits.
local function ck_release(ck, now_ms)
  local hk = K_CK_HELD .. ck
  while true do
    local e = redis.call('RPOP', hk)
    if not e then return false end
    local q, jk = string.match(e, '^([^\t]*)\t(.*)$')
    if q then
      local v = redis.call('HMGET', jk, 'status', 'flow_id', 'id', 'caller_id')
      if v[1] == JOB_DISPATCHED then
        redis.call('HDEL', jk, 'held')
        redis.call('SADD', K_CK_RUN .. ck, jk)
        redis.call('RPUSH', q, jk)
        if not ck_woken[q] then ck_woken[q] = 0; ck_order[#ck_order + 1] = q end
        ck_woken[q] = ck_woken[q] + 1
        redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_JOB_RELEASED, 'actor', 'coordinator', 'time_ms', now_ms, 'flow_id', v[2] or '0', 'job_id', v[3] or '', 'caller_id', v[4] or '', 'status', JOB_DISPATCHED, 'detail', 'concurrency_key ' .. ck .. ': queued')
        return true
      end
    end
  end
end
local function ck_route(ck, limit, q, jk, now_ms)
  local rk, hk = K_CK_RUN .. ck, K_CK_HELD .. ck
  if redis.call('SISMEMBER', rk, jk) == 1 then return true end
  local n = redis.call('SCARD', rk)
  if n >= limit then
    for _, m in ipairs(redis.call('SMEMBERS', rk)) do
      if not ck_in_flight(redis.call('HGET', m, 'status')) then
        redis.call('SREM', rk, m)
        n = n - 1
      end
    end
  end
  if n < limit and redis.call('LLEN', hk) == 0 then
    redis.call('SADD', rk, jk)
    return true
  end
  local why = 'concurrency_key ' .. ck .. ' has its limit of ' .. limit .. ' in flight'
  redis.call('LPUSH', hk, q .. '\t' .. jk)
  redis.call('HSET', jk, 'held', why)
  local v = redis.call('HMGET', jk, 'flow_id', 'id', 'caller_id')
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_JOB_HELD, 'actor', 'coordinator', 'time_ms', now_ms, 'flow_id', v[1] or '0', 'job_id', v[2] or '', 'caller_id', v[3] or '', 'status', JOB_DISPATCHED, 'detail', why)
  -- slots the drop above freed go to the oldest held jobs
  while n < limit and ck_release(ck, now_ms) do n = n + 1 end
  return false
end
local function ck_end(ck, jk, now_ms)
  if redis.call('SREM', K_CK_RUN .. ck, jk) == 1 then ck_release(ck, now_ms) end
end
local function ck_wake(ctx)
  if #ck_order == 0 then return end
  local targets = {}
  for _, q in ipairs(ck_order) do targets[q] = wake_targets(q) end
  redis.call('SELECT', '0')
  for _, q in ipairs(ck_order) do wake_runners(ctx, q, targets[q], ck_woken[q]) end
  mark_busy(ctx)
  redis.call('SELECT', ctx)
  ck_woken, ck_order = {}, {}
end
