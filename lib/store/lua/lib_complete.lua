-- lib_complete: the end of a run applied to what it belongs to.
--
--   - complete(dag, fk, rk, ek, ctx, flow, caller, now_s, now_ms, actor, retention_ms,
--     id, attempt, status, err, fatal, retries, backoff, result, finished_ms), in the
--     context's DB: applies the end of job id (attempt, status, error, fatal, retries:
--     -1 the job's own, backoff in ms; result and finished_ms: the job's result and end
--     time when the caller has just written them, nil: read from the job) to its
--     flow's DAG (dag, fk: flow:<flow>, rk: coord:flowres:<flow>, ek: coord:events):
--     the node completes (its result into the flow's result map, its
--     dependents whose dependencies are all done get ready), or fails (a retry is
--     scheduled while attempts are left, else the node fails, its job goes to the DLQ
--     and its transitive dependents that have not run are cancelled). The flow ends
--     (finalize) when every node is final. Returns {code, flow status or "", retry due
--     (ms), ready job ids…}: code 0 nothing changed (a stale or repeated end; for a
--     repeated success, the node's dependents still ready, which its first report's
--     caller may have died before it dispatched them), 1 applied, 2 retry scheduled;
--     and, a second value, how many nodes a failure's cascade cancelled in this call
--     (0 else; a caller that wants the first value only takes it alone).
--     A node of more than RELEASE_CHUNK dependents releases its first RELEASE_CHUNK
--     here and leaves the others to release_dependents (release_later); a failure
--     whose cancel reaches more than CASCADE_CHUNK nodes leaves the others to
--     flow_cascade_chunk (cascade).
--     Leaves the script in the context's DB.
--   - complete_many(dag, fk, rk, ek, ctx, flow, caller, now_s, now_ms, actor,
--     retention_ms, ends, fin, ready): complete for the successful ends of one flow
--     (ends: a flat list, id, attempt (as stored, a string), result each; all ending
--     at fin, ms), the flow's work once for
--     all (see below). Appends the dependents made ready to ready; returns how many
--     ends it applied and the flow's status when it ended (else "").
--   - standalone_end(jk, ek, ctx, caller, id, attempt, status, err, fatal, retries,
--     backoff, now_s, now_ms, actor, retention_ms): the same for a job of no flow (jk:
--     its hash): a retry while attempts are left; else a failed job goes to the DLQ,
--     the job's retention starts (context:<ctx>.retention_seconds wins over
--     retention_ms) and its waiters are told (coord:jobdone). Returns {code, "", retry
--     due (ms)}. Leaves the script in the context's DB.
-- Derives: as complete.lua and standalone_done.lua. Needs lib_state and lib_finalize.

-- (A flow's jobs are not published on coord:jobdone one by one: a client waits for the
-- flow, whose end finalize publishes on coord:flowdone.)

-- retry_decide is lib/retry's Decide, the one set of rules (and its examples test
-- this copy: lib/store TestRetryDecideMatchesThePolicy): after a failed attempt
-- (attempt, from 1), the delay (ms) of the retry, or nil when the job fails: a fatal
-- end or a stop request fails it; else it is retried while attempt <= retries, after
-- the run's own retry_after (ms, when > 0), else after backoff (the scheduler's
-- retry.Policy, passed in as an argument).
local function retry_decide(succeeded, attempt, retries, fatal, stop, retry_after, backoff)
  if succeeded or fatal or stop or attempt > retries then return nil end
  if retry_after and retry_after > 0 then return retry_after end
  return backoff
