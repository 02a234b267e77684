-- claim_start: claims up to max jobs from the consuming end of a job queue and marks
-- each started, in one round trip.
--
-- The claim id is written into the job: only this run may finish it (a job queued again
-- while a first run of it ends is run anew). The caller reads the started jobs' hashes
-- after it, with plain HGETALLs (moving a ~30-field hash through Lua and back cost this
-- script a third of its work), unless the call started only a few (INLINE_READS: the
-- reply holds their hashes; a read's round trip is worth more than its Redis work when
-- jobs start one or two at a time, and a claim only gets that small when its runner is
-- not busy). An item that is no job key, a job that is gone (code 1),
-- a job that already ended (code 2) and a job that runs under a claim that still holds
-- it (a duplicate queue entry: code 2) are taken off the queue and not put on the
-- processing list. A job started under a claim of this same worker that no longer
-- holds it (its lease expired and a sweep queued the job again, while the worker was
-- frozen or cut off from Redis) is not started again: its claim is taken back as it
-- was (code 4: onto the processing list, with a lease, the job unchanged), and the
-- caller checks that it still runs the job under that claim (else it releases the
-- claim: ReleaseClaims). A job that has a producer's traceparent keeps that trace. The
-- items are taken in one LRANGE and LTRIM, the started ones put on the processing list
-- and the lease set in one LPUSH and one ZADD, their status indexes and DAG nodes
-- moved once per call (an LMOVE, a lease, an index move and a node's read and write per
-- job were a third of this script's Redis calls).
--
-- Producers push up to WAKE_SPREAD tokens per push (lib_wake). After the claim the
-- context's tokens on the wake list are set anew: none when the queue is empty, else as
-- many as were left uncovered by the items claimed, at least one and at most
-- WAKE_SPREAD, at the list's tail: a context with jobs left always keeps a token, and
-- goes behind the other contexts waiting on the list (round-robin between the
-- contexts of a runner). A context of weight w (context:<ctx>'s weight, an operator's
-- setting; none: 1) makes w claims per round: while it has turns left in the round
-- (coord:turns, its claims this round per wake list) one of its tokens goes to the
-- head instead (docs/scheduling.md).
--
-- KEYS:
--   queue   the job queue
--   proc    the processing list (coord:proc:<worker>)
--   leases  coord:leases
--   events  coord:events
--   wake    the queue's wake list of the claiming runner id
--           (coord:wake:runner:<id>:<queue>, DB 0)
-- ARGV:
--   worker  string    the worker
--   qname   string    the queue's name
--   exp     int       the leases' expiry (ms)
--   now_ms  int       now (ms)
--   now_us  int       now (µs): the started jobs' started_at_us
--   now_s   int       now (s): their updated_at
--   max     num       the most jobs claimed (at most 255)
--   token   string    the wake token (the context id)
--   held    string    tokens held (0 or 1; "-": leave the tokens alone)
--   ctx     string    the context id
--   clears  view[]string  the fields a start clears
--   cnonce  string    the claim ids' stem: the k-th item's claim id is cnonce and k
--                     in two hex digits (ClaimStarts makes the same ids)
--   tnonce  string    the trace ids' stem, the same way ("": traces gives them; "=":
--                     each one its claim id's, derived when the job is read and not
--                     stored: lib/model TraceOfClaim)
--   traces  view[]string  the k-th item's trace id ("" or none given: none), when
--                     tnonce is ""
-- Libs: lib_busy lib_state lib_qpause lib_limit
-- Reply: raw one {item, code, attempt} per item claimed: code 0 started, 1 gone, 2 ended or
--   a duplicate, 3 started with a stop requested, 4 taken back under the job's claim
--   of this worker (its fourth element: that claim's id), 5 held back by its
--   concurrency key's rate (lib_limit: on coord:ckrate:<key>); when the call started at most
--   INLINE_READS jobs, each started one's entry also holds the job's hash as it is
--   after the start (HGETALL's field/value list): a claim of a few jobs, which is what
--   a lightly loaded runner makes, saves the caller's read round trip.
-- Derives (context DB): coord:features (what the context uses: none, and the claim
--   reads neither the priority set nor the limits), coord:limits, coord:limrun:<scope>,
--   coord:limbucket:<scope>, coord:limpark, coord:leases (lib_limit: a context with
--   limits), context:<ctx> (its weight, read when the claim sets the
--   tokens: ctx is the token), coord:turns (a weighted context's claims this round,
--   by wake list), coord:prio:<queue> (keys.Priority: the queue's jobs with a
--   priority, merged by score; read once per call), the claimed jobs' coord:dag:<flow> (its node goes running) and
--   coord:idx:jobs:<status>; coord:proc:<worker> of the job's previous worker (to tell
--   a duplicate entry): all named by the claimed items; coord:qpause (lib_qpause: a paused
--   queue's claim takes nothing and removes the context's tokens of the wake list); DB 0:
--   coord:delayed and coord:delayedwake (a queue parked until its rate limit's next
--   token, and a concurrency key's release at its rate's next token, lib_limit);
--   with a rate per concurrency key (coord:features "keyrate"): coord:ckrate:<key> and
--   coord:limbucket:key:<key> of the claimed jobs' keys.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local views = ARGV -- the view[] arguments' items, in place: views[<name>_at + k], k = 1 … <name>_n
local worker = ARGV[1]
local qname = ARGV[2]
local exp = ARGV[3]
local now_ms = ARGV[4]
local now_us = ARGV[5]
local now_s = ARGV[6]
local max = tonumber(ARGV[7])
local token = ARGV[8]
local held = ARGV[9]
local ctx = ARGV[10]
local clears_n = tonumber(ARGV[11])
local clears_at = 11
local argi = 12 + clears_n
local cnonce = ARGV[argi]
argi = argi + 1
local tnonce = ARGV[argi]
argi = argi + 1
local traces_n = tonumber(ARGV[argi])
local traces_at = argi
argi = argi + 1 + traces_n
-- luagen: end of the prologue

-- prio_merge takes up to max items of queue q and of its priority set pk (whose first
-- max members and scores are pz) by score (µs), the lowest first: a queued job's score
-- is its dispatched_at_ms × 1000, a prioritised one's its set's (lib_route: queued +
-- (priority − 3) × age).
-- It returns them as LRANGE would (the first claimed last), each taken off its list
-- or set.
local function prio_merge(q, pk, pz, max)
  local li = redis.call('LRANGE', q, -max, -1)
  local picked, ztaken = {}, {}
  local l, z, lt = #li, 1, nil
  while #picked < max and (l >= 1 or z <= #pz) do
    if l >= 1 and not lt then
      lt = 0
      if string.match(li[l], '^' .. K_JOB .. '%d+:%d+$') then
        lt = (tonumber(redis.call('HGET', li[l], 'dispatched_at_ms') or '') or 0) * 1000
      end
    end
    if z > #pz or (l >= 1 and lt <= tonumber(pz[z + 1])) then
      picked[#picked + 1] = li[l]
      l, lt = l - 1, nil
    else
      picked[#picked + 1] = pz[z]
      ztaken[#ztaken + 1] = pz[z]
      z = z + 2
    end
  end
  if l < #li then redis.call('LTRIM', q, 0, l - #li - 1) end
  if #ztaken > 0 then redis.call('ZREM', pk, unpack(ztaken)) end
  local items = {}
  for k = #picked, 1, -1 do items[#items + 1] = picked[k] end
  return items
end

local proc, leases, ek = KEYS[2], KEYS[3], KEYS[4]
-- The fields this script reads.
-- (a job's worker and claim are read only when it is started already: a fresh job has
-- neither, and each field a hash lacks is a scan of all of it)
-- (its id and caller are read from its key, job:<caller>:<id>: two strings less to
-- cross from Redis to Lua a job)
local want = {'status', 'attempt', 'flow_id', 'stop_requested', 'traceparent', 'created_at_ms'}
local out = {}
-- A claim that starts at most this many jobs returns their hashes.
local INLINE_READS = 4
-- The items claimed, from the consuming end (the queue's tail, oldest first), in one
-- read: each goes onto the processing list, with its lease, only when it starts (one
-- LPUSH and one ZADD for them all, in claim order, as an LMOVE each would leave them).
local items = {}
-- A paused queue (queue.pause) gives nothing; the context's tokens of the wake list go
-- (queue.resume sets them anew).
if queue_paused(KEYS[1]) then
  if held ~= '-' then
    redis.call('SELECT', '0')
    redis.call('LREM', KEYS[5], '0', token)
  end
  return {}
end
-- What the context uses (coord:features): nothing, unless a producer gave a job a
-- priority or a concurrency key or an admin set a limit; then the queue's jobs with a
-- priority (keys.Priority) and the limits (lib_limit: how many may start now).
local pk = K_PRIO .. KEYS[1]
local pz = {}
local limited = false
-- keyrate: a rate per concurrency key is set (lib_limit): the jobs' keys are read,
-- for a claim of a shared queue (a pinned job is not limited by its key)
local keyrate = false
if max >= 1 then
  local feats = redis.call('SMEMBERS', K_FEATURES)
  if #feats > 0 then pz = redis.call('ZRANGE', pk, 0, max - 1, 'WITHSCORES') end
  for _, f in ipairs(feats) do
    if f == 'limit' then limited = true elseif f == 'keyrate' then keyrate = lim_queue_scope(qname) ~= nil end
  end
  if keyrate then
    want[#want + 1] = 'concurrency_key'
    want[#want + 1] = 'rate_paid'
  end
  if limited then
    local n = lim_allow(qname, max, now_ms)
    if n < max then
      max = n
      if #pz > 2 * max then pz = {unpack(pz, 1, 2 * max)} end
    end
  end
end
if #pz > 0 and max >= 1 then
  items = prio_merge(KEYS[1], pk, pz, max)
elseif max >= 1 then
  items = redis.call('LRANGE', KEYS[1], -max, -1)
  if #items > 0 then redis.call('LTRIM', KEYS[1], 0, -#items - 1) end
end
local nitems = #items
local kept, leased, seen, started = {}, {}, {}, {}
-- the DAG nodes of the jobs that start, per flow: their state is read and set once
-- per flow (a flow's jobs are claimed together)
local nodes, flows = {}, {}
-- the events' cap, read at the first event of the call (EVENTS_CAP: a ZCARD), not at each
local ecap
for n = 1, nitems do
  local item = items[nitems - n + 1]
  local claim = cnonce .. string.format('%02x', n)
  local member = worker .. '\t' .. qname .. '\t' .. item .. '\t' .. claim
  local v = {}
  local caller, id = string.match(item, '^' .. K_JOB .. '(%d+):(%d+)$')
  if caller then v = redis.call('HMGET', item, unpack(want)) end
  local st = v[1]
  -- the worker and claim of a job started already (a duplicate entry, a retake)
  local prev, pclaim
  if st == JOB_STARTED then
    local wc = redis.call('HMGET', item, 'worker', 'claim')
    prev, pclaim = wc[1], wc[2]
  end
  -- A job started under a claim that still holds it (in its consumer's processing
  -- list: a lease's expiry takes it out of there first), or started earlier in this
  -- call (an item queued twice), is running: this queue entry is a duplicate, and
  -- starting it would run the job twice at once.
  if seen[item] then
    st = 'duplicate'
  elseif st == JOB_STARTED and prev then
    if redis.call('LPOS', K_PROCESSING .. prev, item) then
      st = 'duplicate'
    elseif prev == worker and pclaim and pclaim ~= '' then
      st = 'retake'
    end
  end
  if st == 'retake' then
    -- This worker's claim, swept while the worker lives on: taken back as it was.
    seen[item] = true
    kept[#kept + 1] = item
    leased[#leased + 1] = exp
    leased[#leased + 1] = worker .. '\t' .. qname .. '\t' .. item .. '\t' .. pclaim
    out[#out + 1] = {item, 4, tonumber(v[2] or '1') or 1, pclaim}
  elseif not st or st == JOB_FINISHED or st == JOB_ERROR or st == 'duplicate' then
    if st then out[#out + 1] = {item, 2, 0} else out[#out + 1] = {item, 1, 0} end
  elseif keyrate and (v[7] or '') ~= '' and not lim_key_take(v[7], item, KEYS[1], v[8] == '1', now_ms) then
    -- held back by its key's rate (lib_limit): off the queue, nothing to run
    out[#out + 1] = {item, 5, 0}
  else
    seen[item] = true
    kept[#kept + 1] = item
    leased[#leased + 1] = exp
    leased[#leased + 1] = member
    local attempt = v[2] or '1'
    local flow = v[3] or '0'
    local trace
    if v[5] and #v[5] == 55 then
      trace = string.sub(v[5], 4, 35) -- the producer's trace
    elseif tnonce == '=' then
      trace = '' -- its claim's (lib/model TraceOfClaim): issue 49, ~44 B of the job's listpack
    elseif tnonce ~= '' then
      trace = tnonce .. string.format('%02x', n)
    elseif n <= traces_n then
      trace = views[traces_at + n]
    else
      trace = ''
    end
    -- the fields every start sets, in one HSET with the claim (a Lua table built per
    -- job cost this script a twentieth of its instructions)
    if keyrate and v[8] then redis.call('HDEL', item, 'rate_paid') end
    if limited then
      -- under limits: counted until its end (finish_jobs reads limited), no longer held
      lim_join(member)
      redis.call('HSET', item, 'claim', claim, 'limited', 'true', 'status', JOB_STARTED, 'worker', worker, 'started_at_us', now_us, 'updated_at', now_s)
      redis.call('HDEL', item, 'held')
      if trace ~= '' then redis.call('HSET', item, 'trace_id', trace) end
    elseif trace ~= '' then
      redis.call('HSET', item, 'claim', claim, 'trace_id', trace, 'status', JOB_STARTED, 'worker', worker, 'started_at_us', now_us, 'updated_at', now_s)
    else
      redis.call('HSET', item, 'claim', claim, 'status', JOB_STARTED, 'worker', worker, 'started_at_us', now_us, 'updated_at', now_s)
    end
    index_later(caller .. ':' .. id, st, JOB_STARTED, v[6] or nil)
    -- An earlier run's end is removed at the start of any attempt but the first (or
    -- of a job without one): a job's first attempt has none (a new job; and whatever
    -- sets a job's attempt back removes them with it: start_flow, retry_flow,
    -- requeue_job), and a run ends only as its claim's (a requeued claim of the same
    -- attempt never wrote one). So neither this start nor the run's end reads them
    -- (each a scan of the hash).
    if clears_n > 0 and v[2] ~= '1' then redis.call('HDEL', item, unpack(views, clears_at + 1, clears_at + clears_n)) end
    if flow ~= '0' and flow ~= '' then
      local ns = nodes[flow]
      if not ns then ns = {}; nodes[flow] = ns; flows[#flows + 1] = flow end
      ns[#ns + 1] = 's:' .. id
    end
    local detail = 'attempt ' .. attempt .. ' on ' .. worker
    if st == JOB_STARTED and prev and prev ~= worker then detail = detail .. ' (taken over from ' .. prev .. ')' end
    ecap = ecap or EVENTS_CAP()
    redis.call('XADD', ek, 'MAXLEN', '~', ecap, '*', 'type', EV_JOB_STARTED, 'actor', 'runner', 'flow_id', flow, 'job_id', id, 'caller_id', caller, 'status', '', 'detail', detail) -- status: the type's (lib/store impliedStatus)
    local code = 0
    if v[4] == '1' then code = 3 end
    out[#out + 1] = {item, code, tonumber(attempt) or 1}
    started[#started + 1] = out[#out]
  end
end
call_each('LPUSH', proc, kept)
call_each('ZADD', leases, leased, 2)
if keyrate then lim_key_flush(ctx) end
-- A limit that let none start while jobs wait parks the queue (its tokens go below).
local parked = false
if limited then
  lim_flush()
  if max < 1 and (redis.call('LLEN', KEYS[1]) > 0 or redis.call('ZCARD', pk) > 0) then
    parked = true
    lim_mark(KEYS[1], pk, now_ms)
    lim_park(ctx, qname)
  end
end
-- A node dispatched goes running (one that is not, e.g. cancelled since, stays as it is).
for _, flow in ipairs(flows) do
  local dag, ns = K_DAG .. flow, nodes[flow]
  local cur = redis.call('HMGET', dag, unpack(ns))
  local running = {}
  for k, f in ipairs(ns) do
    if cur[k] == NODE_DISPATCHED then running[#running + 1] = f; running[#running + 1] = NODE_RUNNING end
  end
  if #running > 0 then redis.call('HSET', dag, unpack(running)) end
end
index_flush()
-- The few started jobs' hashes, read after every change of this start.
if #started <= INLINE_READS then
  for _, e in ipairs(started) do e[4] = redis.call('HGETALL', e[1]) end
end
if held ~= '-' then
  local left = redis.call('LLEN', KEYS[1])
  if #pz > 0 then left = left + redis.call('ZCARD', pk) end
  -- A context's weight (an operator's setting): its claims per round of the list.
  local w = tonumber(redis.call('HGET', K_CONTEXT .. token, 'weight') or '') or 1
  local again = false
  if parked then left = 0 end
  if w > 1 and left > 0 then
    -- the claims it made this round (coord:turns: wake list → claims): one token
    -- goes to the list's head while it has turns left
    if redis.call('HINCRBY', K_TURNS, KEYS[5], 1) < w then again = true else redis.call('HDEL', K_TURNS, KEYS[5]) end
  end
  redis.call('SELECT', '0')
  local have = redis.call('LREM', KEYS[5], '0', token)
  local keep = math.min(left, math.max(have + tonumber(held) - #out, 1), WAKE_SPREAD)
  if again then
    redis.call('LPUSH', KEYS[5], token)
    keep = keep - 1
  end
  if keep > 0 then
    local t = {}
    for i = 1, keep do t[i] = token end
    redis.call('RPUSH', KEYS[5], unpack(t))
  end
end
return out
