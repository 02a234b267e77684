-- dispatch: sends ready nodes of a flow (or one standalone job) on their way. For each
-- job it checks the node is ready (and its retry due), marks node and job dispatched and
-- records the event; a job of its own gets its message stored at once; the group's jobs
-- share one message (its job list names the jobs dispatched: the list given when that
-- is every grouped job, else cut from it; job_ids their ids), stored after them. A
-- message whose jobs a runner of this node can take (lib_route) is routed here, as the
-- router's claim would: acknowledged, its jobs pushed onto their queues with the
-- runners' wake tokens; any other is pushed on msg_out for the router, one wake token
-- per message. A local request message
-- names its jobs (ids only, field job_ref "1"; lib/store's msgref.go) and stores no
-- nodes: readers get both from the jobs' hashes.
--
-- KEYS: [1] msg_out, [2] coord:dag:<flow> (not given for a standalone job).
-- ARGV: [1] context id, [2] flow id (0: a standalone job), [3] caller id, [4] now (s),
--   [5] now (ms), [6] actor, [7] the start time (ms) of the flow whose start found these
--   nodes ready ("": nodes made ready since; see DispatchStarted), [8] g, the number of
--   field/value items of a group message (0: none), then those g items (all but its id,
--   job and job_ids), then, when g > 0, the group's job list as a JSON array, then per
--   job: its id, 1 when it goes in the group message (0: a message of its own), the
--   number n of items that follow, and those n items: a message of its own's field/value
--   items, or for the group where its job's JSON starts and ends in the list (2
--   positions, 1-based, inclusive).
-- Reply: per job {message key, attempt}, or {"", why it was not dispatched}.
-- Derives: context DB: job:<caller>:<id> of the jobs named in ARGV,
--   message:<caller>:<id> (fresh ids), coord:seq:message,
--   coord:idx:jobs:<status>, coord:flowmsgs:<flow> (a job's own messages: its hash's msgs), coord:events,
--   and lib_route's coord:executors, coord:script_types, queue:<type>,
--   queue:exec:<executor>, coord:prio:<queue>, context:<ctx> (its priority_age_ms,
--   read when a job has a priority), lib_ck's coord:ckrun:<key>, coord:ckheld:<key>
--   and the held jobs' hashes, coord:wakers:<queue>; DB 0 (SELECT 0, last):
--   coord:wake:msg_out, the runners' wake lists coord:wake:runner:<id>:<queue>,
--   coord:busy.

local ctx, flow, caller, now_s, now_ms, actor = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local ready_ms = ARGV[7]
if ready_ms == '' then ready_ms = nil end
local ng = tonumber(ARGV[8])
local gfirst, glast = 9, 8 + ng
local gjson = ''
local i = glast + 1
if ng > 0 then gjson = ARGV[i]; i = i + 1 end
local dag = KEYS[2] or ''
local out, pushed = {}, 0
local gspans, gids, gslots = {}, {}, {}
local ngrouped = 0
while i <= #ARGV do
  local id, grouped, nf = ARGV[i], ARGV[i + 1] == '1', tonumber(ARGV[i + 2])
  local first, last = i + 3, i + 2 + nf
  i = last + 1
  if grouped then ngrouped = ngrouped + 1 end
  local attempt, why = dispatch_job(caller, flow, dag, id, now_s, now_ms, ready_ms, actor)
  if why then
    out[#out + 1] = {'', why}
  else
    if grouped then
      gspans[#gspans + 1] = first
      gids[#gids + 1] = id
      out[#out + 1] = {'', tonumber(attempt)}
      gslots[#gslots + 1] = #out
    else
      local mk, p = route_store(caller, {unpack(ARGV, first, last)}, now_ms, nil, {K_JOB .. caller .. ':' .. id}, KEYS[1])
      track_msg(caller, id, mk)
      pushed = pushed + p
      out[#out + 1] = {mk, tonumber(attempt)}
    end
  end
end
if #gids > 0 then
  if #gids < ngrouped then
    -- Some grouped jobs were not dispatched: the list of those that were.
    local js = {}
    for k, f in ipairs(gspans) do
      js[k] = string.sub(gjson, tonumber(ARGV[f]), tonumber(ARGV[f + 1]))
    end
    gjson = '[' .. table.concat(js, ',') .. ']'
  end
  local jks = {}
  for k, id in ipairs(gids) do jks[k] = K_JOB .. caller .. ':' .. id end
  local mk, p = route_store(caller, {unpack(ARGV, gfirst, glast)}, now_ms, {'job', gjson, 'job_ids', table.concat(gids, ' ')}, jks, KEYS[1])
  track_msg(caller, gids[1], mk, flow)
  for _, n in ipairs(gslots) do out[n][1] = mk end
  pushed = pushed + p
end
route_flush(ctx)
wake_msg_out(ctx, pushed)
return out
