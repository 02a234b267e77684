-- dispatch: sends ready nodes of a flow (or one standalone job) on their way. For each
-- job it checks the node is ready (and its retry due), marks node and job dispatched and
-- records the event; a job of its own gets its message stored at once; the group's jobs
-- share one message (job_ids: the ids of the jobs dispatched, in parts of at most 64
-- bytes: lib_state's part_fields; its job list is made from them when it is read),
-- stored after them. A
-- message whose jobs a runner of this node can take (lib_route) is routed here, as the
-- router's claim would: acknowledged, its jobs pushed onto their queues with the
-- runners' wake tokens; any other is pushed on msg_out for the router, one wake token
-- per message. A local request message
-- names its jobs (ids only, field job_ref "1"; lib/store's msgref.go) and stores no
-- nodes: readers get both from the jobs' hashes.
--
-- A dlq.requeue of a standalone job (requeue) resets it for a fresh run first
-- (lib_requeue), only while it is in the DLQ, and dispatches it in the same step.
--
-- A standalone job released by the scheduler when it falls due (a delayed job.submit)
-- is dispatched only while it is still scheduled, and leaves coord:delayed in the same
-- step: of two schedulers that release it, the second changes nothing, and a job
-- stopped (cancelled) before is never dispatched.
--
-- KEYS:
--   msg_out  msg_out
--   dag?     coord:dag:<flow>; for a standalone job, coord:delayed when the call is a
--            release of delayed jobs (DB 0; not given for any other standalone job)
-- ARGV:
--   ctx       int     the context id
--   flow      int     the flow id (0: a standalone job)
--   caller    int     the caller id
--   now_s     int     now (s)
--   now_ms    int     now (ms)
--   actor     string  who dispatches
--   ready_ms  string  the start time (ms) of the flow whose start found these nodes
--                     ready ("": nodes made ready since; see DispatchStarted)
--   requeue   bool    standalone jobs out of the DLQ (dlq.requeue): each reset first
--   group     []raw   field/value items of a group message (none: no group; all but
--                     its id and job_ids)
--   jobs      []job   the jobs
--     id       int    the job id
--     grouped  bool   it goes in the group message (else a message of its own)
--     items    []raw  a message of its own's field/value items (none for the group's)
-- Libs: lib_busy lib_state lib_wake lib_ck lib_route lib_dispatch lib_requeue
-- Reply: flat[]dispatched  per job, in order (a table a job cost ~5k instructions)
--   msg      string  its message key, or "" when it was not dispatched
--   attempt  string  its attempt (a number's text), or why it was not dispatched (a
--                    release: its status when not scheduled, or "not due"; a
--                    requeue: why it is not in the DLQ)
-- Derives: context DB: job:<caller>:<id> of the jobs named in the arguments,
--   message:<caller>:<id> (fresh ids), coord:seq:message,
--   coord:idx:jobs:<status>, coord:flowmsgs:<flow> (a job's own messages: its hash's msgs), coord:events,
--   and lib_route's coord:executors, coord:script_types, queue:<type>,
--   queue:exec:<executor>, coord:prio:<queue>, context:<ctx> (its priority_age_ms,
--   read when a job has a priority), lib_ck's coord:ckrun:<key>, coord:ckheld:<key>
--   and the held jobs' hashes, coord:wakers:<queue>; DB 0 (SELECT 0, last):
--   coord:wake:msg_out, the runners' wake lists coord:wake:runner:<id>:<queue>,
--   coord:busy, and a release's coord:delayed (KEYS[2]); a requeue's coord:dlq and
--   (DB 0) coord:expire.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local caller = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local actor = ARGV[6]
local ready_ms = ARGV[7]
local requeue = ARGV[8] == '1'
local argi = 9
local group
local n_group = tonumber(ARGV[argi])
if n_group <= 7000 then group = {unpack(ARGV, argi + 1, argi + n_group)} else group = {}; for k = 1, n_group do group[k] = ARGV[argi + k] end end
argi = argi + 1 + n_group
local jobs
local n_jobs = tonumber(ARGV[argi])
jobs = {}
argi = argi + 1
for k = 1, n_jobs do
  local e_jobs = {id = ARGV[argi], grouped = ARGV[argi + 1] == '1', items = false}
  argi = argi + 2
  local n_e_jobs_items = tonumber(ARGV[argi])
  if n_e_jobs_items <= 7000 then e_jobs.items = {unpack(ARGV, argi + 1, argi + n_e_jobs_items)} else e_jobs.items = {}; for k = 1, n_e_jobs_items do e_jobs.items[k] = ARGV[argi + k] end end
  argi = argi + 1 + n_e_jobs_items
  jobs[k] = e_jobs
end
-- luagen: end of the prologue

if ready_ms == '' then ready_ms = nil end
local dag = KEYS[2] or ''
local delayed, released, requeued = '', {}, {}
if flow == '0' and dag ~= '' then delayed, dag = dag, '' end
-- release_check: why a delayed job is not released now (nil: it is).
local function release_check(id)
  local h = rcall('HMGET', K_JOB .. caller .. ':' .. id, 'status', 'run_at_ms')
  if h[1] ~= JOB_SCHEDULED then
    released[#released + 1] = ctx .. ':job:' .. caller .. ':' .. id
    return h[1] or 'job missing'
  elseif tonumber(h[2] or '0') > tonumber(now_ms) then
    return 'not due'
  end
  released[#released + 1] = ctx .. ':job:' .. caller .. ':' .. id
end
local out, pushed = {}, 0
local gids, gslots = {}, {}
for _, j in ipairs(jobs) do
  local id, grouped = j.id, j.grouped
  local attempt, why
  if delayed ~= '' then why = release_check(id) end
  if requeue and flow == '0' then
    why = requeue_reset(caller, id, actor, now_s, now_ms)
    if not why then requeued[#requeued + 1] = ctx .. ':job:' .. caller .. ':' .. id end
  end
  if not why then attempt, why = dispatch_job(caller, flow, dag, id, now_s, now_ms, ready_ms, actor) end
  local n = #out
  if why then
    out[n + 1], out[n + 2] = '', why
  else
    if grouped then
      gids[#gids + 1] = id
      out[n + 1], out[n + 2] = '', attempt -- (its key, the group message's: below)
      gslots[#gslots + 1] = n + 1
    else
      local mk, p = route_store(caller, j.items, now_ms, nil, {K_JOB .. caller .. ':' .. id}, KEYS[1])
      track_msg(caller, id, mk)
      pushed = pushed + p
      out[n + 1], out[n + 2] = mk, attempt
    end
  end
end
if #gids > 0 then
  local jks = {}
  for k, id in ipairs(gids) do jks[k] = K_JOB .. caller .. ':' .. id end
  -- its jobs by their ids alone (job_ids, in parts: part_fields), which are what its
  -- job list held with the message's caller and flow (lib/store's MessageFromHash
  -- makes the list from them)
  local mk, p = route_store(caller, group, now_ms, part_fields({}, 'job_ids', table.concat(gids, ' ')), jks, KEYS[1])
  track_msg(caller, gids[1], mk, flow)
  for _, n in ipairs(gslots) do out[n] = mk end
  pushed = pushed + p
end
ev_flush() -- the job.dispatched events (lib_dispatch), before any a push writes
route_flush(ctx)
wake_msg_out(ctx, pushed)
if #released > 0 or #requeued > 0 then
  rcall('SELECT', '0')
  if #released > 0 then rcall('ZREM', delayed, unpack(released)) end
  if #requeued > 0 then rcall('ZREM', K_EXPIRE, unpack(requeued)) end -- (their retention: they run again)
end
return out
