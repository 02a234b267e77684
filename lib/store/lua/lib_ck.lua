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
--     set first drops the members that are no longer in flight (ended, gone). A limit
--     set for the key (limit.set "key:<ck>", coord:limits) replaces the job's own. At
--     the limit, the job's concurrency_policy decides: "queue" (none: the default)
--     holds it; "cancel_newest" ends it cancelled (false); "cancel_oldest" cancels
--     the key's oldest job in flight and takes its place (true): a queued one ends at
--     once, a running one is stopped (its runner kills it). A cancelled job's error
--     (and its job.cancelled event) names the key and the policy. A job of a flow is
--     never cancelled this way: it is held (its flow would have to fail with it).
--   - ck_end(ck, jk, now_ms): jk leaves the key's jobs in flight and, when it was one,
--     the key's oldest held job that still waits goes to its queue's consuming end
--     (its held field removed, a job.released event; held jobs that ended or went
--     meanwhile are dropped), noted for ck_wake.
--   - ck_later(q, n): notes n jobs for queue q's wake tokens (ck_wake): a queue that
--     others (lib_limit) wake.
--   - ck_wake(ctx): in the context's DB, after the script's last ck_end, ck_route or
--     ck_later: the wake tokens of the released jobs (lib_wake; SELECT 0, then back to
--     ctx).
-- Needs lib_wake (and its lib_busy) and lib_state (set_job).

