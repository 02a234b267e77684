-- lib_route: where a plain job goes on this node, and its push there, for the scripts
-- that route jobs themselves (claim_message for the router; dispatch and submit, which
-- route at once the jobs a local runner can take, so that no router wake-up stands
-- between a job's dispatch and its runner).
--
--   - route_queue(id, runner, stype, fn): the queue a job with these fields goes to: it
--     names no runner (runner_id missing or "0"), and some runner has its executor (a handler
--     job, fn "executor#handler": queue:exec:<executor>, coord:executors) or serves its
--     script type (queue:<type>, coord:script_types); nil: the router decides (a pinned
--     or remote job, or one nobody here can take: the router refuses it with the
--     reason). Reads coord:executors and coord:script_types once per call of the script,
--     and answers each function and script type once per call.
--   - route_target(jk): route_queue for the job at key jk (one HMGET of route_fields():
--     4 fields; 7 in a context whose jobs use priorities or concurrency keys,
--     coord:features, read once per call: a priority other than the default and a
--     concurrency key are noted for route_push). A caller that read these fields of
--     the job already, in its own HMGET, gives them with route_seen instead.
--   - route_fields(): the job fields route_target reads, in its order.
--   - route_seen(jk, v): the values of route_fields() of the job at key jk are v[2],
--     …, read by the caller (lib_dispatch's dispatch_job, lib_start's dispatch_ready,
--     after the job's creation time): the next route_target(jk) takes them instead of
--     a read. The first, the job's id, only says that the job exists: the caller reads
--     the job's status in its place (and route_fields() but the first). (A table of
--     the values and their offset a job was ~1k instructions.)
--   - route_priority(jk, p): notes job key jk's priority p (a string "1"…"5"; nil, ""
--     or "3": the default, noted as none) for route_push.
--   - route_concurrency(jk, ck, limit): notes job key jk's concurrency key ck (nil or
--     "": none) and limit (a string; none or 0: 1) for route_push.
--   - route_add(jk, q): records job key jk for queue q (pushed by route_push, in order).
--   - route_push(ctx): in the context's DB: LPUSHes the recorded jobs onto their queues
--     and reads their wake targets (lib_wake). A job with a priority other than the
--     default goes to the queue's priority set instead (coord:prio:<queue>, score in
--     µs: now + (priority − 3) × the context's priority_age_ms, default
--     PRIORITY_AGE_MS; the claim merges it with the queue, whose jobs score their
--     dispatched_at_ms, docs/scheduling.md). A job with a concurrency key whose
--     limit is in flight is held instead (lib_ck's ck_route). Returns the number of
--     queues.
--   - route_wake(ctx): in DB 0, after route_push: the runners' wake tokens and
--     coord:busy.
--   - route_flush(ctx): after the script's last write in the context's DB: route_push,
--     then, when it pushed any, route_wake in DB 0 (where it leaves the script).
--   - route_choose(jks): the queues (route_target) of the jobs at keys jks, in order,
--     when a runner of this node can take every one of them; else nil.
--   - route_store(caller, fields, now_ms, extra, jks, mo): stores a job request
--     message for the jobs at keys jks (lib_state's store_message) and sends it:
--     routed here when a runner of this node can take every one of them
--     (route_choose; the message stored acknowledged, as the router's claim would
--     leave it; the jobs recorded for route_push), else pushed on the list mo
--     (msg_out) for the router. Returns its key and 1 when pushed, 0 when routed.
-- Needs lib_state (store_message), lib_wake, lib_busy and lib_ck. route_types (the coord:script_types hash as read, or
-- nil) and route_routed ({job key, queue, …}, in order) are there for the caller.

local route_types, route_served
local route_routed, route_targets, route_pending, route_tokens, route_wakers
-- route_prio: job key → its priority when not the default; route_prios: how many
local route_prio, route_prios
-- route_ck: job key → {its concurrency key, its limit}; route_cks: how many
local route_ck, route_cks
-- route_ordered: whether the context's jobs use priorities or concurrency keys
-- (coord:features; nil: not read yet in this call)
local route_ordered
-- route_known: job key → the values read (route_seen), taken by route_target
local route_known
-- route_reset: the state of one call, set anew by each (lib/store Script).
local function route_reset()
  route_types, route_served = nil, {}
  route_routed, route_targets, route_pending, route_tokens, route_wakers = {}, {}, {}, {}, {}
  route_prio, route_prios = {}, 0
  route_ck, route_cks = {}, 0
  route_ordered, route_known = nil, {}
end
local function route_concurrency(jk, ck, limit)
  if ck and ck ~= '' then
    if not route_ck[jk] then route_cks = route_cks + 1 end
    route_ck[jk] = {ck, math.max(tonumber(limit or '') or 1, 1)}
  end
end
local function route_priority(jk, p)
  if p and p ~= '' and p ~= PRIORITY_DEFAULT then
    if not route_prio[jk] then route_prios = route_prios + 1 end
    route_prio[jk] = p
  end
end
local route_queue
do
-- fq: function name → script type → its queue, or false: none (route_queue's answers
-- in this call, whose jobs mostly share both; fq_of: the call's route_served, which
-- route_reset makes anew)
local fq, fq_of
local function queue_of(stype, fn)
  local exec = fn and string.match(fn, '^([^#]+)#') -- "#handler" names no executor: its script type's
  if exec then
    if route_served[exec] == nil then
      route_served[exec] = (tonumber(rcall('HGET', K_EXECUTORS, exec)) or 0) > 0 and (K_EXEC_QUEUE .. exec)
    end
    return route_served[exec] or nil
  end
  if (stype or '') == '' then return nil end
  if not route_types then route_types = rcall('HGETALL', K_SCRIPT_TYPES) end
  for i = 1, #route_types, 2 do
    if route_types[i] == stype and (tonumber(route_types[i + 1]) or 0) > 0 then return K_QUEUE .. stype end
  end
  return nil
end
route_queue = function(id, runner, stype, fn)
  if not id or (runner or '0') ~= '0' then return nil end
  if fq_of ~= route_served then fq, fq_of = {}, route_served end
  local f, t = fn or '', stype or ''
  local byt = fq[f]
  if not byt then
    byt = {}
    fq[f] = byt
  end
  local q = byt[t]
  if q == nil then
    q = queue_of(stype, fn) or false
    byt[t] = q
  end
  return q or nil
end
end
-- (the field lists in a block with route_fields, their only user: a local of the
-- library's main function is one more in every script's, and finish_jobs' is at Lua's
-- limit of 200)
local route_fields
do
local ROUTE_FIELDS = {'id', 'runner_id', 'script_type', 'function_name'}
local ROUTE_FIELDS_ORDERED = {'id', 'runner_id', 'script_type', 'function_name', 'priority', 'concurrency_key', 'concurrency_limit'}
route_fields = function()
  if route_ordered == nil then route_ordered = rcall('SCARD', K_FEATURES) > 0 end
  return route_ordered and ROUTE_FIELDS_ORDERED or ROUTE_FIELDS
end
end
local function route_seen(jk, v) route_known[jk] = v end
local function route_target(jk)
  local v, o = route_known[jk], 0
  if v then
    o = 1
    route_known[jk] = nil
  else
    v = rcall('HMGET', jk, unpack(route_fields()))
  end
  local q = route_queue(v[o + 1], v[o + 2], v[o + 3], v[o + 4])
  if q and route_ordered then
    route_priority(jk, v[o + 5])
    route_concurrency(jk, v[o + 6], v[o + 7])
  end
  return q
end
local function route_add(jk, q)
  if not route_tokens[q] then route_tokens[q] = 0; route_targets[#route_targets + 1] = q; route_pending[q] = {} end
  route_tokens[q] = route_tokens[q] + 1
  local p = route_pending[q]
  p[#p + 1] = jk
  route_routed[#route_routed + 1] = jk
  route_routed[#route_routed + 1] = q
end
-- route_split: the jobs of vs (of queue q) with a priority go to q's priority set,
-- scored in µs: now + (priority − 3) × age (ms) + their rank in the call (lower claims
-- first; a job's rank keeps the jobs of a priority in their order, as ZRANGE orders
-- equal scores by member); returns the others.
local function route_split(q, vs, age)
  local plain, scored = {}, {}
  local t = rcall('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  for k, jk in ipairs(vs) do
    local p = route_prio[jk]
    if p then
      scored[#scored + 1] = string.format('%d', now + (tonumber(p) - 3) * age * 1000 + k)
      scored[#scored + 1] = jk
    else
      plain[#plain + 1] = jk
    end
  end
  call_each('ZADD', K_PRIO .. q, scored, 2)
  return plain
end
-- route_limit: the jobs of vs (of queue q) that may go to q now (lib_ck's ck_route:
-- the others of a concurrency key at its limit are held).
local function route_limit(q, vs)
  local t = rcall('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local out = {}
  for _, jk in ipairs(vs) do
    local c = route_ck[jk]
    if not c or ck_route(c[1], c[2], q, jk, now_ms) then out[#out + 1] = jk end
  end
  return out
end
local function route_push(ctx)
  local age
  if route_prios > 0 then
    age = tonumber(rcall('HGET', K_CONTEXT .. ctx, 'priority_age_ms') or '') or PRIORITY_AGE_MS
  end
  -- in chunks: unpack fails beyond ~8,000 values, and one claim can route 64 groups
  -- of 256 jobs.
  for _, q in ipairs(route_targets) do
    local vs = route_pending[q]
    if route_cks > 0 then vs = route_limit(q, vs) end
    if age then vs = route_split(q, vs, age) end
    for i = 1, #vs, 1000 do rcall('LPUSH', q, unpack(vs, i, math.min(i + 999, #vs))) end
    route_wakers[q] = wake_targets(q)
  end
  if route_cks > 0 then ck_wake(ctx) end
  return #route_targets
end
local function route_wake(ctx)
  for _, q in ipairs(route_targets) do wake_runners(ctx, q, route_wakers[q], route_tokens[q]) end
  if #route_targets > 0 then mark_busy(ctx) end
end
local function route_flush(ctx)
  if route_push(ctx) > 0 then
    rcall('SELECT', '0')
    route_wake(ctx)
  end
end
local function route_choose(jks)
  local qs = {}
  for k, jk in ipairs(jks) do
    qs[k] = route_target(jk)
    if not qs[k] then return nil end
  end
  return qs
end
local function route_store(caller, fields, now_ms, extra, jks, mo)
  local qs = route_choose(jks)
  local mk = store_message(caller, fields, now_ms, extra, qs and MSG_ACKNOWLEDGED or nil)
  if not qs then
    rcall('LPUSH', mo, mk)
    return mk, 1
  end
  for k, jk in ipairs(jks) do route_add(jk, qs[k]) end
  return mk, 0
end
