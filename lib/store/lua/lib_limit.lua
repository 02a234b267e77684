-- lib_limit: run and rate limits (limit.set: coord:limits, docs/scheduling.md), for
-- the claim (claim_start) and the end of a run (finish_jobs). A claim from job queue
-- q of a context that has limits (coord:features holds "limit") counts against the
-- scope "context" and the queue's scope ("type:<script type>" for queue:<type>,
-- "executor:<name>" for queue:exec:<name>); a scope's limit is "<max running> <rate>
-- <per ms> <burst>" (0: none). Max running: the claims that run under the scope are
-- the members of coord:limrun:<scope> (their coord:leases members); a claim at the
-- limit first drops the members whose lease is gone or expired (a run whose runner
-- was killed gives its slot back when its lease ends). Rate: a token bucket per scope
-- (coord:limbucket:<scope>: tokens, at_ms), refilled at rate/per by Redis's clock up
-- to burst; each job started takes one token. A claim that may start none parks its
-- queue: its wake tokens go, and it enters coord:limpark, which the end of a run that
-- frees a slot and a change of the limits (lua/limit_set.lua) wake; waiting for a
-- token, it also enters coord:delayed as "<ctx>:limit:<queue>" at the time the next
-- token comes (a scheduler's due loop wakes it: lua/limit_wake.lua). The queue's
-- oldest job says why in its held field (a job.held event).
--
--   - lim_queue_scope(q): the scope of job queue q (nil: a pinned queue).
--   - lim_allow(q, want, now_ms): how many of want jobs a claim from q may start now
--     (reads the limits and the scopes' running sets and buckets; notes what the
--     starts join for lim_join and lim_flush). When none, lim_why says why, and
--     lim_retry (Redis time, ms) when the next token comes if a rate stopped it.
--   - lim_join(member): a job started under lease member member: it joins the running
--     sets of the scopes with a max.
--   - lim_flush(): after the claim's starts: the buckets pay one token per start.
--   - lim_park(ctx, q): after a claim that started nothing while q has jobs: q waits
--     in coord:limpark and, for a token, in coord:delayed (published on
--     coord:delayedwake); leaves the script in the context's DB.
--   - lim_mark(q, pk, now_ms): the oldest job of q (or of its priority set pk) says why it
--     waits (held; a job.held event when that changed).
--   - lim_end(member): the end of a run that started under limits (its lease member):
--     it leaves the running sets; when it held a slot, returns the parked queues (to
--     wake: lib_ck's ck_later, then ck_wake), else an empty table.
--
-- A rate per concurrency key (limit.set "key:<k>" with a rate; coord:features
-- "keyrate"): the claim reads the key of each job it would start from a shared queue.
-- A job of a key with a rate starts while the key's bucket (coord:limbucket:key:<k>)
-- has a token and no job of the key waits for one; else it is held on
-- coord:ckrate:<k> ("<queue>\t<job key>", the newest at the head; its held field
-- says why, a job.held event) and the key's release enters coord:delayed as
-- "<ctx>:keyrate:<k>" at the time of its next token. The release
-- (lua/key_rate_wake.lua, a scheduler's due loop) pays the tokens of the oldest held
-- jobs and queues them at their queue's consuming end with rate_paid set: their claim
-- takes no token again.
--
--   - lim_key_take(ck, jk, q, paid, now_ms): job jk of key ck, claimed from queue q
--     (paid: its rate_paid field is set): true when it may start (it takes a token,
--     or had it paid); else it is held as above, and false.
--   - lim_key_flush(ctx): after the claim's starts: the keys' buckets pay their
--     tokens, and the keys whose jobs were held are due for release (coord:delayed,
--     published on coord:delayedwake); leaves the script in the context's DB.
-- Needs nothing else.

local lim_runs, lim_buckets, lim_starts, lim_why, lim_retry
-- lim_keys: key → its rate's state in this call (false: no rate); lim_key_order: the
-- keys read, in order
local lim_keys, lim_key_order, lim_t
-- lim_reset: the state of one call, set anew by each (lib/store Script).
local function lim_reset()
  lim_runs, lim_buckets, lim_starts, lim_why, lim_retry = nil, nil, 0, nil, nil
  lim_keys, lim_key_order, lim_t = {}, {}, nil
end
-- lim_time: Redis's time (ms), read once per call.
local function lim_time()
  if not lim_t then
    local tt = rcall('TIME')
    lim_t = tonumber(tt[1]) * 1000 + math.floor(tonumber(tt[2]) / 1000)
  end
  return lim_t
end
-- lim_refill: the tokens of bucket bk (rate per per ms, up to burst) at Redis time t.
local function lim_refill(bk, rate, per, burst, t)
  local b = rcall('HMGET', bk, 'tokens', 'at_ms')
  local tokens, at = tonumber(b[1] or ''), tonumber(b[2] or '')
  if not tokens or not at then tokens, at = burst, t end
  if t > at then tokens = math.min(burst, tokens + (t - at) * rate / per) end
  return tokens
end
local function lim_queue_scope(q)
  if string.sub(q, 1, #K_EXEC_QUEUE) == K_EXEC_QUEUE then return 'executor:' .. string.sub(q, #K_EXEC_QUEUE + 1) end
  if string.sub(q, 1, #K_QUEUE) == K_QUEUE then return 'type:' .. string.sub(q, #K_QUEUE + 1) end
  return nil
end
-- lim_max: how many of n more runs scope's max mx allows (its running set purged of
-- the claims whose lease ended when it looks full).
local function lim_max(scope, mx, n, now_ms)
  local rk = K_LIM_RUN .. scope
  local c = rcall('SCARD', rk)
  if c + n > mx then
    for _, m in ipairs(rcall('SMEMBERS', rk)) do
      local e = tonumber(rcall('ZSCORE', K_LEASES, m) or '')
      if not e or e < now_ms then
        rcall('SREM', rk, m)
        c = c - 1
      end
    end
  end
  lim_runs[#lim_runs + 1] = rk
  if c + n <= mx then return n end
  if c >= mx then lim_why = 'limit ' .. scope .. ': ' .. mx .. ' running' end
  return math.max(mx - c, 0)
end
-- lim_rate: how many of n more starts scope's bucket allows now (Redis time t, ms).
local function lim_rate(scope, rate, per, burst, n, t)
  local bk = K_LIM_BUCKET .. scope
  local tokens = lim_refill(bk, rate, per, burst, t)
  lim_buckets[#lim_buckets + 1] = {bk, tokens, t}
  local whole = math.floor(tokens + 1e-9)
  if whole >= n then return n end
  if whole < 1 then
    lim_why = 'limit ' .. scope .. ': ' .. rate .. ' per ' .. per .. ' ms'
    local at1 = t + math.ceil((1 - tokens) * per / rate)
    if not lim_retry or at1 > lim_retry then lim_retry = at1 end
  end
  return math.max(whole, 0)
end
local function lim_allow(q, want, now_ms)
  local qs = lim_queue_scope(q)
  local scopes = {'context', qs}
  local v = rcall('HMGET', K_LIMITS, 'context', qs or 'context')
  local n, now = want, tonumber(now_ms)
  lim_runs, lim_buckets = {}, {}
  for i = 1, #scopes do
    local mx, rate, per, burst = string.match(v[i] or '', '^(%d+) (%d+) (%d+) (%d+)$')
    mx, rate, per, burst = tonumber(mx), tonumber(rate), tonumber(per), tonumber(burst)
    if mx and mx > 0 then n = lim_max(scopes[i], mx, n, now) end
    if rate and rate > 0 and per and per > 0 then
      n = lim_rate(scopes[i], rate, per, math.max(burst or 1, 1), n, lim_time())
    end
  end
  return n
end
local function lim_join(member)
  for _, rk in ipairs(lim_runs) do rcall('SADD', rk, member) end
  lim_starts = lim_starts + 1
end
local function lim_flush()
  if lim_starts == 0 then return end
  for _, b in ipairs(lim_buckets) do
    rcall('HSET', b[1], 'tokens', string.format('%.6f', b[2] - lim_starts), 'at_ms', string.format('%d', b[3]))
  end
end
local function lim_mark(q, pk, now_ms)
  local jk = rcall('LINDEX', q, -1)
  if not jk then jk = rcall('ZRANGE', pk, 0, 0)[1] end
  if not jk or not lim_why or not string.match(jk, '^' .. K_JOB .. '%d+:%d+$') then return end
  local v = rcall('HMGET', jk, 'held', 'flow_id', 'id', 'caller_id', 'status')
  if v[1] == lim_why or v[5] ~= JOB_DISPATCHED then return end
  rcall('HSET', jk, 'held', lim_why)
  rcall('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_JOB_HELD, 'actor', 'coordinator', 'flow_id', v[2] or '0', 'job_id', v[3] or '', 'caller_id', v[4] or '', 'status', JOB_DISPATCHED, 'detail', lim_why)
end
local function lim_park(ctx, q)
  rcall('SADD', K_LIM_PARK, q)
  if lim_retry then
    rcall('SELECT', '0')
    rcall('ZADD', K_DELAYED, 'LT', lim_retry, ctx .. ':limit:' .. q)
    rcall('PUBLISH', K_DELAYED_WAKE, lim_retry)
    rcall('SELECT', ctx)
  end
end
local function lim_end(member)
  local q = string.match(member, '^[^\t]*\t([^\t]*)\t')
  local freed = rcall('SREM', K_LIM_RUN .. 'context', member)
  local qs = q and lim_queue_scope(q)
  if qs then freed = freed + rcall('SREM', K_LIM_RUN .. qs, member) end
  if freed == 0 then return {} end
  local parked = rcall('SMEMBERS', K_LIM_PARK)
  if #parked > 0 then rcall('DEL', K_LIM_PARK) end
  return parked
end

local function lim_key_take(ck, jk, q, paid, now_ms)
  local k = lim_keys[ck]
  if k == nil then
    local _, rate, per, burst = string.match(rcall('HGET', K_LIMITS, 'key:' .. ck) or '', '^(%d+) (%d+) (%d+) (%d+)$')
    rate, per, burst = tonumber(rate), tonumber(per), math.max(tonumber(burst) or 1, 1)
    k = false
    if rate and rate > 0 and per and per > 0 then
      local t = lim_time()
      local bk = K_LIM_BUCKET .. 'key:' .. ck
      k = {bk = bk, tokens = lim_refill(bk, rate, per, burst, t), t = t, rate = rate, per = per,
           waiting = rcall('LLEN', K_CK_RATE .. ck), taken = 0}
      lim_key_order[#lim_key_order + 1] = ck
    end
    lim_keys[ck] = k
  end
  if not k or paid then return true end
  local left = k.tokens - k.taken
  if k.waiting == 0 and left >= 1 - 1e-9 then
    k.taken = k.taken + 1
    return true
  end
  -- held: it waits for a token behind the key's jobs held before it
  rcall('LPUSH', K_CK_RATE .. ck, q .. '\t' .. jk)
  k.waiting = k.waiting + 1
  local due = k.t
  if left < 1 then due = k.t + math.ceil((1 - left) * k.per / k.rate) end
  if not k.due or due < k.due then k.due = due end
  local why = 'limit key:' .. ck .. ': ' .. k.rate .. ' per ' .. k.per .. ' ms'
  local v = rcall('HMGET', jk, 'held', 'flow_id', 'id', 'caller_id')
  if v[1] ~= why then
    rcall('HSET', jk, 'held', why)
    rcall('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_JOB_HELD, 'actor', 'coordinator', 'flow_id', v[2] or '0', 'job_id', v[3] or '', 'caller_id', v[4] or '', 'status', JOB_DISPATCHED, 'detail', why)
  end
  return false
end
local function lim_key_flush(ctx)
  local due = {}
  for _, ck in ipairs(lim_key_order) do
    local k = lim_keys[ck]
    if k.taken > 0 then
      rcall('HSET', k.bk, 'tokens', string.format('%.6f', k.tokens - k.taken), 'at_ms', string.format('%d', k.t))
    end
    if k.due then due[#due + 1] = {ck, k.due} end
  end
  if #due == 0 then return end
  rcall('SELECT', '0')
  for _, d in ipairs(due) do
    rcall('ZADD', K_DELAYED, 'LT', d[2], ctx .. ':keyrate:' .. d[1])
    rcall('PUBLISH', K_DELAYED_WAKE, d[2])
  end
  rcall('SELECT', ctx)
end
