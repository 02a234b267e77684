-- lib_claim: defines claim_run, the claim and start of up to max jobs of a queue in
-- one step, as claim_start describes it (its reply is claim_start's), for claim_start
-- and for finish_jobs (a run's end that makes a dependent ready claims it for the
-- finishing runner: lua/finish_jobs.lua's take). Arguments: qk, proc, leases, ek and
-- wake are claim_start's KEYS; worker … traces its ARGV (clears and traces as lists).
-- Called in the context's DB; it
-- leaves the script in DB 0 when held is not "-". Needs lib_busy, lib_state,
-- lib_qpause and lib_limit.

-- prio_merge takes up to max items of queue q and of its priority set pk (whose first
-- max members and scores are pz) by score (µs), the lowest first: a queued job's score
-- is its dispatched_at_ms × 1000, a prioritised one's its set's (lib_route: queued +
-- (priority − 3) × age).
-- It returns them as LRANGE would (the first claimed last), each taken off its list
-- or set.
local function prio_merge(q, pk, pz, max)
  local li = rcall('LRANGE', q, -max, -1)
  local picked, ztaken = {}, {}
  local l, z, lt = #li, 1, nil
  while #picked < max and (l >= 1 or z <= #pz) do
    if l >= 1 and not lt then
      lt = 0
      if string.match(li[l], '^' .. K_JOB .. '%d+:%d+$') then
        lt = (tonumber(rcall('HGET', li[l], 'dispatched_at_ms') or '') or 0) * 1000
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
  if l < #li then rcall('LTRIM', q, 0, l - #li - 1) end
  if #ztaken > 0 then rcall('ZREM', pk, unpack(ztaken)) end
  local items = {}
  for k = #picked, 1, -1 do items[#items + 1] = picked[k] end
  return items
end

-- CLAIM_HEX[n]: n (1 … 255, a claim's item) in two hex digits, the stem's suffix of the
-- k-th item's claim and trace ids (a string.format a job was ~1k instructions; a
-- library's load has no string library to make them)
local CLAIM_HEX = {'01', '02', '03', '04', '05', '06', '07', '08', '09', '0a', '0b', '0c', '0d', '0e', '0f', '10', '11', '12', '13', '14', '15', '16', '17', '18', '19', '1a', '1b', '1c', '1d', '1e', '1f', '20', '21', '22', '23', '24', '25', '26', '27', '28', '29', '2a', '2b', '2c', '2d', '2e', '2f', '30', '31', '32', '33', '34', '35', '36', '37', '38', '39', '3a', '3b', '3c', '3d', '3e', '3f', '40', '41', '42', '43', '44', '45', '46', '47', '48', '49', '4a', '4b', '4c', '4d', '4e', '4f', '50', '51', '52', '53', '54', '55', '56', '57', '58', '59', '5a', '5b', '5c', '5d', '5e', '5f', '60', '61', '62', '63', '64', '65', '66', '67', '68', '69', '6a', '6b', '6c', '6d', '6e', '6f', '70', '71', '72', '73', '74', '75', '76', '77', '78', '79', '7a', '7b', '7c', '7d', '7e', '7f', '80', '81', '82', '83', '84', '85', '86', '87', '88', '89', '8a', '8b', '8c', '8d', '8e', '8f', '90', '91', '92', '93', '94', '95', '96', '97', '98', '99', '9a', '9b', '9c', '9d', '9e', '9f', 'a0', 'a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8', 'a9', 'aa', 'ab', 'ac', 'ad', 'ae', 'af', 'b0', 'b1', 'b2', 'b3', 'b4', 'b5', 'b6', 'b7', 'b8', 'b9', 'ba', 'bb', 'bc', 'bd', 'be', 'bf', 'c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9', 'ca', 'cb', 'cc', 'cd', 'ce', 'cf', 'd0', 'd1', 'd2', 'd3', 'd4', 'd5', 'd6', 'd7', 'd8', 'd9', 'da', 'db', 'dc', 'dd', 'de', 'df', 'e0', 'e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7', 'e8', 'e9', 'ea', 'eb', 'ec', 'ed', 'ee', 'ef', 'f0', 'f1', 'f2', 'f3', 'f4', 'f5', 'f6', 'f7', 'f8', 'f9', 'fa', 'fb', 'fc', 'fd', 'fe', 'ff'}

local function claim_run(qk, proc, leases, ek, wake, worker, qname, exp, now_ms, now_us, now_s, max, token, held, ctx,
    clears, cnonce, tnonce, traces)

  -- The fields this script reads.
  -- (a job's worker and claim are read only when it is started already: a fresh job has
  -- neither, and each field a hash lacks is a scan of all of it)
  -- (its id and caller are read from its key, job:<caller>:<id>: two strings less to
  -- cross from Redis to Lua a job)
  -- (function_name: whether a started job is a script, whose start's reads the reply holds)
  -- (spelled out again in the HMGET of a claim without keyrate, below: the same fields)
  local want = {'status', 'attempt', 'flow_id', 'stop_requested', 'traceparent', 'created_at_ms', 'function_name'}
  local out, nout = {}, 0
  -- A claim that starts at most this many jobs returns their hashes (each one's DUMP)
  -- and their starts' reads: its runner reads nothing after it. 32, the runner's
  -- slots in BenchmarkPeers: a heavy load's claims and takes (10-20 jobs) save their
  -- read's round trip too. Read after the call instead (up to 8 inline before), the
  -- dumps cost Redis a DUMP command each, about what passing them through Lua costs,
  -- and the runner a round trip: with 32, (a) and (b) ran ~5-8% faster with Redis's
  -- and the runner's CPU a job lower (docs/benchmarks.md, "The take").
  local INLINE_READS = 32
  -- The items claimed, from the consuming end (the queue's tail, oldest first), in one
  -- read: each goes onto the processing list, with its lease, only when it starts (one
  -- LPUSH and one ZADD for them all, in claim order, as an LMOVE each would leave them).
  local items = {}
  -- A paused queue (queue.pause) gives nothing; the context's tokens of the wake list go
  -- (queue.resume sets them anew).
  if queue_paused(qk) then
    if held ~= '-' then
      rcall('SELECT', '0')
      rcall('LREM', wake, '0', token)
    end
    return {}
  end
  -- What the context uses (coord:features): nothing, unless a producer gave a job a
  -- priority or a concurrency key or an admin set a limit; then the queue's jobs with a
  -- priority (keys.Priority) and the limits (lib_limit: how many may start now).
  local pk = K_PRIO .. qk
  local pz = {}
  local limited = false
  -- keyrate: a rate per concurrency key is set (lib_limit): the jobs' keys are read,
  -- for a claim of a shared queue (a pinned job is not limited by its key)
  local keyrate = false
  if max >= 1 then
    local feats = rcall('SMEMBERS', K_FEATURES)
    if #feats > 0 then pz = rcall('ZRANGE', pk, 0, max - 1, 'WITHSCORES') end
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
    items = prio_merge(qk, pk, pz, max)
  elseif max >= 1 then
    items = rcall('LRANGE', qk, -max, -1)
    if #items > 0 then rcall('LTRIM', qk, 0, -#items - 1) end
  end
  local nitems = #items
  local kept, leased, seen, started = {}, {}, {}, {}
  -- the started scripts (jobs without a function_name): their entry of out → their flow
  local scripts = {}
  -- the DAG nodes of the jobs that start, per flow: their state is read and set once
  -- per flow (a flow's jobs are claimed together)
  local nodes, flows = {}, {}
  -- a job held back by its key's rate (lib_limit's lim_key_take, which writes its
  -- event): after the events held before it (lib_state's ev_later)
  local function key_take(ck, item, paid)
    ev_flush()
    return lim_key_take(ck, item, qk, paid, now_ms)
  end
  local item_pat = '^' .. K_JOB .. '((%d+):(%d+))$' -- (its member <caller>:<id> too: no concatenation a job)
  local none = {} -- the fields read of an item that is no job key (none; never written)
  local detail1 -- a first attempt's start detail (made once)
  for n = 1, nitems do
    local item = items[nitems - n + 1]
    local claim = cnonce .. CLAIM_HEX[n]
    local member = worker .. '\t' .. qname .. '\t' .. item .. '\t' .. claim
    local v = none
    local im, caller, id = string.match(item, item_pat)
    if caller and keyrate then
      v = rcall('HMGET', item, unpack(want))
    elseif caller then
      -- (want's fields spelled out: an unpack a job was ~600 instructions)
      v = rcall('HMGET', item, 'status', 'attempt', 'flow_id', 'stop_requested', 'traceparent', 'created_at_ms', 'function_name')
    end
    local st = v[1]
    -- the worker and claim of a job started already (a duplicate entry, a retake)
    local prev, pclaim
    if st == JOB_STARTED then
      local wc = rcall('HMGET', item, 'worker', 'claim')
      prev, pclaim = wc[1], wc[2]
    end
    -- A job started under a claim that still holds it (in its consumer's processing
    -- list: a lease's expiry takes it out of there first), or started earlier in this
    -- call (an item queued twice), is running: this queue entry is a duplicate, and
    -- starting it would run the job twice at once.
    if seen[item] then
      st = 'duplicate'
    elseif st == JOB_STARTED and prev then
      if rcall('LPOS', K_PROCESSING .. prev, item) then
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
      out[nout + 1] = item
      out[nout + 2] = 4
      out[nout + 3] = tonumber(v[2] or '1') or 1
      out[nout + 4] = pclaim
      out[nout + 5] = false
      nout = nout + 5
    elseif not st or st == JOB_FINISHED or st == JOB_ERROR or st == 'duplicate' then
      out[nout + 1] = item
      out[nout + 2] = st and 2 or 1
      out[nout + 3] = 0
      out[nout + 4] = false
      out[nout + 5] = false
      nout = nout + 5
    elseif keyrate and (v[8] or '') ~= '' and not key_take(v[8], item, v[9] == '1') then
      -- held back by its key's rate (lib_limit): off the queue, nothing to run
      out[nout + 1] = item
      out[nout + 2] = 5
      out[nout + 3] = 0
      out[nout + 4] = false
      out[nout + 5] = false
      nout = nout + 5
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
        trace = tnonce .. CLAIM_HEX[n]
      elseif traces[n] then
        trace = traces[n]
      else
        trace = ''
      end
      -- the fields every start sets, in one HSET with the claim (a Lua table built per
      -- job cost this script a twentieth of its instructions)
      if keyrate and v[9] then rcall('HDEL', item, 'rate_paid') end
      if limited then
        -- under limits: counted until its end (finish_jobs reads limited), no longer held
        lim_join(member)
        rcall('HSET', item, 'claim', claim, 'limited', 'true', 'status', JOB_STARTED, 'worker', worker, 'started_at_us', now_us, 'updated_at', now_s)
        rcall('HDEL', item, 'held')
        if trace ~= '' then rcall('HSET', item, 'trace_id', trace) end
      elseif trace ~= '' then
        rcall('HSET', item, 'claim', claim, 'trace_id', trace, 'status', JOB_STARTED, 'worker', worker, 'started_at_us', now_us, 'updated_at', now_s)
      else
        rcall('HSET', item, 'claim', claim, 'status', JOB_STARTED, 'worker', worker, 'started_at_us', now_us, 'updated_at', now_s)
      end
      index_later(im, st, JOB_STARTED, v[6] or nil)
      -- An earlier run's end is removed at the start of any attempt but the first (or
      -- of a job without one): a job's first attempt has none (a new job; and whatever
      -- sets a job's attempt back removes them with it: start_flow, retry_flow,
      -- requeue_job), and a run ends only as its claim's (a requeued claim of the same
      -- attempt never wrote one). So neither this start nor the run's end reads them
      -- (each a scan of the hash).
      if #clears > 0 and v[2] ~= '1' then rcall('HDEL', item, unpack(clears)) end
      if flow ~= '0' and flow ~= '' then
        local ns = nodes[flow]
        if not ns then ns = {}; nodes[flow] = ns; flows[#flows + 1] = flow end
        ns[#ns + 1] = 's:' .. id
      end
      -- (a first attempt's detail made once a call: the same string for each)
      local detail
      if attempt == '1' then
        detail = detail1 or ('attempt 1 on ' .. worker)
        detail1 = detail
      else
        detail = 'attempt ' .. attempt .. ' on ' .. worker
      end
      if st == JOB_STARTED and prev and prev ~= worker then detail = detail .. ' (taken over from ' .. prev .. ')' end
      -- the call's job.started events in two stream entries (lib_state's ev_later,
      -- ev_flush below; the first caps the stream when it is the call's first event);
      -- no status: the type's (lib/store impliedStatus)
      ev_later(EV_JOB_STARTED, 'runner', flow, id, caller, detail)
      local code = 0
      if v[4] == '1' then code = 3 end
      -- (a first attempt's without a tonumber: a strtod in Redis's Lua, ~1.8k
      -- instructions)
      out[nout + 1] = item
      out[nout + 2] = code
      out[nout + 3] = attempt == '1' and 1 or tonumber(attempt) or 1
      out[nout + 4] = false
      out[nout + 5] = false
      nout = nout + 5
      started[#started + 1] = nout - 4
      if (v[7] or '') == '' then scripts[nout - 4] = flow end
    end
  end
  ev_flush()
  call_each('LPUSH', proc, kept)
  call_each('ZADD', leases, leased, 2)
  if keyrate then lim_key_flush(ctx) end
  -- A limit that let none start while jobs wait parks the queue (its tokens go below).
  local parked = false
  if limited then
    lim_flush()
    if max < 1 and (rcall('LLEN', qk) > 0 or rcall('ZCARD', pk) > 0) then
      parked = true
      lim_mark(qk, pk, now_ms)
      lim_park(ctx, qname)
    end
  end
  -- A node dispatched goes running (one that is not, e.g. cancelled since, stays as it is).
  for _, flow in ipairs(flows) do
    local dag, ns = K_DAG .. flow, nodes[flow]
    local cur = rcall('HMGET', dag, unpack(ns))
    local running = {}
    for k, f in ipairs(ns) do
      if cur[k] == NODE_DISPATCHED then running[#running + 1] = f; running[#running + 1] = NODE_RUNNING end
    end
    if #running > 0 then rcall('HSET', dag, unpack(running)) end
  end
  index_flush()
  -- The started jobs' hashes, read after every change of this start: each one's DUMP
  -- (one string to Lua and back, where HGETALL made a string of every field and value;
  -- lib/store HashFromDump reads it), so that the runner reads nothing after the claim.
  if #started <= INLINE_READS then
    local climits -- the context's job limits, read once
    for _, e in ipairs(started) do
      local jk = out[e]
      out[e + 3] = rcall('DUMP', jk)
      -- A script's (no function_name) start's reads too, else a round trip after the
      -- claim: {the context's job_defaults, job_max, the flow's env_vars, the direct
      -- dependencies' results in the order of its dependends} ("": none).
      local flow = scripts[e]
      if flow then
        local deps = rcall('HGET', jk, 'dependends') or ''
        climits = climits or rcall('HMGET', K_CONTEXT .. ctx, 'job_defaults', 'job_max')
        local r = {climits[1] or '', climits[2] or '', ''}
        if flow ~= '0' and flow ~= '' then r[3] = rcall('HGET', K_FLOW .. flow, 'env_vars') or '' end
        local jp = string.match(jk, '^(.*:)%d+$')
        for d in string.gmatch(deps, '%d+') do r[#r + 1] = rcall('HGET', jp .. d, 'result') or '' end
        out[e + 4] = r
      end
    end
  end
  if held ~= '-' then
    local left = rcall('LLEN', qk)
    if #pz > 0 then left = left + rcall('ZCARD', pk) end
    -- A context's weight (an operator's setting): its claims per round of the list.
    local w = tonumber(rcall('HGET', K_CONTEXT .. token, 'weight') or '') or 1
    local again = false
    if parked then left = 0 end
    if w > 1 and left > 0 then
      -- the claims it made this round (coord:turns: wake list → claims): one token
      -- goes to the list's head while it has turns left
      if rcall('HINCRBY', K_TURNS, wake, 1) < w then again = true else rcall('HDEL', K_TURNS, wake) end
    end
    rcall('SELECT', '0')
    local have = rcall('LREM', wake, '0', token)
    local keep = math.min(left, math.max(have + tonumber(held) - nout / 5, 1), WAKE_SPREAD)
    if again then
      rcall('LPUSH', wake, token)
      keep = keep - 1
    end
    if keep > 0 then
      local t = {}
      for i = 1, keep do t[i] = token end
      rcall('RPUSH', wake, unpack(t))
    end
  end
  return out
end
