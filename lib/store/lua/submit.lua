-- submit: job.submit and job.submit_batch. Creates standalone jobs and dispatches
-- them in one step (the job hash, its indexes, job.created and job.dispatched events,
-- the job request message, and then either the job on its queue with the runners' wake
-- tokens when a runner of this node can take it (lib_route: the message acknowledged,
-- as the router's claim would) or the message on msg_out with the router's wake
-- token), so that a submitted job is never stored without being dispatched, whatever
-- process dies when. The jobs
-- of one call may come from several callers (supervisor-daemon groups concurrent
-- submissions into one call): each job carries its actor, and the jobs are taken in
-- order, each seeing what the ones before it wrote (a uniqueness key, a chosen id).
-- Runs after the prelude, lib_state (message_id, store_message, wake_msg_out,
-- int), lib_wake and lib_route (route_queue, route_priority, route_add, route_flush).
--
-- KEYS:
--   ...jobs  per job i (1-based), KEYS[2i-1] the job's key (job:<caller>:<id>) when
--            its caller chose its id (job:<caller>:0, unused, when the script reserves one) and KEYS[2i]
--            its uniqueness key (keys.Unique, coord:unique:<unique_key>; "" for none)
-- ARGV:
--   ctx           int       the context id
--   now_s         int       now (s)
--   now_ms        int       now (ms)
--   guard_fields  view[]string  field names of the context hash (the guard: nothing
--                           is written unless the context holds guard_values in them
--                           still; a missing field reads "")
--   guard_values  view[]string  the values an authorization read from them
--   msg           []raw     field/value items of the job request message every job
--                           of the call gets (all but id, caller_id, message and
--                           job, which are written per job; status first); a job
--                           routed here gets its message short instead (one field,
--                           req "<now_ms> <id>", acknowledged: lib/store expandShort)
--   jobs          []job     the jobs, in order
--     chosen  bool    the caller chose the id (else the script reserves one from
--                     coord:seq:job:<caller>)
--     caller  int     the caller id
--     id      int     the job id (0 when reserved)
--     ttl     int     its uniqueness key's ttl (ms)
--     actor   string  who submits it (its events' actor)
--     run_at  int     when it runs (ms; 0: dispatch now; else the job is stored
--                     scheduled, with no message, and entered in coord:delayed for
--                     the scheduler to dispatch then)
--     ncmp    int     how many of its field/value pairs (the first) are compared
--                     against an existing job of a chosen id (a string, made a number
--                     only for a chosen id: a tonumber is a strtod in Redis's Lua)
--     fields  view[]raw  its field/value items, read in place (a table of them per
--                     job cost ~2% of a submission); the script writes the rest of
--                     a new job's fields itself (its id, its dispatched status,
--                     attempt 1 and its times: updated_at now_s, created_at_ms
--                     now_ms; no created_at, which a read derives from
--                     created_at_ms). A job whose id the script reserves is sent
--                     without the fields at their defaults (lib/store
--                     newJobFields): caller_id and context_id, which the script
--                     writes (caller, ctx), and the seed's fields at their default
--                     (script '', script_type '', timeout '0', retries '0',
--                     env_vars and result '{}', prerequisites and dependends '[]'),
--                     which it leaves out, as job.create does (lib/store
--                     jobDefaults: a read gives an absent one its default, and a
--                     chosen id's comparison reads it so); a job's own items (all
--                     of them, for a chosen id) follow in the same HSET, so that
--                     they win. In a call of several new jobs, the fields they
--                     share (state, times, context) are a COPY of the scratch hash
--                     coord:jobtmpl, and the id, msgs, caller_id and own items
--                     follow in one HSET
-- Libs: lib_busy lib_state lib_wake lib_ck lib_route
-- Reply: outcome nothing is written unless status is 'ok' (but for 'exhausted')
--   status  string  'ok'; 'changed' (the context's guarded fields differ: authorize
--                   again); 'unserved' (the job names no runner, and no runner here
--                   has its executor or serves its script type); 'conflict' (a
--                   chosen id names a job with different content, or a job before
--                   it in the call chose the same id with different content);
--                   'exhausted' (the caller's ids are used up: comes after its
--                   counter moved)
--   index   int     the refused job's index (1-based; unserved, conflict; else 0)
--   detail  string  the conflict's field, or the caller whose ids are used up
--   members string   with 'ok', per job in order the job created or found,
--                        "<caller>:<id>", joined by single spaces ('' else): one
--                        string, not one a job (a table per job in the reply was ~2k
--                        instructions a job, Redis looking each one up for the
--                        fields of a status or an error before its items; a string
--                        per job two allocations a job in supervisor-daemon, reading
--                        the reply)
--   ...found []found  with 'ok', the jobs not created (else none), after members:
--     index    int       the job's index (1-based), whose uniqueness key or chosen id
--                        (by a job before it in the call, too) names a job that exists
--     ...hash  []string  the existing job's hash as field/value items
-- Derives: coord:msgtmpl (lib_state's message_share: the request messages' shared
--   fields, a scratch hash written and deleted in the call), coord:jobtmpl (the same
--   for the new jobs' shared fields),
--   context:<ctx> (the guard), coord:seq:job:<caller> and job:<caller>:<id> of
--   the reserved ids, job:<caller>:<id> of the job a uniqueness
--   key names (its value is "<caller>:<id>"), and lib_state's fixed keys (coord:events,
--   coord:idx:jobs[:status], coord:seq:message, message:<caller>:<n>,
--   the job's msgs, msg_out), lib_route's (coord:executors,
--   coord:script_types, queue:<type>, queue:exec:<executor>, coord:prio:<queue>,
--   lib_ck's coord:ckrun:<key> and coord:ckheld:<key> and the held jobs' hashes,
--   coord:wakers:<queue>); DB
--   0: coord:wake:msg_out, the runners' wake lists coord:wake:runner:<id>:<queue>,
--   coord:busy, coord:delayed and coord:delayedwake (PUBLISH: the earliest run_at of
--   the call's scheduled jobs).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local views = ARGV -- the view[] arguments' items, in place: views[<name>_at + k], k = 1 … <name>_n
local ctx = ARGV[1]
local now_s = ARGV[2]
local now_ms = ARGV[3]
local guard_fields_n = tonumber(ARGV[4])
local guard_fields_at = 4
local argi = 5 + guard_fields_n
local guard_values_n = tonumber(ARGV[argi])
local guard_values_at = argi
argi = argi + 1 + guard_values_n
local msg
local n_msg = tonumber(ARGV[argi])
if n_msg <= 7000 then msg = {unpack(ARGV, argi + 1, argi + n_msg)} else msg = {}; for k = 1, n_msg do msg[k] = ARGV[argi + k] end end
argi = argi + 1 + n_msg
local jobs
local n_jobs = tonumber(ARGV[argi])
jobs = {}
argi = argi + 1
for k = 1, n_jobs do
  local e_jobs = {chosen = ARGV[argi] == '1', caller = ARGV[argi + 1], id = ARGV[argi + 2], ttl = ARGV[argi + 3], actor = ARGV[argi + 4], run_at = ARGV[argi + 5], ncmp = ARGV[argi + 6], fields_n = COUNT[ARGV[argi + 7]] or tonumber(ARGV[argi + 7]), fields_at = argi + 7}
  argi = argi + 8 + e_jobs.fields_n
  jobs[k] = e_jobs
end
-- luagen: end of the prologue

-- The events are appended without the stream's cap (EVENTS_CAP, XADD MAXLEN ~: its
-- arguments and its trim check were ~2k instructions an event): each job this call
-- adds to coord:idx:jobs raises the cap by EVENTS_PER_JOB and adds at most two events,
-- so the stream stays under the cap the next capped XADD (a claim's, a finish's)
-- trims it to, and the retention trims it too (trim_events.lua).

if guard_fields_n > 0 then
  local have = rcall('HMGET', K_CONTEXT .. ctx, unpack(views, guard_fields_at + 1, guard_fields_at + guard_fields_n))
  for g = 1, guard_fields_n do
    if (have[g] or '') ~= views[guard_values_at + g] then return {'changed', 0, '', ''} end
  end
end

-- out: the reply, the found jobs appended (existing; an empty table of them in every
-- reply was ~4-6k instructions a call: its making, and Redis looking it up for the
-- fields of a status or an error)
local out, members, pushed = {'ok', 0, '', ''}, {}, 0
local function existing(n, member)
  out[#out + 1] = {n, unpack(rcall('HGETALL', K_JOB .. member))}
  return member
end

-- same: two stored values of a compared field that mean the same (empty lists and maps
-- are stored as '', '[]' or '{}').
-- STORED_DEFAULT: the value of a field a job's hash leaves out at its default (lib/store
-- jobDefaults; the empty lists and maps are the same as '' already).
local STORED_DEFAULT = {timeout = '0', retries = '0'}
local function same(v, want)
  return v == want or ((v == '' or v == '[]' or v == '{}') and (want == '' or want == '[]' or want == '{}'))
end

-- Each job's queue on this node (lib_route's route_queue, from its fields as given: a
-- read of the hash once written cost a command); a job that names no runner and that
-- no runner here serves refuses the call.
-- (The three fields are picked out of the job's items: a table of all of them, built
-- per job, cost more than the rest of this loop.)
-- (The same loop takes each job's keys, notes the first job of the call that chose
-- each id (chosen_by) and counts the ids each caller's jobs want reserved: a loop of
-- its own over the jobs was ~250 instructions a job.)
local fn_queue, chosen_by, want = {}, {}, {}
for n, j in ipairs(jobs) do
  local key = KEYS[2 * n - 1]
  j.key, j.ukey = key, KEYS[2 * n]
  if not j.chosen then
    want[j.caller] = (want[j.caller] or 0) + 1
  elseif not chosen_by[key] then
    chosen_by[key] = n
  end
  local runner, stype, fn
  local fields_at = j.fields_at
  for k = 1, j.fields_n, 2 do
    local name = views[fields_at + k]
    if name == 'runner_id' then runner = views[fields_at + k + 1]
    elseif name == 'script_type' then stype = views[fields_at + k + 1]
    elseif name == 'function_name' then fn = views[fields_at + k + 1]
    elseif name == 'priority' then j.prio = views[fields_at + k + 1]
    elseif name == 'concurrency_key' then j.ck = views[fields_at + k + 1]
    elseif name == 'concurrency_limit' then j.cl = views[fields_at + k + 1] end
  end
  -- (a handler job that names no runner: its queue found once a call per function and
  -- script type, whose executor route_queue matches out of its name)
  if fn and (runner or '0') == '0' then
    local by_type = fn_queue[fn]
    if not by_type then
      by_type = {}
      fn_queue[fn] = by_type
    end
    local q = by_type[stype or '']
    if q == nil then
      q = route_queue(j.caller, runner, stype, fn) or false
      by_type[stype or ''] = q
    end
    j.q = q or nil
  else
    j.q = route_queue(j.caller, runner, stype, fn)
  end
  if not j.q and (runner or '0') == '0' then return {'unserved', n, '', ''} end
end

-- Pass 1: refusals, before anything is written.
for n, j in ipairs(jobs) do
  local first = chosen_by[j.key]
  if not j.chosen then
    -- an id is reserved below
  elseif rcall('EXISTS', j.key) == 1 then
    local fields_at = j.fields_at
    for f = 1, 2 * tonumber(j.ncmp) - 1, 2 do
      local name = views[fields_at + f]
      if not same(rcall('HGET', j.key, name) or STORED_DEFAULT[name] or '', views[fields_at + f + 1]) then
        return {'conflict', n, views[fields_at + f], ''}
      end
    end
    j.exists = true
  elseif first ~= n then
    -- An earlier job of the call chose this id: the same content is that job.
    local was, e = {}, jobs[first]
    local e_fields_at, fields_at = e.fields_at, j.fields_at
    for f = 1, e.fields_n, 2 do was[views[e_fields_at + f]] = views[e_fields_at + f + 1] end
    for f = 1, 2 * tonumber(j.ncmp) - 1, 2 do
      local name = views[fields_at + f]
      if not same(was[name] or '', views[fields_at + f + 1]) then return {'conflict', n, name, ''} end
    end
    j.again = true
  end
end

-- Ids for the jobs that chose none, from their callers' counters
-- (coord:seq:job:<caller>): one INCRBY per caller for its jobs of the call, and an INCR
-- more for each id found held (by a job whose caller chose it, in Redis or in the call).
-- The keys of a caller's reserved ids are checked in one EXISTS (lib_state's
-- keys_free; nothing is written before pass 2): each on its own only when one is held
-- (free: the caller's reserved ids and keys when all are free, false else).
local next_id, last_id, free = {}, {}, {}
for _, j in ipairs(jobs) do
  if not j.chosen then
    local c = j.caller
    if not next_id[c] then
      last_id[c] = rcall('INCRBY', K_JOB_SEQ .. c, int(want[c]))
      next_id[c] = last_id[c] - want[c] + 1
      free[c] = false
      if want[c] > 1 and last_id[c] <= 4294967295 then
        local ids, ks = keys_free(K_JOB .. c .. ':', next_id[c], last_id[c])
        if ids then free[c] = {ids = ids, ks = ks, base = next_id[c] - 1, last = last_id[c]} end
      end
    end
    local id, f = nil, free[c]
    repeat
      id = next_id[c]
      if id > last_id[c] then
        id = rcall('INCR', K_JOB_SEQ .. c)
        last_id[c] = id
      end
      if id > 4294967295 then return {'exhausted', 0, c, ''} end
      next_id[c] = id + 1
      local known = f and id <= f.last
      if known then
        j.id, j.key = f.ids[id - f.base], f.ks[id - f.base]
      else
        j.id = int(id)
        j.key = K_JOB .. c .. ':' .. j.id
      end
    until not chosen_by[j.key] and (known or rcall('EXISTS', j.key) == 0)
  end
end

-- Pass 2: create and dispatch (a uniqueness key is read here, after the jobs before
-- it in the batch set theirs).
-- the new jobs' message ids in one INCRBY, their index entries in one ZADD per index
-- (a job a uniqueness key finds created leaves its message id unused)
-- (the same loop notes whether they share one caller, one_caller, and whether every
-- one of them goes to a queue here, all_here: below)
local fresh, one_caller, all_here = 0, false, true
for _, j in ipairs(jobs) do
  if not j.exists and not j.again and j.run_at == '0' then
    fresh = fresh + 1
    if one_caller == false then one_caller = j.caller elseif one_caller ~= j.caller then one_caller = nil end
    if not j.q then all_here = false end
  end
end
message_reserve(fresh)
-- the request messages share msg's fields (lib_state's message_share), and the new
-- jobs the fields every one of them gets but its id, message and caller, the same
-- way: each is a COPY of the scratch hash coord:jobtmpl, then its own items in one
-- HSET (these ~15 fields written into each job's new hash, each looked up in all those
-- before it, and their items crossing from Lua, cost more than a copy)
-- When the new jobs share one caller (one_caller), its caller_id is in both scratch
-- hashes, not in each job's and message's own items; when every one of them goes to
-- a queue here, their messages' status (acknowledged) is in the message's.
local shared = fresh >= 2
one_caller = shared and one_caller or false -- (nil: callers differ)
if shared then
  -- (the request messages of jobs routed here are stored short, not from msg: when
  -- every new job is, no message shares its fields)
  if not all_here then message_share(msg, one_caller and {'caller_id', one_caller} or nil) end
  rcall('DEL', K_JOB_TEMPLATE) -- (one a call that failed midway left)
  if one_caller then
    rcall('HSET', K_JOB_TEMPLATE, 'status', JOB_DISPATCHED, 'attempt', '1',
      'updated_at', now_s, 'created_at_ms', now_ms, 'dispatched_at_ms', now_ms, 'context_id', ctx, 'caller_id', one_caller)
  else
    rcall('HSET', K_JOB_TEMPLATE, 'status', JOB_DISPATCHED, 'attempt', '1',
      'updated_at', now_s, 'created_at_ms', now_ms, 'dispatched_at_ms', now_ms, 'context_id', ctx)
  end
end
local indexed, scheduled, delayed, first_due = {}, {}, {}, nil
for n, j in ipairs(jobs) do
  local member = j.caller .. ':' .. j.id
  local prev = false
  if j.ukey ~= '' then prev = rcall('GET', j.ukey) end
  if prev and rcall('EXISTS', K_JOB .. prev) == 1 then
    members[#members + 1] = existing(n, prev)
  elseif j.exists or (j.again and rcall('EXISTS', j.key) == 1) then
    members[#members + 1] = existing(n, member)
  elseif j.run_at ~= '0' then
    -- A delayed job: stored scheduled (attempt 0: its dispatch makes it 1), its request
    -- message left to that dispatch (lua/dispatch.lua, when coord:delayed says it is due).
    rcall('HSET', j.key, 'id', j.id, 'status', JOB_SCHEDULED, 'attempt', '0',
      'updated_at', now_s, 'created_at_ms', now_ms, 'run_at_ms', j.run_at,
      'caller_id', j.caller, 'context_id', ctx, unpack(views, j.fields_at + 1, j.fields_at + j.fields_n))
    scheduled[#scheduled + 1] = now_ms
    scheduled[#scheduled + 1] = member
    ev_flush(true) -- (after the events held before it, lib_state's ev_later)
    rcall('XADD', K_EVENTS, '*', 'type', EV_JOB_CREATED, 'actor', j.actor,
      'flow_id', '0', 'job_id', j.id, 'caller_id', j.caller, 'status', JOB_SCHEDULED, 'detail', 'run_at_ms ' .. j.run_at)
    delayed[#delayed + 1] = j.run_at
    delayed[#delayed + 1] = ctx .. ':job:' .. member
    if not first_due or tonumber(j.run_at) < tonumber(first_due) then first_due = j.run_at end
    if j.ukey ~= '' then rcall('SET', j.ukey, member, 'PX', j.ttl) end
    members[#members + 1] = member
  else
    -- Its request message's id, which its hash holds from the start (msgs, as
    -- track_msg would write it).
    local q = j.q
    local mid, mk = message_id(j.caller)
    local copied = shared and rcall('COPY', K_JOB_TEMPLATE, j.key) == 1
    if copied and one_caller then
      rcall('HSET', j.key, 'id', j.id, 'msgs', mid, unpack(views, j.fields_at + 1, j.fields_at + j.fields_n))
    elseif copied then
      rcall('HSET', j.key, 'id', j.id, 'msgs', mid, 'caller_id', j.caller, unpack(views, j.fields_at + 1, j.fields_at + j.fields_n))
    else
      rcall('HSET', j.key, 'id', j.id, 'status', JOB_DISPATCHED, 'attempt', '1',
        'updated_at', now_s, 'created_at_ms', now_ms, 'dispatched_at_ms', now_ms, 'msgs', mid,
        'caller_id', j.caller, 'context_id', ctx, unpack(views, j.fields_at + 1, j.fields_at + j.fields_n))
    end
    indexed[#indexed + 1] = now_ms
    indexed[#indexed + 1] = member
    -- Its job.created and job.dispatched, with the call's other new jobs' in two stream
    -- entries, one record for both but the call's first job's (lib_state's ev_later,
    -- ev_flush after the loop; the first is appended
    -- uncapped here: see EVENTS_PER_JOB above). No status (job.created's is empty,
    -- job.dispatched's its type's), and no detail: a job.created of a job_id and
    -- caller_id reads its job's key, a job.dispatched a first attempt's (lib/store
    -- impliedStatus, impliedDetail, eventsOf).
    ev_later(EV_JOB_CREATED, j.actor, '0', j.id, j.caller, '', EV_JOB_DISPATCHED)
    -- its request message: when a runner here takes it (the job queued, as lib_route's
    -- route_store), acknowledged and stored short: one field, req "<now_ms> <id>", from
    -- which a read makes the message the call's fields and the job's own would be
    -- (lib/store expandShort: its list as requestRef writes a standalone job's, its
    -- text as requestFields'); else the call's fields and the job's own, dispatched
    -- on msg_out for the router
    if q then
      rcall('HSET', mk, 'req', now_ms .. ' ' .. j.id)
    else
      local own = {'message', 'job ' .. ctx .. ':' .. member, 'job', '[{"id":' .. j.id .. ',"caller_id":' .. j.caller .. '}]'}
      if not (shared and one_caller) then
        own[5] = 'caller_id'
        own[6] = j.caller
      end
      store_message(j.caller, msg, now_ms, own, nil, mid)
    end
    if q then
      if j.prio then route_priority(j.key, j.prio) end
      if j.ck then route_concurrency(j.key, j.ck, j.cl) end
      route_add(j.key, q)
    else
      rcall('LPUSH', K_MSG_OUT, mk)
      pushed = pushed + 1
    end
    if j.ukey ~= '' then rcall('SET', j.ukey, member, 'PX', j.ttl) end
    members[#members + 1] = member
  end
end
ev_flush(true)
message_unshare()
if shared then rcall('DEL', K_JOB_TEMPLATE) end
call_each('ZADD', K_JOB_INDEX, indexed, 2)
call_each('ZADD', K_JOB_INDEX .. ':' .. JOB_DISPATCHED, indexed, 2)
call_each('ZADD', K_JOB_INDEX, scheduled, 2)
call_each('ZADD', K_JOB_INDEX .. ':' .. JOB_SCHEDULED, scheduled, 2)
route_flush(ctx)
wake_msg_out(ctx, pushed)
if first_due then
  rcall('SELECT', '0')
  call_each('ZADD', K_DELAYED, delayed, 2)
  rcall('PUBLISH', K_DELAYED_WAKE, first_due)
end
out[4] = table.concat(members, ' ')
return out
