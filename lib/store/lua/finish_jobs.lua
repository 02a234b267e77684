-- finish_jobs: records the ends of runs of one context and pushes their result
-- message(s). Only the run that holds the job's current claim can finish it; a second
-- finish changes nothing but the ack. A run whose lease expired and was swept (its
-- runner frozen or cut off past the lease) still holds the job while no other claim
-- has taken it (the job names its claim and is started: its attempt is the latest):
-- its end is recorded, and the copy the sweep queued leaves its queue in the same step.
--
-- With apply (complete), a run of this node's own job that succeeded is also applied
-- here, as the router's delivery and the scheduler's completion would apply it, so that
-- no process stands between a job's end and its dependents' start: its flow node
-- completes (lib_complete; the dependents it makes ready are dispatched in one job
-- request message, routed here when a runner of this node takes them all, lib_route,
-- else pushed on msg_out), or its standalone job ends (retention, coord:jobdone). Its
-- result message is stored processed, not pushed. Only when the scheduler's settings
-- are known (coord:scheduler: its default retention and safety sweep interval) and the
-- retention is 0 or at least the sweep interval: else every run goes the router's way.
-- A failed run always does (retries, DLQ and cascades are the scheduler's).
--
-- KEYS:
--   proc      the processing list
--   leases    coord:leases
--   msg_out   msg_out
--   events    coord:events
--   dag?      coord:dag:<flow> (runs of a flow, with complete)
--   flow?     flow:<flow> (with complete)
--   results?  coord:flowres:<flow> (with complete)
-- ARGV:
--   now_s     int     now (s)
--   now_ms    int     now (ms)
--   ctx       int     the context id
--   caller    int     the caller id
--   logmax    num     the log's cap (bytes)
--   grouped   bool    one result message for all the runs that end here, runs of one
--                     flow; else one each, its text "result of job <ctx>:<caller>:<id>"
--   now_us    int     now (µs)
--   apply     bool    complete: apply a successful run of this node's own job here
--   request   []raw   field/value items of the job request message of the dependents
--                     made ready (all but id, job and job_ids)
--   result    []raw   field/value items of the result message(s) (all but id, job and,
--                     when not grouped, message); a standalone job's end applied here
--                     gets its message short instead (one field, res "<now_ms>
--                     <entry>", processed: lib/store expandShort), and so do a
--                     flow's grouped runs applied here (gres "<now_ms> <flow> <runs>
--                     <their job list>")
--   glist     raw     grouped: the message's job list (a JSON array); else ""
--   runs      []run   the runs that end
--     job_key      string  the job's key
--     member       string  its lease member
--     claim        string  the claim id
--     id           int     the job id
--     flow         int     the flow id
--     status       string  the run's status
--     result       string  its result (the string map's JSON)
--     entry        raw     the run's entry of the message's job list (for a job of this
--                          node a reference with the run's end — the result fields
--                          carry job_ref "1" —, for a job from another node the
--                          finished job) for its own message or, grouped, where it
--                          starts and ends in the list ("<start> <end>", 1-based)
--     extra        view[]raw  name/value pairs of the run's less common items, each
--                          given only when it is not its default (a successful run
--                          has none: an argument each cost ~1k instructions a run):
--                          err (its error; ""), code (its exit code; 0), rjson (the
--                          handler's result_json; "": none, the field is removed),
--                          fatal ("1": no retry), retry_after (ms; 0), chunk (a log
--                          chunk; ""), started (when the run's process was about to
--                          run, µs; "": the claim's start, started_at_us, stays), ck
--                          (the job's concurrency key; lib_ck's ck_end gives its place
--                          back), lim ("1": the run started under limits; lib_limit's
--                          lim_end gives its slot back and wakes the queues parked for
--                          one), await ("1": a job.run call waits for the job, whose
--                          hash holds awaited, and its hash is small enough to
--                          travel: a successful end applied here is told with the
--                          job's hash, read in the same step, which the call
--                          answers with; lib/store maxAwaitedBytes)
--   take      num     the most jobs the take claims for the finishing runner: the slots
--                     of its runs that end here it offers (0: no take; at most 32, lib/store
--                     MaxTake)
--   tworker   string  the take's worker (the runner process; proc is its processing list)
--   texp      int     the take's leases' expiry (ms)
--   tnonce    string  the take's claim ids' stem (claim_start's cnonce)
--   tqueues   view[]string  the queues the finishing runner serves
--   twakes    view[]string  their wake lists of the runner id (DB 0), in tqueues' order
--   tclears   view[]string  the fields a start clears (claim_start's clears)
-- Libs: lib_busy lib_state lib_finalize lib_complete lib_wake lib_ck lib_route lib_dispatch lib_limit lib_qpause lib_claim
-- Notices: the standalone jobs that end here are told on coord:jobdone, one PUBLISH a
--   call: "<ctx>:<caller>:<id>" each, space-separated; and, in a second PUBLISH, the
--   awaited ones (await) with their hashes as they are after the end: "=" and then,
--   per job, "<ctx>:<caller>:<id> <length>\n" and the hash's DUMP of that length
--   (one string to Lua, where HGETALL makes one of every field and value: ~5 times
--   the cost), unless it is over AWAITED_MAX bytes (then the job is told by
--   reference; lib/store ParseAwaitedNotice, HashFromDump).
-- Reply: raw per run 1 written, 2 written before by this claim (a retry after a lost
--   answer), 0 the claim is not the job's any more; with complete, then {runs applied
--   here, jobs dispatched, flow status of the flow that ended here or "", and, when the
--   take claimed, {its queue, claim_start's reply}}.
-- Derives: context DB: coord:msgtmpl (lib_state's message_share: the result messages'
--   shared fields, a scratch hash written and deleted in the call),
--   coord:log:<caller>:<id> of each run, coord:idx:jobs:<status>,
--   coord:ckrun:<key>, coord:ckheld:<key> and the held jobs' queues (lib_ck),
--   coord:limrun:<scope> and coord:limpark (lib_limit),
--   the job queue of a run's lease member (a late end's queued copy),
--   message:<caller>:<id> (fresh ids), coord:seq:message,
--   coord:flowmsgs:<flow> (a job's own messages: its hash's msgs), and what lib_complete, lib_dispatch and
--   lib_route derive (the flow's jobs, context:<ctx>, the indexes, the job queues);
--   DB 0 (SELECT 0): coord:scheduler (read), coord:expire, coord:flows:active,
--   coord:jobdone, coord:flowdone, coord:due and coord:delayedwake (dependents
--   past the first RELEASE_CHUNK left to the scheduler), the runners' wake lists, and, last,
--   coord:wake:msg_out and coord:busy; with a take, what claim_start derives (lib_claim:
--   the taken queue, its wake list, the started job's DAG, flow, context and
--   dependencies' hashes).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local views = ARGV -- the view[] arguments' items, in place: views[<name>_at + k], k = 1 … <name>_n
local now_s = ARGV[1]
local now_ms = ARGV[2]
local ctx = ARGV[3]
local caller = ARGV[4]
local logmax = tonumber(ARGV[5])
local grouped = ARGV[6] == '1'
local now_us = ARGV[7]
local apply = ARGV[8] == '1'
local argi = 9
local request
local n_request = tonumber(ARGV[argi])
if n_request <= 7000 then request = {unpack(ARGV, argi + 1, argi + n_request)} else request = {}; for k = 1, n_request do request[k] = ARGV[argi + k] end end
argi = argi + 1 + n_request
local result
local n_result = tonumber(ARGV[argi])
if n_result <= 7000 then result = {unpack(ARGV, argi + 1, argi + n_result)} else result = {}; for k = 1, n_result do result[k] = ARGV[argi + k] end end
argi = argi + 1 + n_result
local glist = ARGV[argi]
argi = argi + 1
local runs
local n_runs = tonumber(ARGV[argi])
runs = {}
argi = argi + 1
for k = 1, n_runs do
  local e_runs = {job_key = ARGV[argi], member = ARGV[argi + 1], claim = ARGV[argi + 2], id = ARGV[argi + 3], flow = ARGV[argi + 4], status = ARGV[argi + 5], result = ARGV[argi + 6], entry = ARGV[argi + 7], extra_n = COUNT[ARGV[argi + 8]] or tonumber(ARGV[argi + 8]), extra_at = argi + 8}
  argi = argi + 9 + e_runs.extra_n
  runs[k] = e_runs
end
local take = tonumber(ARGV[argi])
argi = argi + 1
local tworker = ARGV[argi]
argi = argi + 1
local texp = ARGV[argi]
argi = argi + 1
local tnonce = ARGV[argi]
argi = argi + 1
local tqueues_n = tonumber(ARGV[argi])
local tqueues_at = argi
argi = argi + 1 + tqueues_n
local twakes_n = tonumber(ARGV[argi])
local twakes_at = argi
argi = argi + 1 + twakes_n
local tclears_n = tonumber(ARGV[argi])
local tclears_at = argi
argi = argi + 1 + tclears_n
-- luagen: end of the prologue

local proc, leases, mo, ek = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local here_ok = apply
-- The scheduler's default retention and sweep interval: ends are applied here only
-- when the scheduler has written them and the retention of what ends is 0 (forever) or
-- at least the sweep's interval (the longest its expiry timer waits).
local retention, eff
if here_ok then
  local keep = tonumber(rcall('HGET', K_CONTEXT .. ctx, 'retention_seconds') or '0') or 0
  rcall('SELECT', '0')
  local st = rcall('HMGET', K_SCHEDULER, 'retention_ms', 'sweep_ms')
  rcall('SELECT', ctx)
  retention = tonumber(st[1] or '')
  eff = retention
  if keep > 0 then eff = keep * 1000 end
  here_ok = retention ~= nil and (eff == 0 or eff >= (tonumber(st[2] or '') or math.huge))
end
-- The standalone jobs that end here (lib_complete's standalone_end, done inline for a
-- successful run: its retention and coord:jobdone, written to DB 0 once per call).
local expire, jobdone = {}, {}
-- awaited: the awaited jobs that end here with their hashes (parts of one string; see
-- Notices)
local awaited = {}
local AWAITED_MAX = 16384
local function tell_awaited(jk, ref)
  local d = rcall('DUMP', jk)
  if #d > AWAITED_MAX then
    jobdone[#jobdone + 1] = ref
    return
  end
  local n = #awaited
  awaited[n + 1] = ref; awaited[n + 2] = ' '; awaited[n + 3] = #d; awaited[n + 4] = '\n'; awaited[n + 5] = d
end
local out, done, ids, hdone, hids = {}, {}, {}, {}, {}
local unleased = {} -- the runs' lease members, removed in one ZREM
local gflow -- the flow of the runs that share one message or are applied here (one flow per call)
local pushed, applied, ready, fstatus = 0, 0, {}, ''
local function push(mk)
  rcall('LPUSH', mo, mk)
  pushed = pushed + 1
end
-- applied_ends: the successful ends of runs of the call's flow that are applied here,
-- as the scheduler would (lib_complete's complete_many, once for all of them after the
-- runs' own writes and events): id, attempt (as stored), result each, flat
local applied_ends = {}
-- each run's own result message (not grouped): their ids in one INCRBY (a run
-- whose claim is not the job's any more leaves its id unused)
-- (and they share the result's fields: lib_state's message_share)
-- (a standalone job's successful end applied here stores its result message short, not
-- from result: those of the other runs share its fields when there are several)
if not grouped then
  message_reserve(#runs)
  local full = 0
  for r = 1, #runs do
    if not (here_ok and runs[r].status == JOB_FINISHED and runs[r].flow == '0') then full = full + 1 end
  end
  if full >= 2 then message_share(result) end
end
-- The runs' entries off the processing list in one LTRIM when they are its tail (runs
-- end in about the order they started, and claims push at the head), as an LREM each
-- from the tail would take them (an LREM a run was ~3k instructions): the tail read in
-- one LRANGE, compared in order (the first run's entry the tailmost), else counted
-- (the same entries in another order); runs.trimmed notes it (each run's held is 1:
-- its job was there). Else each run's LREM below, as before.
do
  local nr = #runs
  local items = nr > 0 and rcall('LRANGE', proc, -nr, -1) or {}
  if #items == nr and nr > 0 then
    local same = true
    for r = 1, nr do
      if items[nr - r + 1] ~= runs[r].job_key then
        same = false
        break
      end
    end
    if not same then
      local cnt = {}
      for i = 1, nr do
        local it = items[i]
        cnt[it] = (cnt[it] or 0) + 1
      end
      same = true
      for r = 1, nr do
        local c = cnt[runs[r].job_key]
        if not c or c == 0 then
          same = false
          break
        end
        cnt[runs[r].job_key] = c - 1
      end
    end
    if same then
      rcall('LTRIM', proc, '0', '-' .. (nr + 1))
      runs.trimmed = true
    end
  end
end
for r = 1, #runs do
  local run = runs[r]
  local jk, member, claim, id, flow, status, rresult = run.job_key, run.member, run.claim, run.id, run.flow, run.status, run.result
  -- the run's less common items: their defaults, unless extra gives them
  local err, code, rjson, fatal, retry_ms, chunk, started, ck, lim, await = '', '0', '', false, '0', '', '', '', false, false
  for k = 1, run.extra_n, 2 do
    local name, v = views[run.extra_at + k], views[run.extra_at + k + 1]
    if name == 'err' then err = v
    elseif name == 'code' then code = v
    elseif name == 'rjson' then rjson = v
    elseif name == 'fatal' then fatal = v == '1'
    elseif name == 'retry_after' then retry_ms = v
    elseif name == 'chunk' then chunk = v
    elseif name == 'started' then started = v
    elseif name == 'ck' then ck = v
    elseif name == 'lim' then lim = v == '1'
    elseif name == 'await' then await = v == '1'
    else error('finish_jobs: unknown item ' .. name .. ' of a run') end
  end
  -- (a number read from a string is a strtod, and one formatted a sprintf: ~0.5–1.5k
  -- instructions each, skipped where the string is what is needed)
  local retry_after = 0
  if retry_ms ~= '0' then retry_after = tonumber(retry_ms) end
  -- from the tail, where claims (pushed at the head) are oldest: runs end in about the
  -- order they started, so the entry is near (a scan from the head crossed every run
  -- in flight, ~2% of this script with 256 of them)
  local held = runs.trimmed and 1 or rcall('LREM', proc, '-1', jk)
  unleased[#unleased + 1] = member
  -- its slot under limits: given back, the queues parked for one woken (ck_wake)
  if lim then
    for _, pq in ipairs(lim_end(member)) do ck_later(pq, 1) end
  end
  -- cur: claim, status, attempt, created_at_ms (the job's score in the status
  -- indexes), then done_attempt (read for a standalone job) and msgs (for a result
  -- message of its own), both left out for a flow's grouped runs (misses there, a
  -- scan each). An earlier run's error, fatal, retry_after_ms and result_json are not
  -- read: the start of any run after a job's first attempt removed them
  -- (claim_start), so this end only sets those it has.
  local cur
  if grouped and flow ~= '0' then
    cur = rcall('HMGET', jk, 'claim', 'status', 'attempt', 'created_at_ms')
  else
    cur = rcall('HMGET', jk, 'claim', 'status', 'attempt', 'created_at_ms', 'done_attempt', 'msgs')
  end
  if cur[1] == claim and (cur[2] == JOB_FINISHED or cur[2] == JOB_ERROR) then
    out[#out + 1] = 2 -- written already: a try whose answer was lost
  elseif cur[1] ~= claim or cur[2] ~= JOB_STARTED then
    out[#out + 1] = 0
  else
    -- the end in microseconds only (finished_at and finished_at_ms are derived from it
    -- when read: each field the end adds is a scan of the job's listpack)
    -- set: the items of a run's end beyond its status, result, end and updated_at, in a
    -- table only when it has one of the less common ones (exit code, error …): else
    -- the HSET below spells them out with done_attempt (da) and msgs (mn) when
    -- written (a table a run, and its unpack, were ~1.5k instructions)
    -- (sized for the items a standalone job's end adds, done_attempt and msgs: a table
    -- grown past its constructor's size is rebuilt)
    local set, da, mn
    if code ~= '0' or rjson ~= '' or started ~= '' or err ~= '' or fatal or (retry_after and retry_after > 0) then
      set = {'status', status, 'result', rresult, 'finished_at_us', now_us, 'updated_at', now_s, nil, nil, nil, nil}
      -- an exit code of 0 is the field's absence (its read: 0), as for the other ends'
      -- fields below: a start removes an earlier run's (issue 49: 13 B of a finished
      -- job's listpack)
      if code ~= '0' then set[#set + 1] = 'exit_code'; set[#set + 1] = code end
      if rjson ~= '' then set[#set + 1] = 'result_json'; set[#set + 1] = rjson end
      if started ~= '' then set[#set + 1] = 'started_at_us'; set[#set + 1] = started end
      if err ~= '' then set[#set + 1] = 'error'; set[#set + 1] = err end
      if fatal then set[#set + 1] = 'fatal'; set[#set + 1] = '1' end
      if retry_after and retry_after > 0 then set[#set + 1] = 'retry_after_ms'; set[#set + 1] = retry_ms end
    end
    local here = here_ok and status == JOB_FINISHED
    -- A standalone job's successful end, applied here as standalone_end would: once
    -- per attempt (done_attempt); the failure branches (retries, DLQ) are the
    -- scheduler's.
    local alone = here and flow == '0'
    local told -- an awaited job's end, told with its hash once it is written
    if alone then
      local as = cur[3] or '0' -- (the attempt as stored: a whole number)
      if cur[5] ~= as then
        da = as
        if eff > 0 then expire[#expire + 1] = ctx .. ':job:' .. caller .. ':' .. id end
        if await then
          told = ctx .. ':' .. caller .. ':' .. id
        else
          jobdone[#jobdone + 1] = ctx .. ':' .. caller .. ':' .. id
        end
        applied = applied + 1
      end
    end
    -- A run's own result message (not grouped) is stored first, so that the job's HSET
    -- also records it (its number in msgs, as track_msg would).
    -- A standalone job's end applied here stores it short (processed, no one's to
    -- read but through the API): one field, res "<now_ms> <entry>", from which a read
    -- makes the message result's fields and its own would be (lib/store expandShort).
    local mk
    if not grouped then
      local n
      if alone then
        n, mk = message_id(caller)
        rcall('HSET', mk, 'res', now_ms .. ' ' .. run.entry)
      else
        mk = store_message(caller, result, now_ms, part_fields({'message', 'result of job ' .. ctx .. ':' .. caller .. ':' .. id, nil, nil, nil, nil}, 'job', '[' .. run.entry .. ']'), here and MSG_PROCESSED or nil)
        n = string.sub(mk, #K_MESSAGE + #caller + 2)
      end
      if cur[6] and cur[6] ~= '' then n = cur[6] .. ' ' .. n end
      mn = n
    end
    if set then
      if da then set[#set + 1] = 'done_attempt'; set[#set + 1] = da end
      if mn then set[#set + 1] = 'msgs'; set[#set + 1] = mn end
      rcall('HSET', jk, unpack(set))
    elseif da and mn then
      rcall('HSET', jk, 'status', status, 'result', rresult, 'finished_at_us', now_us, 'updated_at', now_s, 'done_attempt', da, 'msgs', mn)
    elseif mn then
      rcall('HSET', jk, 'status', status, 'result', rresult, 'finished_at_us', now_us, 'updated_at', now_s, 'msgs', mn)
    elseif da then
      rcall('HSET', jk, 'status', status, 'result', rresult, 'finished_at_us', now_us, 'updated_at', now_s, 'done_attempt', da)
    else
      rcall('HSET', jk, 'status', status, 'result', rresult, 'finished_at_us', now_us, 'updated_at', now_s)
    end
    if told then tell_awaited(jk, told) end
    -- a late end (the lease was swept, no other claim took the job): the copy the
    -- sweep queued, at the consuming end, goes
    if held == 0 then rcall('LREM', string.match(member, '^[^\t]*\t([^\t]*)\t'), '-1', jk) end
    index_later(caller .. ':' .. id, JOB_STARTED, status, cur[4] or nil)
    if chunk ~= '' then
      local lk = K_JOB_LOG .. caller .. ':' .. id
      local len = rcall('STRLEN', lk)
      if len < logmax then
        if len + #chunk > logmax then chunk = string.sub(chunk, 1, logmax - len) .. '\n[log truncated at ' .. logmax .. ' bytes]\n' end
        rcall('APPEND', lk, chunk)
      end
    end
    local ev = EV_JOB_FINISHED
    if status ~= JOB_FINISHED then ev = EV_JOB_FAILED end
    -- (its status, finished or error, is its type's: not stored, lib/store
    -- impliedStatus; the call's events go in two stream entries, lib_state's ev_later
    -- and ev_flush, which the events of what the ends cause follow: the completions of
    -- the flow's ends applied here come after the flush, below)
    ev_later(ev, 'runner', flow, id, caller, err)
    -- its concurrency key's place: given back, and the key's oldest held job queued
    if ck ~= '' then
      ev_flush()
      ck_end(ck, jk, now_ms)
    end
    if here and not alone then
      -- (flat, no table a run; its attempt as stored, no number made)
      applied_ends[#applied_ends + 1] = id
      applied_ends[#applied_ends + 1] = cur[3] or '0'
      applied_ends[#applied_ends + 1] = rresult
      gflow = flow
    end
    if grouped then
      if here then
        hdone[#hdone + 1] = run.entry
        hids[#hids + 1] = id
      else
        done[#done + 1] = run.entry
        ids[#ids + 1] = id
      end
      gflow = flow
    elseif not here then
      push(mk)
    end
    out[#out + 1] = 1
  end
end
-- the grouped runs' result messages: those applied here (processed) and the others
-- (pushed), each listing its runs
local function group_message(spans, gids, total, processed)
  local list = glist
  if #spans < total then
    local js = {}
    for k, span in ipairs(spans) do
      local a, b = string.match(span, '^(%d+) (%d+)$')
      js[k] = string.sub(glist, tonumber(a), tonumber(b))
    end
    list = '[' .. table.concat(js, ',') .. ']'
  end
  local mk
  if processed then
    -- stored short (no one's to read but through the API): one field, gres
    -- "<now_ms> <flow> <runs of the call> <job list>", from which a read makes the
    -- message result's fields and the list would be (lib/store expandShort); stored
    -- whole it was a new hash of ~10 fields and the list in 64-byte parts, each
    -- field looked up in those before it (~10k instructions a run)
    local _
    _, mk = message_id(caller)
    rcall('HSET', mk, 'gres', now_ms .. ' ' .. gflow .. ' ' .. int(total) .. ' ' .. list)
  else
    mk = store_message(caller, result, now_ms, part_fields({}, 'job', list), nil)
  end
  track_msg(caller, gids[1], mk, gflow)
  if not processed then push(mk) end
end
ev_flush()
if #applied_ends > 0 then
  local n, st = complete_many(KEYS[5], KEYS[6], KEYS[7], ek, ctx, gflow, caller, now_s, now_ms, 'runner', retention, applied_ends, now_ms, ready)
  applied = applied + n
  if st ~= '' then fstatus = st end
end
message_unshare()
call_each('ZREM', leases, unleased)
index_flush()
local nruns = #runs
if #hdone > 0 then group_message(hdone, hids, nruns, true) end
if #done > 0 then group_message(done, ids, nruns, false) end
-- The dependents made ready: dispatched in one request message.
local dispatched = 0
if #ready > 0 then
  local flow = runs[1].flow
  local gids, jks = {}, {}
  for _, d in ipairs(ready) do
    local attempt = dispatch_job(caller, flow, KEYS[5], d, now_s, now_ms, nil, 'runner')
    if attempt then
      gids[#gids + 1] = d
      jks[#jks + 1] = K_JOB .. caller .. ':' .. d
    end
  end
  ev_flush() -- their job.dispatched events (lib_dispatch), before any a push writes
  if #gids > 0 then
    -- its jobs by their ids alone, in parts (lib_state's part_fields)
    local mk, p = route_store(caller, request, now_ms, part_fields({}, 'job_ids', table.concat(gids, ' ')), jks, mo)
    track_msg(caller, gids[1], mk, flow)
    pushed = pushed + p
    dispatched = #gids
  end
end
if #jobdone > 0 or #awaited > 0 then
  rcall('SELECT', '0')
  if #expire > 0 then
    local args, at = {}, int(tonumber(now_ms) + eff)
    for k, m in ipairs(expire) do args[2 * k - 1] = at; args[2 * k] = m end
    rcall('ZADD', K_EXPIRE, unpack(args))
  end
  -- one notice for the call's jobs (space-separated): a PUBLISH, and a message its
  -- subscribers read, per job was ~2% of a standalone job's CPU
  if #jobdone > 0 then rcall('PUBLISH', K_JOB_DONE, table.concat(jobdone, ' ')) end
  if #awaited > 0 then rcall('PUBLISH', K_JOB_DONE, '=' .. table.concat(awaited)) end
  rcall('SELECT', ctx)
end
ck_wake(ctx)
route_flush(ctx)
wake_msg_out(ctx, pushed)
-- The take: a job waiting on a queue that the finishing runner serves (tqueues) is
-- claimed for that runner in this same step, as its claim would (lib_claim: a lease,
-- the processing list, the start's event, the context's wake tokens of the list set
-- anew), so that it starts on the slot of a run that ends here, without a wake-up and a
-- claim's round trip. The queues looked at, in turn: those the dependents made ready
-- here were routed to, then those of the runs that end; the first that holds jobs is
-- taken from. Only when the runner offers slots (take) and nothing else waits for it:
-- no token on its wake lists but this context's on that queue's. Another context, or
-- another queue, waiting there gets the slots by the claims, in the lists' order (a
-- slot passed from run to run would keep them waiting while the queue has jobs).
local taken
if apply and take > 0 then
  rcall('SELECT', '0')
  local waiting = {}
  for k = 1, tqueues_n do waiting[k] = rcall('LLEN', views[twakes_at + k]) end
  local looked = {}
  local function take_from(q)
    if looked[q] then return end
    looked[q] = true
    for k = 1, tqueues_n do
      if views[tqueues_at + k] == q then
        for j = 1, tqueues_n do
          if j ~= k and waiting[j] > 0 then return end
        end
        if waiting[k] > 0 then
          rcall('SELECT', '0')
          local mine = rcall('LPOS', views[twakes_at + k], ctx, 'COUNT', 0)
          if #mine < waiting[k] then return end
        end
        rcall('SELECT', ctx)
        if rcall('LLEN', q) > 0 then
          taken = {q, claim_run(q, proc, leases, ek, views[twakes_at + k], tworker, q, texp, now_ms, now_us, now_s, take, ctx,
            '0', ctx, {unpack(views, tclears_at + 1, tclears_at + tclears_n)}, tnonce, '=', {})}
        end
        return
      end
    end
  end
  for _, q in ipairs(route_targets) do
    take_from(q)
    if taken then break end
  end
  if not taken then
    for _, run in ipairs(runs) do
      take_from(string.match(run.member, '^[^\t]*\t([^\t]*)\t') or '')
      if taken then break end
    end
  end
end
if apply then out[#out + 1] = {applied, dispatched, fstatus, taken} end
return out
