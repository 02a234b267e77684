-- lib_state: what the scripts that change statuses share. Every status change also
-- moves the object between the per-status indexes (coord:idx:jobs:<status>,
-- coord:idx:flows:<status>), which is what lets lists filter by status without a scan.
-- Needs lib_busy (wake_msg_out marks the context busy).

-- int formats a whole number (a Redis integer reply) as a string: Lua would format it
-- as a float (tostring, .., or a number argument of redis.call), which costs Redis
-- several times as much.
local function int(n) return string.format('%d', n) end
-- reindex moves member m of the index idx (coord:idx:jobs or coord:idx:flows) from
-- the per-status index of old to that of st, keeping its score (creation time): score
-- when given (a job's created_at_ms, the score its creation gave it in both indexes),
-- else read from idx (a ZSCORE, which costs more than the field read along with the
-- status).
local function reindex(idx, m, old, st, score)
  if old == st then return end
  score = score or rcall('ZSCORE', idx, m)
  if score then
    if old then rcall('ZREM', idx .. ':' .. old, m) end
    rcall('ZADD', idx .. ':' .. st, score, m)
  end
end
-- index_job: reindex of job m (<caller>:<id>); created its created_at_ms (nil: read
-- its score from the index).
local function index_job(m, old, st, created) reindex(K_JOB_INDEX, m, old, st, created) end
-- index_later / index_flush: index_job for the many jobs of one call (a claim's, a
-- finish's), as one ZREM and one ZADD per pair of statuses instead of two calls per
-- job. index_later records the move; index_flush, in the context's DB before the
-- script leaves it, makes the recorded moves. Only for jobs that move once in the call
-- (a job moved again before the flush would be moved out of order).
local index_moves, index_order
-- msg_next..msg_last: message ids message_reserve took for this call (none: next > last)
local msg_next, msg_last
-- msg_free: caller → its message ids and keys of msg_next..msg_last as they were when
-- message_id first took one of them for it, when all were free (keys_free: {ids, ks,
-- base: the id before the first}; false: not all, or one id left; nil: not asked yet)
local msg_free
-- msg_shared: the fields table whose items but its status (the first pair) the
-- scratch hash K_MSG_TEMPLATE holds (message_share; nil: none)
local msg_shared
-- msg_shared_st, msg_shared_more: the status and the items the scratch hash holds
-- too (message_share's st and more; nil: none)
local msg_shared_st, msg_shared_more
-- ev_later / ev_flush: the job events of one call (a submission's job.created and
-- job.dispatched, a claim's job.started, a finish's job.finished and job.failed) as two
-- stream entries, whatever their number, instead of one each (an XADD and its
-- arguments crossing from Lua were ~16k instructions an event). ev_later holds an event
-- (typ its stored type; flow, job, caller and detail strings; no status: its type's,
-- lib/store impliedStatus); ev_flush(uncapped), in the context's DB, appends the held
-- events: the first as an entry of its own (XADD *, capped when it is the call's first
-- event, as event's, unless uncapped), the others as one entry of type 'm' (lib/store
-- storedMany) whose id is the last one's, that many sequence numbers after the
-- first's: the ids between, which name no entry, are the other events' (a reader gives
-- the entry back as its events, each with its id, and one that stopped at any of them
-- reads on from there). Its fields are every job event's, in their order (a stream
-- node whose first entry it is stores the names of the next entries' fields only when
-- they differ: they were ~4k instructions and ~40 B more an event): actor (the events'
-- actor, unless a record gives its own), flow_id, job_id and caller_id empty, and
-- detail, the records, each "<type> <flow> <job> <caller> <actor length> <detail
-- length> <actor><detail>" (an actor of length 0: the entry's). Any other event of the
-- call is written after an ev_flush (a held event's id is only known when it is
-- flushed). ev_later of a job.created with a 7th argument, job.dispatched's stored
-- type, holds a submitted job's job.created and its job.dispatched (of a first
-- attempt: both details empty) as one record of type 'cd', which stands for both events and takes
-- two sequence numbers, the job.created's first (lib/store appendMany; a record was
-- ~3-5k instructions of Lua's work, its bytes appended to the entry and the AOF: a
-- submission's jobs one each instead of two); as the call's first held event, the two
-- are held as two. ev_reset: none held (state_reset). (Their state is local to a
-- block: a script's main function holds at most 200 locals.)
local ev_later, ev_flush, ev_reset
do
  -- the first held event's items; the others' records; how many; how many events
  -- they stand for (ids: a 'cd' record's two); the entry's actor
  local first, more, nmore, nids, eactor
  -- the stored type of an entry of many events (lib/store storedMany)
  local EV_MANY = 'm'
  -- lengths as strings (a number in a concatenation is formatted with "%.14g": ~1k
  -- instructions each; a library's load sees no string library to make them)
  local LEN = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15', '16', '17', '18', '19', '20', '21', '22', '23', '24', '25', '26', '27', '28', '29', '30', '31', '32', '33', '34', '35', '36', '37', '38', '39', '40', '41', '42', '43', '44', '45', '46', '47', '48', '49', '50', '51', '52', '53', '54', '55', '56', '57', '58', '59', '60', '61', '62', '63'}
  ev_reset = function() first, more, nmore, nids, eactor = nil, {}, 0, 0, nil end
  ev_later = function(typ, actor, flow, job, caller, detail, dispatched)
    -- (dispatched: job.dispatched's stored type, given by the caller: a prelude
    -- constant this library's code named would be a local more in every script's
    -- main function, and finish_jobs' is at Lua's limit of registers)
    if not first then
      first = {typ, actor, flow, job, caller, detail}
      if dispatched then ev_later(dispatched, actor, flow, job, caller, '') end
      return
    end
    if not eactor then eactor = actor end
    if actor == eactor then actor = '' end
    nmore = nmore + 1
    if dispatched then
      -- (the record type of the two: lib/store storedCreatedDispatched)
      nids = nids + 2
      more[nmore] = 'cd ' .. flow .. ' ' .. job .. ' ' .. caller .. ' ' .. (LEN[#actor] or int(#actor)) .. ' 0 ' .. actor
      return
    end
    nids = nids + 1
    more[nmore] = typ .. ' ' .. flow .. ' ' .. job .. ' ' .. caller .. ' ' .. (LEN[#actor] or int(#actor)) .. ' ' .. (LEN[#detail] or int(#detail)) .. ' ' .. actor .. detail
  end
  ev_flush = function(uncapped)
    local f = first
    if not f then return end
    local id
    if EVENTS_CAP_N or uncapped then
      id = rcall('XADD', K_EVENTS, '*', 'type', f[1], 'actor', f[2], 'flow_id', f[3], 'job_id', f[4], 'caller_id', f[5], 'detail', f[6])
    else
      id = rcall('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', f[1], 'actor', f[2], 'flow_id', f[3], 'job_id', f[4], 'caller_id', f[5], 'detail', f[6])
    end
    if nmore > 0 then
      local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
      local last
      if #seq < 15 then
        last = ms .. '-' .. int(tonumber(seq) + nids)
      else
        -- (a sequence number past what a Lua number holds exactly: the next ms's)
        last = int(tonumber(ms) + 1) .. '-' .. int(nids - 1)
      end
      rcall('XADD', K_EVENTS, last, 'type', EV_MANY, 'actor', eactor, 'flow_id', '', 'job_id', '', 'caller_id', '', 'detail', table.concat(more))
    end
    ev_reset()
  end
end
local function state_reset()
  index_moves, index_order, msg_next, msg_last, msg_free, msg_shared, msg_shared_st, msg_shared_more = {}, {}, 0, -1, {}, nil, nil, nil
  ev_reset()
end
local index_later
do
  -- last: the move the last index_later added to (of: the index_moves it is in): a
  -- call's jobs mostly move alike, and the same move again is found without its
  -- key's concatenation (~0.5k instructions a job)
  local last
  index_later = function(m, old, st, created)
    if old == st then return end
    local score = created or rcall('ZSCORE', K_JOB_INDEX, m)
    if not score then return end
    local mv = last
    if not mv or mv.of ~= index_moves or mv.old ~= old or mv.st ~= st then
      local k = (old or '') .. '\t' .. st
      mv = index_moves[k]
      if not mv then
        mv = {old = old, st = st, rem = {}, add = {}, of = index_moves}
        index_moves[k] = mv
        index_order[#index_order + 1] = k
      end
      last = mv
    end
    if old then
      local rem = mv.rem
      rem[#rem + 1] = m
    end
    local add = mv.add
    local n = #add
    add[n + 1] = score
    add[n + 2] = m
  end
end
-- call_each calls command cmd on key with the values of the list vs as its arguments,
-- in calls of up to 1,000 (unpack fails beyond ~8,000 values); step is the number of
-- values that go together (2: score and member pairs).
local function call_each(cmd, key, vs, step)
  local n = 1000 - 1000 % (step or 1)
  for i = 1, #vs, n do rcall(cmd, key, unpack(vs, i, math.min(i + n - 1, #vs))) end
end
local function index_flush()
  for _, k in ipairs(index_order) do
    local mv = index_moves[k]
    call_each('ZREM', K_JOB_INDEX .. ':' .. (mv.old or ''), mv.rem)
    call_each('ZADD', K_JOB_INDEX .. ':' .. mv.st, mv.add, 2)
  end
  index_moves, index_order = {}, {}
end
local function set_job(caller, id, st, ...)
  local jk = K_JOB .. caller .. ':' .. id
  local cur = rcall('HMGET', jk, 'status', 'created_at_ms')
  rcall('HSET', jk, 'status', st, ...)
  index_job(caller .. ':' .. id, cur[1] or nil, st, cur[2] or nil)
  return cur[1] or nil
end
local function set_flow(id, st, ...)
  local fk = K_FLOW .. id
  local old = rcall('HGET', fk, 'status')
  rcall('HSET', fk, 'status', st, ...)
  reindex(K_FLOW_INDEX, id, old, st)
  return old
end
-- event appends an event: its status only when it has one (a job event's type says
-- it: lib/store impliedStatus); the call's first event caps the stream (EVENTS_CAP:
-- EVENTS_CAP_N is set once a call caps it), the others are appended uncapped (the
-- cap's three arguments and its check cost ~2k instructions an event; the stream
-- passes the cap by one call's events at most).
local function event(typ, actor, now_ms, flow, job, caller, st, detail)
  ev_flush() -- after the events held before it (ev_later)
  flow, job, caller, detail = flow or '0', job or '0', caller or '0', detail or ''
  if (st or '') == '' then
    if EVENTS_CAP_N then
      rcall('XADD', K_EVENTS, '*', 'type', typ, 'actor', actor, 'flow_id', flow, 'job_id', job, 'caller_id', caller, 'detail', detail)
    else
      rcall('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', typ, 'actor', actor, 'flow_id', flow, 'job_id', job, 'caller_id', caller, 'detail', detail)
    end
  elseif EVENTS_CAP_N then
    rcall('XADD', K_EVENTS, '*', 'type', typ, 'actor', actor, 'flow_id', flow, 'job_id', job, 'caller_id', caller, 'status', st, 'detail', detail)
  else
    rcall('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', typ, 'actor', actor, 'flow_id', flow, 'job_id', job, 'caller_id', caller, 'status', st, 'detail', detail)
  end
end
-- dead_letter puts a job that failed for good into the context's DLQ (coord:dlq), unless
-- an actor stopped it (a stop or a cancel is a decision, not a failure).
local function dead_letter(caller, id, flow, now_ms, actor, err)
  local jk = K_JOB .. caller .. ':' .. id
  if rcall('HGET', jk, 'stop_requested') == '1' then return end
  rcall('ZADD', K_DLQ, now_ms, caller .. ':' .. id)
  rcall('HSET', jk, 'dlq_at_ms', now_ms)
  event(EV_JOB_DEAD_LETTERED, actor, now_ms, flow, id, caller, JOB_ERROR, err)
end
-- keys_free returns the ids from … to as strings and the keys prefix .. id, when none
-- of these keys exists (nil else): one EXISTS of them all (in calls of 500 keys)
-- instead of one call per key; the caller takes the strings from these lists (making
-- them again, and the garbage, cost about what the calls saved). The ids are made
-- from their tens (int, and the prefix with them, once per ten ids) and their last
-- digit (DIGIT): a string.format an id was ~1.3k instructions, a concatenation ~0.5k.
-- (DIGIT in a block of its own: a local of the library's main function is one more
-- in every script's, and finish_jobs' is at Lua's limit of 200)
local keys_free
do
local DIGIT = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}
keys_free = function(prefix, from, to)
  local ids, ks = {}, {}
  local n, tens, ptens = 0, nil, nil
  for k = from, to do
    local d = k % 10
    if d == 0 or not tens then
      local t = (k - d) / 10
      tens = t > 0 and int(t) or ''
      ptens = prefix .. tens
    end
    n = n + 1
    local c = DIGIT[d]
    ids[n] = tens .. c
    ks[n] = ptens .. c
  end
  for a = 1, #ks, 500 do
    if rcall('EXISTS', unpack(ks, a, math.min(a + 499, #ks))) > 0 then return nil end
  end
  return ids, ks
end
end
-- message_id takes a fresh message id of caller (skipping ids taken: a message that
-- came from another node, or that message.create made, may hold one) and returns it
-- and the message's key: one message_reserve took, else one INCR's. The reserved ids
-- are checked together, once per caller (keys_free; a call's ids are taken in order,
-- and nothing else of the call writes a message of them); only when one of them is
-- taken is each checked on its own.
local function message_id(caller)
  local mid
  repeat
    if msg_next <= msg_last then
      local free = msg_free[caller]
      if free == nil then
        free = false
        if msg_next < msg_last then
          local ids, ks = keys_free(K_MESSAGE .. caller .. ':', msg_next, msg_last)
          if ids then free = {ids = ids, ks = ks, base = msg_next - 1} end
        end
        msg_free[caller] = free
      end
      if free then
        local i = msg_next - free.base
        msg_next = msg_next + 1
        return free.ids[i], free.ks[i]
      end
      mid = int(msg_next)
      msg_next = msg_next + 1
    else
      mid = int(rcall('INCR', K_MESSAGE_SEQ))
    end
  until rcall('EXISTS', K_MESSAGE .. caller .. ':' .. mid) == 0
  return mid, K_MESSAGE .. caller .. ':' .. mid
end
-- message_reserve takes n message ids (coord:seq:message) for the message_id calls of
-- this call, in one INCRBY instead of an INCR each.
local function message_reserve(n)
  if n < 2 then return end
  msg_last = rcall('INCRBY', K_MESSAGE_SEQ, n)
  msg_next = msg_last - n + 1
  msg_free = {}
end
-- store_message stores a message from the table fields (field/value pairs) and, if
-- given, the field/value pairs of the table extra, under the id mid (message_id's) or
-- a fresh one, and returns its key. With st its status is st instead of the one in
-- fields, whose items must then start with the status (as the store's local messages
-- do: lib/store localMessageFields). A job message is found through its job's or
-- flow's message set (track_msg), not through coord:idx:messages (which indexes the
-- messages made with message.create).
local function store_message(caller, fields, now_ms, extra, st, mid)
  if st and fields[1] ~= 'status' then error('store_message: a status given for fields that do not start with one') end
  local mk
  if mid then mk = K_MESSAGE .. caller .. ':' .. mid else mid, mk = message_id(caller) end
  -- a copy of the shared fields (message_share), then its own and its status (a key
  -- that exists, which a fresh id never names, is written whole below instead)
  if fields == msg_shared and rcall('COPY', K_MSG_TEMPLATE, mk) == 1 then
    local kv = extra or {}
    local status = st or fields[2]
    if status ~= msg_shared_st then
      kv[#kv + 1] = 'status'
      kv[#kv + 1] = status
    end
    rcall('HSET', mk, 'id', mid, unpack(kv))
    return mk
  end
  if fields == msg_shared and msg_shared_more then
    -- written whole: with the items the scratch hash held for it
    extra = extra or {}
    for _, v in ipairs(msg_shared_more) do extra[#extra + 1] = v end
  end
  local first = 1
  if st then
    first = 3
    extra = extra or {}
    extra[#extra + 1] = 'status'
    extra[#extra + 1] = st
  end
  -- the usual sizes of extra in one HSET with the fields, without copying them
  local n = extra and #extra or 0
  if n == 0 then
    rcall('HSET', mk, 'id', mid, unpack(fields, first))
  elseif n == 2 then
    rcall('HSET', mk, 'id', mid, extra[1], extra[2], unpack(fields, first))
  elseif n == 4 then
    rcall('HSET', mk, 'id', mid, extra[1], extra[2], extra[3], extra[4], unpack(fields, first))
  elseif n == 6 then
    rcall('HSET', mk, 'id', mid, extra[1], extra[2], extra[3], extra[4], extra[5], extra[6], unpack(fields, first))
  elseif n == 8 then
    rcall('HSET', mk, 'id', mid, extra[1], extra[2], extra[3], extra[4], extra[5], extra[6], extra[7], extra[8], unpack(fields, first))
  else
    local kv = {'id', mid}
    for i = 1, n do kv[#kv + 1] = extra[i] end
    for i = first, #fields do kv[#kv + 1] = fields[i] end
    rcall('HSET', mk, unpack(kv))
  end
  return mk
end
-- message_share: the messages that store_message stores from fields (the same table,
-- whose items start with the status) after this are copied (COPY) from the scratch
-- hash K_MSG_TEMPLATE, written here with all the fields' items but the status, and
-- then given their own items and status in one HSET: a new hash's HSET looks each field
-- up in all those before it, and each item crosses from Lua to Redis, so that a
-- message's ~13 shared fields cost more than a copy of them. For calls that store
-- several messages from the same fields; message_unshare deletes the scratch hash,
-- in the context's DB, before the script ends (no one ever sees it; one that a call
-- which failed midway left, whose writes Redis does not undo, goes first). more
-- (optional): field/value items every one of these messages gets besides (its
-- caller, when the call's messages share one; the callers of store_message then
-- leave them out of their extra); st (optional): the status most of them get, which
-- the scratch hash then holds (a message of another status writes its own over it).
local function message_share(fields, more, st)
  if fields[1] ~= 'status' then error('message_share: fields that do not start with the status') end
  rcall('DEL', K_MSG_TEMPLATE)
  if not more and not st then
    rcall('HSET', K_MSG_TEMPLATE, unpack(fields, 3))
  else
    local kv = {unpack(fields, 3)}
    for _, v in ipairs(more or {}) do kv[#kv + 1] = v end
    if st then
      kv[#kv + 1] = 'status'
      kv[#kv + 1] = st
    end
    rcall('HSET', K_MSG_TEMPLATE, unpack(kv))
  end
  msg_shared, msg_shared_st, msg_shared_more = fields, st, more
end
local function message_unshare()
  if msg_shared then
    rcall('DEL', K_MSG_TEMPLATE)
    msg_shared, msg_shared_st, msg_shared_more = nil, nil, nil
  end
end
-- part_fields appends to t the field/value pairs that store the text v as field name
-- of a message, in parts of at most 64 bytes: name (the first part) and, when
-- there are more, name .. '.n' (how many parts) and name .. '.2', name .. '.3', …
-- Redis keeps a hash whose values are all that short as a listpack (its default
-- hash-max-listpack-value is 64), which costs a third of a hash table with the same
-- fields (~70 B a field); a group's job list was ~20 B a job past it (issue 49). The
-- parts are cut at any byte and read joined (read_parts, lib/store's joinParts).
-- Returns t.
local function part_fields(t, name, v)
  local n = math.ceil(#v / 64)
  t[#t + 1] = name
  t[#t + 1] = string.sub(v, 1, 64)
  if n > 1 then
    t[#t + 1] = name .. '.n'
    t[#t + 1] = int(n)
    for k = 2, n do
      t[#t + 1] = name .. '.' .. k
      t[#t + 1] = string.sub(v, (k - 1) * 64 + 1, k * 64)
    end
  end
  return t
end
-- read_parts is the text part_fields stored as a field of message mk, given its
-- first part v and its count of parts n (the field name .. '.n'; nil: v is all).
local function read_parts(mk, name, v, n)
  n = tonumber(n or '')
  if not v or not n or n < 2 then return v end
  local fs = {}
  for k = 2, n do fs[k - 1] = name .. '.' .. k end
  local ps = rcall('HMGET', mk, unpack(fs))
  for k = 1, #ps do ps[k] = ps[k] or '' end
  return v .. table.concat(ps)
end
-- wake_msg_out pushes n router wake tokens for context ctx onto coord:wake:msg_out
-- and marks the context busy (DB 0 of the server the script runs on, the context's,
-- where the routers wait on it; the script is left in DB 0, so it comes last).
local function wake_msg_out(ctx, n)
  if n <= 0 then return end
  local tokens = {}
  for i = 1, n do tokens[i] = ctx end
  rcall('SELECT', '0')
  rcall('LPUSH', K_WAKE_MSG_OUT, unpack(tokens))
  mark_busy(ctx)
end
-- track_msg records that message mk (message:<caller>:<n>, of the job's caller) is
-- about job id: a message shared by several jobs of a flow (given flow) in the flow's
-- message set (coord:flowmsgs:<flow>, its keys, deleted with the flow: one entry per
-- message however many jobs it carries), any other in the job's own hash, by its
-- number n alone in the field msgs (space-separated, deleted with the job: a set of
-- its own per job was ~90 B of a finished job's memory). fresh: the job has no
-- message yet (the field is not read).
local function track_msg(caller, id, mk, flow, fresh)
  if flow and flow ~= '0' and flow ~= '' then
    rcall('SADD', K_FLOW_MESSAGES .. flow, mk)
    return
  end
  local jk, n = K_JOB .. caller .. ':' .. id, string.sub(mk, #K_MESSAGE + #caller + 2)
  local had = not fresh and rcall('HGET', jk, 'msgs')
  if had and had ~= '' then n = had .. ' ' .. n end
  rcall('HSET', jk, 'msgs', n)
end

-- retry_node resets a failed or cancelled node of a flow's DAG dag for its retry
-- (retry_flow, flow_retry_chunk): a fresh attempt, its job's fields of the last run
-- cleared and its DLQ entry removed; ready (its job dispatched) when its dependencies
-- (its job's dependends; a DAG of an earlier version also copied them, p:) are all
-- completed, else pending. It returns true when the node is ready.
local function retry_node(dag, caller, id, now_s, now_ms)
  local remaining = 0
  local jk = K_JOB .. caller .. ':' .. id
  local deps = rcall('HGET', dag, 'p:' .. id) or rcall('HGET', jk, 'dependends') or ''
  local ok, list = pcall(cjson.decode, deps)
  if not ok or type(list) ~= 'table' then list = {} end
  for _, d in ipairs(list) do
    local ds = rcall('HGET', dag, 's:' .. tostring(d)) -- none: completed (lib_complete)
    if ds and ds ~= NODE_COMPLETED then remaining = remaining + 1 end
  end
  rcall('HDEL', dag, 'e:' .. id, 'due:' .. id)
  rcall('HDEL', jk, 'result_json', 'error', 'exit_code', 'fatal', 'stop_requested', 'dlq_at_ms', 'retry_after_ms', 'attempt',
    'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms', 'started_at_us', 'finished_at_us', 'dispatched_at_ms')
  rcall('ZREM', K_DLQ, caller .. ':' .. id)
  if remaining == 0 then
    -- ready: no r: (absent, none left), which would outlive the node's completion
    rcall('HSET', dag, 's:' .. id, NODE_READY, 'a:' .. id, 0)
    rcall('HDEL', dag, 'r:' .. id)
    set_job(caller, id, JOB_DISPATCHED, 'updated_at', now_s, 'ready_at_ms', now_ms, 'result', '{}')
    return true
  end
  rcall('HSET', dag, 's:' .. id, NODE_PENDING, 'r:' .. id, remaining, 'a:' .. id, 0)
  set_job(caller, id, JOB_WAITING_FOR_PREREQUISITES, 'updated_at', now_s, 'result', '{}')
  return false
end
