-- lib_dispatch: a job's dispatch, for the scripts that dispatch (dispatch, and
-- finish_jobs when it completes a run's flow node itself; both send the request
-- messages with lib_route's route_store).
--
--   - dispatch_job(caller, flow, dag, id, now_s, now_ms, ready_ms, actor), in the
--     context's DB: checks that job id (of flow flow, its DAG at key dag; dag "": a
--     standalone job) can be dispatched (its node ready and its retry due, its flow
--     not paused: the field paused of the DAG hash; a standalone job not started or
--     finished, and in no flow: one a flow.create claimed meanwhile runs with its
--     flow), then marks node and job dispatched (attempt + 1;
--     ready_ms, when not nil, is its ready time: a node ready at its flow's start) and
--     records the event (lib_state's ev_later: the caller's ev_flush appends it). A
--     node of a flow held (the DAG's hold: a cancel or a retry in
--     chunks under way) stays ready: the cancel cancels it, the retry's end dispatches
--     it. Returns the attempt (a string), or nil and why not. It reads the job's
--     status, its creation time (its indexes' score: no ZSCORE) and the fields its
--     routing reads in one HMGET, and gives the latter to lib_route (route_seen: the
--     route_store that sends the job reads none again); a node's attempt is read
--     with its status and written with it (no HINCRBY).
--   - node_why(s, due, paused, hold, now_ms): why a flow's node cannot be dispatched
--     now (nil: it can), from its DAG fields s:, due: and the DAG's paused and hold;
--     dispatch_job's rule, which lib_start's dispatch_ready applies to many nodes.
-- Needs lib_state and lib_route.

local function node_why(s, due, paused, hold, now_ms)
  if s ~= NODE_READY then
    return s or 'no node'
  elseif due and tonumber(due) > tonumber(now_ms) then
    return 'not due'
  elseif paused then
    return 'paused' -- flow.pause: the node stays ready; flow.resume dispatches it
  elseif hold then
    return 'held' -- a cancel or a retry in chunks under way
  end
  return nil
end

local function dispatch_job(caller, flow, dag, id, now_s, now_ms, ready_ms, actor)
  local jk = K_JOB .. caller .. ':' .. id
  local attempt
  -- its creation time, then its status and the route fields but the id (the status
  -- in its place says the job exists: lib_route's route_seen)
  local v = rcall('HMGET', jk, 'created_at_ms', 'status', unpack(route_fields(), 2))
  local jst = v[2]
  if not jst then
    return nil, 'job missing'
  elseif dag ~= '' then
    local node = rcall('HMGET', dag, 's:' .. id, 'due:' .. id, 'paused', 'hold', 'a:' .. id)
    local due = node[2]
    local why = node_why(node[1], due, node[3], node[4], now_ms)
    if why then return nil, why end
    attempt = '1' -- (a node's first: no number made)
    if node[5] then attempt = int((tonumber(node[5]) or 0) + 1) end
    rcall('HSET', dag, 's:' .. id, NODE_DISPATCHED, 'a:' .. id, attempt)
    if due then rcall('HDEL', dag, 'due:' .. id) end
  elseif jst == JOB_STARTED or jst == JOB_FINISHED then
    return nil, jst
  else
    -- a job a flow claimed (flow.create, after the caller's own check) runs with it
    local fl = rcall('HGET', jk, 'flow_id')
    if fl and fl ~= '' and fl ~= '0' then return nil, 'of flow ' .. fl end
    attempt = int(rcall('HINCRBY', jk, 'attempt', '1'))
  end
  route_seen(jk, v)
  if ready_ms then
    -- A node ready at its flow's start: the start left its job to this dispatch.
    rcall('HSET', jk, 'status', JOB_DISPATCHED, 'attempt', attempt, 'dispatched_at_ms', now_ms, 'updated_at', now_s, 'result', '{}', 'ready_at_ms', ready_ms)
  else
    rcall('HSET', jk, 'status', JOB_DISPATCHED, 'attempt', attempt, 'dispatched_at_ms', now_ms, 'updated_at', now_s)
  end
  index_job(caller .. ':' .. id, jst, JOB_DISPATCHED, v[1] or nil)
  -- status: the type's; detail: none for a first attempt (lib/store impliedStatus,
  -- impliedDetail); held for the call's other job events (lib_state's ev_later: the
  -- caller flushes them, ev_flush, before it writes any other event)
  local detail = ''
  if attempt ~= '1' then detail = 'attempt ' .. attempt end -- attempt: a string (int)
  ev_later(EV_JOB_DISPATCHED, actor, flow, id, caller, detail)
  return attempt
end