local ck_woken, ck_order
-- ck_ended: the "<caller>:<id>" of the jobs a policy ended (retention, coord:jobdone,
-- written by ck_wake); ck_stops: {worker, "<caller>:<id>"} of the runs it stops;
-- ck_policies: whether the cancel policies apply in this call (a script whose caller
-- may not publish job ends, the router's claim_message, sets it false: there a job
-- at its key's limit is held whatever its policy)
local ck_ended, ck_stops, ck_now, ck_policies
-- ck_reset: the state of one call, set anew by each (lib/store Script).
local function ck_reset() ck_woken, ck_order, ck_ended, ck_stops, ck_policies = {}, {}, {}, {}, true end
local function ck_later(q, n)
  if not ck_woken[q] then ck_woken[q] = 0; ck_order[#ck_order + 1] = q end
  ck_woken[q] = ck_woken[q] + n
end
local function ck_in_flight(st) return st == JOB_DISPATCHED or st == JOB_STARTED end
-- ck_release: the oldest held job of key ck that still waits goes to its queue's
-- consuming end and joins the jobs in flight; false when none waits.
local function ck_release(ck, now_ms)
  local hk = K_CK_HELD .. ck
  while true do
    local e = rcall('RPOP', hk)
    if not e then return false end
    local q, jk = string.match(e, '^([^\t]*)\t(.*)$')
    if q then
      local v = rcall('HMGET', jk, 'status', 'flow_id', 'id', 'caller_id')
      if v[1] == JOB_DISPATCHED then
        rcall('HDEL', jk, 'held')
        rcall('SADD', K_CK_RUN .. ck, jk)
        rcall('RPUSH', q, jk)
        ck_later(q, 1)
        rcall('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_JOB_RELEASED, 'actor', 'coordinator', 'flow_id', v[2] or '0', 'job_id', v[3] or '', 'caller_id', v[4] or '', 'status', JOB_DISPATCHED, 'detail', 'concurrency_key ' .. ck .. ': queued')
        return true
      end
    end
  end
end
-- ck_cancel: job jk (of no flow, queued or running) is cancelled by the policy of key
-- ck at its limit; false when it cannot be (a flow's job, or one that is not in flight).
local function ck_cancel(jk, ck, limit, policy, now_ms)
  local v = rcall('HMGET', jk, 'status', 'flow_id', 'id', 'caller_id', 'worker')
  if (v[2] or '0') ~= '0' or not v[3] or not v[4] then return false end
  local why = 'cancelled: concurrency_key ' .. ck .. ' at its limit of ' .. limit .. ' (policy ' .. policy .. ')'
  local ref = v[4] .. ':' .. v[3]
  if v[1] == JOB_DISPATCHED then
    set_job(v[4], v[3], JOB_ERROR, 'error', why, 'stop_requested', '1', 'fatal', 'true', 'updated_at', string.format('%d', math.floor(now_ms / 1000)), 'finished_at_us', string.format('%d', now_ms * 1000))
    rcall('HDEL', jk, 'held')
    ck_ended[#ck_ended + 1] = ref
  elseif v[1] == JOB_STARTED and v[5] then
    rcall('HSET', jk, 'stop_requested', '1')
    ck_stops[#ck_stops + 1] = {v[5], ref}
  else
    return false
  end
  ck_now = now_ms
  rcall('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_JOB_CANCELLED, 'actor', 'coordinator', 'flow_id', '0', 'job_id', v[3], 'caller_id', v[4], 'status', v[1] == JOB_DISPATCHED and JOB_ERROR or JOB_STARTED, 'detail', why)
  return true
end
-- ck_oldest: the member of the key's set rk dispatched first (nil: none).
local function ck_oldest(rk)
  local best, at
  for _, m in ipairs(rcall('SMEMBERS', rk)) do
    local d = tonumber(rcall('HGET', m, 'dispatched_at_ms') or '') or 0
    if not at or d < at then best, at = m, d end
  end
  return best
end
local function ck_route(ck, limit, q, jk, now_ms)
  local rk, hk = K_CK_RUN .. ck, K_CK_HELD .. ck
  if rcall('SISMEMBER', rk, jk) == 1 then return true end
  -- a limit set for the key replaces the job's own
  local ls = rcall('HGET', K_LIMITS, 'key:' .. ck)
  local lmx = ls and tonumber(string.match(ls, '^(%d+) '))
  if lmx and lmx > 0 then limit = lmx end
  local n = rcall('SCARD', rk)
  if n >= limit then
    for _, m in ipairs(rcall('SMEMBERS', rk)) do
      if not ck_in_flight(rcall('HGET', m, 'status')) then
        rcall('SREM', rk, m)
        n = n - 1
      end
    end
  end
  if n < limit and rcall('LLEN', hk) == 0 then
    rcall('SADD', rk, jk)
    return true
  end
  if n >= limit and ck_policies then
    local policy = rcall('HGET', jk, 'concurrency_policy')
    if policy == 'cancel_newest' and ck_cancel(jk, ck, limit, policy, now_ms) then return false end
    if policy == 'cancel_oldest' then
      local old = ck_oldest(rk)
      if old and ck_cancel(old, ck, limit, policy, now_ms) then
        rcall('SREM', rk, old)
        rcall('SADD', rk, jk)
        return true
      end
    end
  end
  local why = 'concurrency_key ' .. ck .. ' has its limit of ' .. limit .. ' in flight'
  rcall('LPUSH', hk, q .. '\t' .. jk)
  rcall('HSET', jk, 'held', why)
  local v = rcall('HMGET', jk, 'flow_id', 'id', 'caller_id')
  rcall('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_JOB_HELD, 'actor', 'coordinator', 'flow_id', v[1] or '0', 'job_id', v[2] or '', 'caller_id', v[3] or '', 'status', JOB_DISPATCHED, 'detail', why)
  -- slots the drop above freed go to the oldest held jobs
  while n < limit and ck_release(ck, now_ms) do n = n + 1 end
  return false
end
local function ck_end(ck, jk, now_ms)
  if rcall('SREM', K_CK_RUN .. ck, jk) == 1 then ck_release(ck, now_ms) end
end
-- ck_ends: in DB 0, what the jobs that policies ended or stopped need there: the
-- retention of the ended ones and their waiters' notice (coord:jobdone), the stop
-- requests of the running ones (their workers' stop lists). keep: the context's
-- retention (ms; 0: the scheduler's).
local function ck_ends(ctx, keep)
  if #ck_ended > 0 then
    if keep <= 0 then keep = tonumber(rcall('HGET', K_SCHEDULER, 'retention_ms') or '0') or 0 end
    local done = {}
    for k, ref in ipairs(ck_ended) do
      done[k] = ctx .. ':' .. ref
      if keep > 0 then rcall('ZADD', K_EXPIRE, string.format('%d', ck_now + keep), ctx .. ':job:' .. ref) end
    end
    rcall('PUBLISH', K_JOB_DONE, table.concat(done, ' '))
  end
  for _, s in ipairs(ck_stops) do
    rcall('LPUSH', K_STOP_LIST .. s[1], ctx .. ':' .. s[2])
    rcall('EXPIRE', K_STOP_LIST .. s[1], 3600)
  end
end
local function ck_wake(ctx)
  if #ck_order == 0 and #ck_ended == 0 and #ck_stops == 0 then return end
  local targets = {}
  for _, q in ipairs(ck_order) do targets[q] = wake_targets(q) end
  local keep = 0
  if #ck_ended > 0 then keep = (tonumber(rcall('HGET', K_CONTEXT .. ctx, 'retention_seconds') or '0') or 0) * 1000 end
  rcall('SELECT', '0')
  for _, q in ipairs(ck_order) do wake_runners(ctx, q, targets[q], ck_woken[q]) end
  if #ck_order > 0 then mark_busy(ctx) end
  ck_ends(ctx, keep)
  rcall('SELECT', ctx)
  ck_woken, ck_order, ck_ended, ck_stops = {}, {}, {}, {}
end
