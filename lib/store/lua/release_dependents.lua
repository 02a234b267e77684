-- release_dependents: releases the next chunk (at most max) of the dependents of a
-- completed node that has more than one call's worth (lib_complete's release_later
-- left them, with rel:<id> "<done> <fin>" in the DAG hash): each whose dependencies are
-- now all completed gets ready (its ready time the node's end) and is dispatched in
-- this same call, as finish_jobs dispatches the dependents a completion makes ready:
-- marked dispatched, its event written, the chunk's jobs in one job request message
-- (routed here when a runner of this node takes them all, lib_route, else pushed on
-- msg_out). A flow paused, or held (the DAG's hold: a cancel in chunks under way),
-- keeps them ready and undispatched (flow.resume dispatches them; the cancel cancels
-- them). The DAG is
-- read and written in a few commands per chunk (HMGET, HSET, HDEL of all its fields),
-- each job in three (a read, a write, its event). When the last is released, rel:<id>
-- goes. The caller calls again while some are left: the reply says how many, so that
-- the calls for all of them can go at once (pipelined), each taking the next chunk.
-- Nothing is left to do when the DAG holds no rel:<id> (all released, or the flow
-- deleted).
--
-- KEYS:
--   msg_out  msg_out
--   dag      coord:dag:<flow>
-- ARGV:
--   ctx      int    the context id
--   flow     int    the flow id
--   caller   int    the flow's caller id
--   id       int    the completed node's job id
--   max      num    the most dependents this call releases
--   now_s    int    now (s)
--   now_ms   int    now (ms)
--   request  []raw  field/value items of the job request message of the dependents made
--                   ready (all but id, job and job_ids)
-- Libs: lib_busy lib_state lib_wake lib_ck lib_route
-- Reply: record what the call did
--   left        int    how many dependents are left for other calls (0: none)
--   dispatched  int    how many of the dependents made ready were dispatched
--   ...ready    []int  the dependents made ready
-- Derives: context DB: job:<caller>:<id> of the dependents, coord:idx:jobs[:<status>],
--   coord:events, message:<caller>:<id> (a fresh id), coord:seq:message,
--   coord:flowmsgs:<flow>, and lib_route's coord:executors, coord:script_types,
--   coord:features, the job queues, coord:prio:<queue>, context:<ctx>, lib_ck's keys,
--   coord:wakers:<queue>; DB 0 (SELECT 0, last): the runners' wake lists,
--   coord:wake:msg_out, coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local caller = ARGV[3]
local id = ARGV[4]
local max = tonumber(ARGV[5])
local now_s = ARGV[6]
local now_ms = ARGV[7]
local argi = 8
local request
local n_request = tonumber(ARGV[argi])
if n_request <= 7000 then request = {unpack(ARGV, argi + 1, argi + n_request)} else request = {}; for k = 1, n_request do request[k] = ARGV[argi + k] end end
argi = argi + 1 + n_request
-- luagen: end of the prologue

local dag = KEYS[2]
local rel = rcall('HGET', dag, 'rel:' .. id)
if not rel then return {0, 0} end
-- rel: "<done> <fin>" as the completion left it, then "<done> <fin> <pos> <total>":
-- where the next dependent starts in the node's d: list (its JSON), and how many it
-- lists. The list is read from pos, not decoded whole: the chunk's ids only.
local done, fin, pos, total = string.match(rel, '^(%d+) (%d+) ?(%d*) ?(%d*)$')
done, pos, total = tonumber(done), tonumber(pos), tonumber(total)
local dj = rcall('HGET', dag, 'd:' .. id) or '[]'
if not pos then
  pos = 1
  for _ = 1, done do
    local _, e = string.find(dj, '%d+', pos)
    if not e then break end
    pos = e + 1
  end
  local _, commas = string.gsub(dj, ',', '')
  total = 0
  if string.find(dj, '%d') then total = commas + 1 end
end
local chunk = {}
while #chunk < max do
  local s, e = string.find(dj, '%d+', pos)
  if not s then break end
  chunk[#chunk + 1] = string.sub(dj, s, e)
  pos = e + 1
end
local last = done + #chunk
-- The chunk's remaining-dependency counts and states, in one read; kept in cur as
-- they change (a dependent listed twice is counted down twice, as one HINCRBY each).
local fields = {}
for _, d in ipairs(chunk) do
  fields[#fields + 1] = 'r:' .. d
  fields[#fields + 1] = 's:' .. d
end
local cur = {}
for i = 1, #fields, 1000 do
  local part = rcall('HMGET', dag, unpack(fields, i, math.min(i + 999, #fields)))
  for k, v in ipairs(part) do
    if v then cur[fields[i + k - 1]] = v end
  end
end
local ready, counts, gone = {}, {}, {}
for _, d in ipairs(chunk) do
  local rk, sk = 'r:' .. d, 's:' .. d
  local r = (tonumber(cur[rk]) or 0) - 1
  cur[rk] = r
  if r <= 0 and cur[sk] == NODE_PENDING then
    cur[sk] = NODE_READY
    ready[#ready + 1] = d
    gone[#gone + 1] = rk
    counts[rk] = nil
  else
    counts[rk] = r
  end
end
local kv = {}
for rk, r in pairs(counts) do
  kv[#kv + 1] = rk
  kv[#kv + 1] = int(r)
end
call_each('HSET', dag, kv, 2)
call_each('HDEL', dag, gone)
-- The ready ones: dispatched here unless the flow is paused or held (a cancel or a
-- retry in chunks under way).
local flag = rcall('HMGET', dag, 'paused', 'hold')
local go = not flag[1] and not flag[2]
local out = {math.max(total - last, 0), 0}
local attempts = {}
if go and #ready > 0 then
  local af = {}
  for k, d in ipairs(ready) do af[k] = 'a:' .. d end
  for i = 1, #af, 1000 do
    local part = rcall('HMGET', dag, unpack(af, i, math.min(i + 999, #af)))
    for k, v in ipairs(part) do attempts[i + k - 1] = int((tonumber(v) or 0) + 1) end
  end
end
local set, gids, jks = {}, {}, {}
local cap -- the events' cap, read once
for k, d in ipairs(ready) do
  local jk = K_JOB .. caller .. ':' .. d
  local h = rcall('HMGET', jk, 'status', 'created_at_ms')
  if go and h[1] then
    local a = attempts[k]
    set[#set + 1] = 's:' .. d
    set[#set + 1] = NODE_DISPATCHED
    set[#set + 1] = 'a:' .. d
    set[#set + 1] = a
    rcall('HSET', jk, 'status', JOB_DISPATCHED, 'ready_at_ms', fin, 'attempt', a, 'dispatched_at_ms', now_ms, 'updated_at', now_s)
    -- no status, and no detail for a first attempt: the type's (lib/store
    -- impliedStatus, impliedDetail); the call's first event caps the stream, the
    -- others are appended uncapped (lib_claim)
    if cap then
      rcall('XADD', K_EVENTS, '*', 'type', EV_JOB_DISPATCHED, 'actor', 'scheduler',
        'flow_id', flow, 'job_id', d, 'caller_id', caller, 'detail', a == '1' and '' or 'attempt ' .. a)
    else
      cap = EVENTS_CAP()
      rcall('XADD', K_EVENTS, 'MAXLEN', '~', cap, '*', 'type', EV_JOB_DISPATCHED, 'actor', 'scheduler',
        'flow_id', flow, 'job_id', d, 'caller_id', caller, 'detail', a == '1' and '' or 'attempt ' .. a)
    end
    gids[#gids + 1] = d
    jks[#jks + 1] = jk
  else
    -- ready, its job marked so (dispatched, with its ready time), as lib_complete's
    -- release leaves it: its dispatch comes later
    set[#set + 1] = 's:' .. d
    set[#set + 1] = NODE_READY
    if h[1] then rcall('HSET', jk, 'status', JOB_DISPATCHED, 'ready_at_ms', fin, 'updated_at', now_s) end
  end
  if h[1] then index_later(caller .. ':' .. d, h[1], JOB_DISPATCHED, h[2] or nil) end
  out[#out + 1] = d
end
call_each('HSET', dag, set, 2)
index_flush()
if last < total then
  rcall('HSET', dag, 'rel:' .. id, int(last) .. ' ' .. fin .. ' ' .. int(pos) .. ' ' .. int(total))
else
  rcall('HDEL', dag, 'rel:' .. id)
end
local pushed = 0
if #gids > 0 then
  -- its jobs by their ids alone, in parts (lib_state's part_fields)
  local mk, p = route_store(caller, request, now_ms, part_fields({}, 'job_ids', table.concat(gids, ' ')), jks, KEYS[1])
  track_msg(caller, gids[1], mk, flow)
  pushed = p
  out[2] = #gids
end
route_flush(ctx)
wake_msg_out(ctx, pushed)
return out