end
-- cascade cancels the nodes of the queue (qd[k], a node of the flow reached from
-- failed node qo[k]) that have not run (pending or ready), and queues their
-- dependents in turn (breadth first): the transitive dependents of failed nodes. It
-- examines at most CASCADE_CHUNK items; those left go onto the flow's cascade list
-- (coord:cascade:<flow>, "<node> <failed node>" each), for flow_cascade_chunk calls;
-- with wake, the scheduler is asked to make them at once (coord:due's member
-- cascade:<ctx>:<flow>:<caller>:0, due now, and a wake on coord:delayedwake). Returns
-- the DAG's terminal count after its last cancel (nil: it cancelled none) and how many
-- nodes it cancelled (the scheduler counts them as cancelled ends, without reading the
-- DAG). Leaves the script in the context's DB.
local function cascade(dag, ek, ctx, flow, caller, qd, qo, actor, now_s, now_ms, maxlen, wake)
  local terminal
  local n = 0
  local i = 1
  while i <= #qd and i <= CASCADE_CHUNK do
    local d, origin = qd[i], qo[i]
    i = i + 1
    local ds = rcall('HGET', dag, 's:' .. d)
    if ds == NODE_PENDING or ds == NODE_READY then
      local reason = 'cancelled: job ' .. origin .. ' failed'
      rcall('HSET', dag, 's:' .. d, NODE_CANCELLED, 'e:' .. d, reason)
      rcall('HDEL', dag, 'due:' .. d)
      rcall('HINCRBY', dag, 'cancelled', '1')
      terminal = rcall('HINCRBY', dag, 'terminal', '1')
      n = n + 1
      set_job(caller, d, JOB_ERROR, 'error', reason, 'updated_at', now_s)
      rcall('XADD', ek, 'MAXLEN', '~', maxlen, '*', 'type', EV_JOB_CANCELLED, 'actor', actor, 'flow_id', flow, 'job_id', d, 'caller_id', caller, 'status', JOB_ERROR, 'detail', reason)
      for _, x in ipairs(cjson.decode(rcall('HGET', dag, 'd:' .. d) or '[]')) do
        qd[#qd + 1] = int(x)
        qo[#qo + 1] = origin
      end
    end
  end
  if i <= #qd then
    local left = {}
    for k = i, #qd do left[#left + 1] = qd[k] .. ' ' .. qo[k] end
    call_each('RPUSH', K_FLOW_CASCADE .. flow, left)
    if not wake then return terminal, n end
    rcall('SELECT', '0')
    rcall('ZADD', K_DUE, now_ms, 'cascade:' .. ctx .. ':' .. flow .. ':' .. caller .. ':0')
    rcall('PUBLISH', K_DELAYED_WAKE, now_ms)
    rcall('SELECT', ctx)
  end
  return terminal, n
end
-- complete and complete_many, and what only they use, in a block: the library's top
-- level holds its locals and the claim's tables near Lua's register limit (a chunk's
-- locals and a table constructor's items share 250 registers).
local complete, complete_many
do
-- RESULTS_SPREAD: a flow of more nodes than this keeps its running results
-- (coord:flowres:<flow>) as a hash table from its first ends applied together on: the
-- hash gets the field RESULTS_MARK, whose value is longer than the 64 bytes a
-- listpack's values may hold (hash-max-listpack-value), which makes Redis convert it.
-- As a listpack (up to 512 fields, hash-max-listpack-entries) each result written was
-- a scan of all those before it (~20k instructions a job of a flow of 1,000 jobs;
-- docs/benchmarks.md); a hash table's field is ~70 B more, for as long as the flow
-- runs. The mark goes with the flow's first completions (its DAG's completed count
-- moved from 0: no command more); a flow whose results were written again (a retry)
-- keeps them as Redis does. No result's name is the mark's (a result's is
-- "<job id>.<key>"); its readers leave it out (lib_finalize's finalize, lib/store
-- LoadFlow).
local RESULTS_SPREAD = 64
local RESULTS_MARK = '~'
local RESULTS_MARK_VALUE = 'a hash table, not a listpack: no result (lib_complete RESULTS_SPREAD)'
-- results_first: the result items to start with for a flow of total nodes whose
-- completed count was done before these completions: the mark, or nil.
local function results_first(total, done)
  if done == 0 and (tonumber(total) or 0) > RESULTS_SPREAD then return {RESULTS_MARK, RESULTS_MARK_VALUE} end
  return nil
end
-- release makes ready the dependents deps[from..to] of a node completed at fin (ms)
-- whose dependencies are now all completed (their count r: reaches 0: the field goes,
-- read as 0, a field less per node of a big flow kept), appending their ids to out.
local function release(dag, caller, deps, from, to, fin, now_s, out)
  for i = from, to do
    local d = int(deps[i])
    local r = rcall('HINCRBY', dag, 'r:' .. d, -1)
    if r <= 0 and rcall('HGET', dag, 's:' .. d) == NODE_PENDING then
      rcall('HSET', dag, 's:' .. d, NODE_READY)
      rcall('HDEL', dag, 'r:' .. d)
      set_job(caller, d, JOB_DISPATCHED, 'ready_at_ms', fin, 'updated_at', now_s)
      out[#out + 1] = d
    end
  end
end
-- release_later records that a node's dependents after the first `done` are left to
-- release_dependents calls (rel:<id> "<done> <fin>" in the DAG hash), which the
-- scheduler makes at once: coord:due's member release:<ctx>:<flow>:<caller>:<id>, due
-- now, and a wake on coord:delayedwake. A node of many dependents is so released in
-- calls of up to 1,000 (lib/store's releaseBatch), never all in one call.
local function release_later(dag, ctx, flow, caller, id, done, fin, now_ms)
  rcall('HSET', dag, 'rel:' .. id, done .. ' ' .. fin)
  rcall('SELECT', '0')
  rcall('ZADD', K_DUE, now_ms, 'release:' .. ctx .. ':' .. flow .. ':' .. caller .. ':' .. id)
  rcall('PUBLISH', K_DELAYED_WAKE, now_ms)
  rcall('SELECT', ctx)
end
-- result_fields appends a run's result (res, its string map's JSON) to kv as the
-- flow's result map holds it (<id>.<key> -> value, a value not a string as JSON),
-- writing kv to rk when it holds 400 items (unpack's stack limit); kv nil: a table
-- made when there is a result. Returns kv.
local function result_fields(rk, kv, id, res)
  if not res or res == '' or res == '{}' then return kv end
  local ok, m = pcall(cjson.decode, res)
  if not ok or type(m) ~= 'table' then return kv end
  kv = kv or {}
  for f, x in pairs(m) do
    if type(x) ~= 'string' then x = cjson.encode(x) end
    kv[#kv + 1] = id .. '.' .. f
    kv[#kv + 1] = x
    if #kv >= 400 then rcall('HSET', rk, unpack(kv)); kv = {} end
  end
  return kv
end
-- settle releases the dependents of node id completed at fin (d: their JSON list, or
-- nil), the first RELEASE_CHUNK here (appended to out when made ready), the others
-- by release_later. Issue 49, memory: a completed node whose dependents are all
-- released leaves the DAG hash, its status (s:), its attempt (a:, which its job's
-- attempt equals) and its dependents (d:), a table entry each (~70-100 B) per node of
-- a big flow kept: a node of a started flow without a status is completed (every
-- reader says so: complete, the cascades and cancels, which change only pending,
-- ready and dispatched nodes, a retry's count of a node's dependencies left,
-- lib/store's LoadDAG and LoadDAGNodes). Its dependents go to its job's listpack
-- (~25 B), where flow.dag's pages and a repeated success read them. Those fields are
-- deleted here, or appended to gone (when given) for one HDEL of many nodes. A node
-- whose dependents past RELEASE_CHUNK are left to release_dependents keeps all three
-- (that script reads its d:).
local function settle(dag, ctx, flow, caller, id, d, fin, now_s, now_ms, out, gone)
  if d then
    local deps = cjson.decode(d)
    local last = math.min(#deps, RELEASE_CHUNK)
    release(dag, caller, deps, 1, last, fin, now_s, out)
    if #deps > last then
      rcall('HSET', dag, 's:' .. id, NODE_COMPLETED)
      release_later(dag, ctx, flow, caller, id, last, fin, now_ms)
      return
    end
    rcall('HSET', K_JOB .. caller .. ':' .. id, 'dependents', d)
  end
  -- (d: only when the node had dependents: the caller read it, absent, else)
  if gone then
    local n = #gone
    gone[n + 1], gone[n + 2], gone[n + 3] = 's:' .. id, 'a:' .. id, 'r:' .. id
    if d then gone[n + 4] = 'd:' .. id end
  elseif d then
    rcall('HDEL', dag, 's:' .. id, 'a:' .. id, 'd:' .. id, 'r:' .. id)
  else
    rcall('HDEL', dag, 's:' .. id, 'a:' .. id, 'r:' .. id)
  end
end
complete = function(dag, fk, rk, ek, ctx, flow, caller, now_s, now_ms, actor, retention_ms, id, attempt, status, err, fatal, retries, backoff, result, finished_ms)
local maxlen = EVENTS_CAP()
local jk = K_JOB .. caller .. ':' .. id
local node = rcall('HMGET', dag, 's:' .. id, 'a:' .. id, 'd:' .. id, 'total', 'starting')
local s = node[1]
if not s then
  -- A node of a started flow without a status is completed: its completion removed
  -- it (below). None: no DAG, or a start still writing its nodes.
  if not node[4] or node[5] then return {0, '', 0} end
  s = NODE_COMPLETED
end
-- A completed node's attempt and dependents are its job's (its a: and d: moved there
-- at its completion: see below), unless its dependents are still being released.
if s == NODE_COMPLETED and not node[2] then
  local jv = rcall('HMGET', jk, 'attempt', 'dependents')
  node[2], node[3] = node[2] or jv[1], node[3] or jv[2]
end
if s == NODE_COMPLETED and status == JOB_FINISHED and attempt == tonumber(node[2] or '0') then
  -- The same success again: its first report's caller may have died after this
  -- completion and before it dispatched the dependents it made ready. Those still
  -- ready come back for this caller to dispatch (a dispatch of a node no longer ready
  -- changes nothing), instead of waiting for the scheduler's safety sweep.
  local out = {0, '', 0}
  local deps = cjson.decode(node[3] or '[]')
  for i = 1, math.min(#deps, RELEASE_CHUNK) do -- the later ones: release_dependents'
    local d = int(deps[i])
    if rcall('HGET', dag, 's:' .. d) == NODE_READY then out[#out + 1] = d end
  end
  return out
end
if s == NODE_COMPLETED or s == NODE_FAILED or s == NODE_CANCELLED or s == NODE_PENDING or s == NODE_READY then return {0, '', 0} end
local a = tonumber(node[2] or '0')
if attempt ~= a then return {0, '', 0} end
local out = {1, '', 0}
local terminal
local cancelled = 0 -- the nodes a failure's cascade cancelled in this call
if status == JOB_FINISHED then
  -- a success reads only the result and the end time, which a caller that has just
  -- written them passes (the finish: a read of six fields, half of them misses, less)
  local res, fin = result, finished_ms
  if not fin then
    -- the end in ms: its µs (a run's end) less three digits, else as another writer
    -- stored it (finished_at_ms: a remote node's result, an older version)
    local jf = rcall('HMGET', jk, 'result', 'finished_at_us')
    res, fin = jf[1], jf[2] and string.sub(jf[2], 1, -4)
    if not fin then fin = rcall('HGET', jk, 'finished_at_ms') or now_ms end
  end
  local done = rcall('HINCRBY', dag, 'completed', '1')
  terminal = rcall('HINCRBY', dag, 'terminal', '1')
  local kv = result_fields(rk, results_first(node[4], done - 1), id, res)
  if kv and #kv > 0 then rcall('HSET', rk, unpack(kv)) end
  settle(dag, ctx, flow, caller, id, node[3], fin, now_s, now_ms, out, nil)
else
  local jf = rcall('HMGET', jk, 'retries', 'stop_requested', 'fatal', 'retry_after_ms')
  if retries < 0 then retries = tonumber(jf[1] or '0') or 0 end
  local delay = retry_decide(false, a, retries, fatal or jf[3] == '1', jf[2] == '1', tonumber(jf[4] or ''), backoff)
  if delay then
    if jf[4] then rcall('HDEL', jk, 'retry_after_ms') end
    backoff = delay
    local due = tonumber(now_ms) + backoff
    rcall('HSET', dag, 's:' .. id, NODE_READY, 'due:' .. id, due, 'e:' .. id, err)
    rcall('XADD', ek, 'MAXLEN', '~', maxlen, '*', 'type', EV_JOB_RETRIED, 'actor', actor, 'flow_id', flow, 'job_id', id, 'caller_id', caller, 'status', JOB_ERROR,
      'detail', 'attempt ' .. a .. ' failed: ' .. err .. '; attempt ' .. (a + 1) .. ' in ' .. backoff .. ' ms')
    rcall('SELECT', '0')
    rcall('ZADD', K_DUE, due, 'retry:' .. ctx .. ':' .. flow .. ':' .. caller .. ':' .. id)
    rcall('SELECT', ctx) -- the next end of this call is in the context's DB
    return {2, '', due}
  end
  terminal = rcall('HINCRBY', dag, 'terminal', '1')
  if rcall('HGET', fk, 'cancelled_by') then
    -- the flow was cancelled: this is one of the running jobs it stopped
    rcall('HSET', dag, 's:' .. id, NODE_CANCELLED, 'e:' .. id, rcall('HGET', fk, 'error') or err)
    rcall('HINCRBY', dag, 'cancelled', '1')
  else
    rcall('HSET', dag, 's:' .. id, NODE_FAILED, 'e:' .. id, err)
    rcall('HINCRBY', dag, 'failed', '1')
    if not rcall('HGET', fk, 'failed_job') then
      rcall('HSET', fk, 'failed_job', id, 'error', 'job ' .. id .. ' failed: ' .. err, 'updated_at', now_s)
    end
    dead_letter(caller, id, flow, now_ms, actor, err)
  end
  -- Cancel the transitive dependents that have not run (CASCADE_CHUNK of them here,
  -- the others by flow_cascade_chunk calls).
  local qd, qo = {}, {}
  for k, x in ipairs(cjson.decode(rcall('HGET', dag, 'd:' .. id) or '[]')) do
    qd[k] = int(x)
    qo[k] = id
  end
  local t
  t, cancelled = cascade(dag, ek, ctx, flow, caller, qd, qo, actor, now_s, now_ms, maxlen, true)
  terminal = t or terminal
end
if terminal >= tonumber(node[4]) then
  out[2] = finalize(dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor, retention_ms)
end
return out, cancelled
end
-- complete_many applies the successful ends of runs of one flow (ends: id, attempt,
-- result each, flat: no table an end; the attempt the job's as stored, the result the
-- string map's JSON its run wrote; fin their end, ms) as
-- complete would, one by one, with the flow's work done once for all: one read of the
-- nodes, the completed and terminal counts moved once, the results in one HSET, the
-- completed nodes' fields gone in one HDEL, and the flow's end (finalize) checked once.
-- An end whose node is not running that attempt (a stale or repeated end) goes through
-- complete alone. Appends the dependents made ready to ready; returns how many ends it
-- applied and the flow's status when it ended here (else ""). No events but finalize's
-- (event(), after the held ones). Leaves the script in the context's DB.
complete_many = function(dag, fk, rk, ek, ctx, flow, caller, now_s, now_ms, actor, retention_ms, ends, fin, ready)
  local m = #ends / 3
  if m == 1 then -- (one end: complete's own work, without the tables for many)
    local r = complete(dag, fk, rk, ek, ctx, flow, caller, now_s, now_ms, actor, retention_ms, ends[1], tonumber(ends[2]), JOB_FINISHED, '', false, 0, 0, ends[3], fin)
    for j = 4, #r do ready[#ready + 1] = r[j] end
    if r[1] == 1 then return 1, r[2] end
    return 0, r[2]
  end
  local fields = {'total', 'starting'}
  for k = 1, m do
    local id = ends[3 * k - 2]
    fields[3 * k], fields[3 * k + 1], fields[3 * k + 2] = 's:' .. id, 'a:' .. id, 'd:' .. id
  end
  local v = rcall('HMGET', dag, unpack(fields))
  local fstatus, applied = '', 0
  local fast, other = {}, {}
  for k = 1, m do
    local s = v[3 * k]
    -- the attempts as stored (whole numbers, as the dispatch wrote both): one spelled
    -- otherwise goes through complete, which compares their values
    if s and s ~= NODE_COMPLETED and s ~= NODE_FAILED and s ~= NODE_CANCELLED and s ~= NODE_PENDING and s ~= NODE_READY
      and ends[3 * k - 1] == (v[3 * k + 1] or '0') then
      fast[#fast + 1] = k
    else
      other[#other + 1] = k
    end
  end
  for _, k in ipairs(other) do
    local r = complete(dag, fk, rk, ek, ctx, flow, caller, now_s, now_ms, actor, retention_ms, ends[3 * k - 2], tonumber(ends[3 * k - 1]), JOB_FINISHED, '', false, 0, 0, ends[3 * k], fin)
    for j = 4, #r do ready[#ready + 1] = r[j] end
    if r[2] ~= '' then fstatus = r[2] end
    if r[1] == 1 then applied = applied + 1 end
  end
  if #fast == 0 then return applied, fstatus end
  local n = int(#fast)
  local done = rcall('HINCRBY', dag, 'completed', n)
  local terminal = rcall('HINCRBY', dag, 'terminal', n)
  local kv, gone = results_first(v[1], done - #fast), {}
  for _, k in ipairs(fast) do
    local id = ends[3 * k - 2]
    kv = result_fields(rk, kv, id, ends[3 * k])
    settle(dag, ctx, flow, caller, id, v[3 * k + 2], fin, now_s, now_ms, ready, gone)
  end
  if kv and #kv > 0 then rcall('HSET', rk, unpack(kv)) end
  if #gone > 0 then call_each('HDEL', dag, gone) end
  applied = applied + #fast
  if terminal >= tonumber(v[1]) then
    fstatus = finalize(dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor, retention_ms)
  end
  return applied, fstatus
end
end
local function standalone_end(jk, ek, ctx, caller, id, attempt, status, err, fatal, retries, backoff, now_s, now_ms, actor, retention_ms)
  -- What the end depends on, in one read of the job.
  local cur = rcall('HMGET', jk, 'retries', 'stop_requested', 'fatal', 'attempt', 'done_attempt', 'retry_after_ms')
  if retries < 0 then retries = tonumber(cur[1] or '0') or 0 end
  local a = tonumber(cur[4] or '0')
  if a ~= attempt then return {0, '', 0} end
  local as = int(a)
  if cur[5] == as then return {0, '', 0} end
  rcall('HSET', jk, 'done_attempt', as)
  local delay = retry_decide(status == JOB_FINISHED, a, retries, fatal or cur[3] == '1', cur[2] == '1', tonumber(cur[6] or ''), backoff)
  if delay then
    if cur[6] then rcall('HDEL', jk, 'retry_after_ms') end
    backoff = delay
    local due = tonumber(now_ms) + backoff
    rcall('XADD', ek, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_JOB_RETRIED, 'actor', actor, 'job_id', id, 'caller_id', caller, 'status', JOB_ERROR,
      'detail', 'attempt ' .. a .. ' failed: ' .. err .. '; attempt ' .. (a + 1) .. ' in ' .. backoff .. ' ms')
    rcall('SELECT', '0')
    rcall('ZADD', K_DUE, due, 'retry:' .. ctx .. ':0:' .. caller .. ':' .. id)
    rcall('SELECT', ctx)
    return {2, '', due}
  end
  if status ~= JOB_FINISHED then dead_letter(caller, id, '0', now_ms, actor, err) end
  local keep = tonumber(rcall('HGET', K_CONTEXT .. ctx, 'retention_seconds') or '0') or 0
  if keep > 0 then retention_ms = keep * 1000 end
  rcall('SELECT', '0')
  if retention_ms > 0 then
    rcall('ZADD', K_EXPIRE, int(tonumber(now_ms) + retention_ms), ctx .. ':job:' .. caller .. ':' .. id)
  end
  rcall('PUBLISH', K_JOB_DONE, ctx .. ':' .. caller .. ':' .. id)
  rcall('SELECT', ctx)
  return {1, '', 0}
end
