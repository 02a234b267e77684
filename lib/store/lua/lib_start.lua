-- lib_start: defines start_nodes(dag, caller, nodes, now_s, now_ms, ready), the one
-- node loop of a flow's start, shared by start_flow (a whole flow in one call) and
-- flow_start_chunk (a chunk of a large flow a call): writes the DAG state of the nodes
-- (records {id, dependents, n, ran} as their headers declare them) into the DAG hash
-- dag and marks their jobs (of caller): a node with no dependency ready, the others
-- pending with their count of dependencies left (r:) and their jobs
-- waiting_for_prerequisites (a fresh job's empty result, not stored, left so). A fresh ready job is marked by its dispatch, which follows
-- the start (a start does only what must be atomic); one that ran before (ran) has the
-- fields of its last run cleared and is marked dispatched here (its status may already
-- say dispatched, which its dispatch would take as marked). The ids of the ready nodes
-- are appended to the list ready (when given); with here (a list), those of a node
-- whose record says here (its job names no runner: it goes in the start's own group
-- message) are appended to here instead, their DAG state left to dispatch_ready,
-- which the same call runs next. The jobs' index moves are made together at the end
-- (lib_state's index_later, index_flush): the script is left in the context's DB.
-- Needs lib_state.
--
-- Attempt counters (a:) and a ready node's count of dependencies left (r:) start
-- absent, read as 0; so do empty dependent lists (d:), read as [] (a flow of
-- independent jobs holds one field per node, not three). A node's dependencies are its
-- job's dependends, not copied here (a field of a big flow's DAG hash, a hash table,
-- is ~60 B of Redis a node; docs/data-model.md). The fields go into the DAG hash a few
-- hundred at a time (unpack's limit).

local function start_nodes(dag, caller, nodes, now_s, now_ms, ready, here)
  local kv, nk = {}, 0
  for _, node in ipairs(nodes) do
    local id, dependents = node.id, node.dependents
    local jk -- the job's key, when its job is written (not a fresh ready node's)
    if node.ran or node.n ~= '0' then jk = K_JOB .. caller .. ':' .. id end
    if node.ran then
      rcall('HDEL', jk, 'error', 'exit_code', 'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms', 'started_at_us', 'finished_at_us',
        'dispatched_at_ms', 'attempt', 'stop_requested', 'fatal', 'retry_after_ms', 'result_json')
    end
    local st -- the job's new status (nil: left to its dispatch)
    if node.n == '0' and here and node.here then
      -- dispatched by this call (dispatch_ready): its node is written there
      if node.ran then st = JOB_DISPATCHED end
      here[#here + 1] = id
    elseif node.n == '0' then
      kv[nk + 1], kv[nk + 2] = 's:' .. id, NODE_READY
      nk = nk + 2
      if node.ran then st = JOB_DISPATCHED end
      if ready then ready[#ready + 1] = id end
    else
      kv[nk + 1], kv[nk + 2], kv[nk + 3], kv[nk + 4] = 's:' .. id, NODE_PENDING, 'r:' .. id, node.n
      nk = nk + 4
      st = JOB_WAITING_FOR_PREREQUISITES
    end
    if dependents ~= '[]' then
      kv[nk + 1], kv[nk + 2] = 'd:' .. id, dependents
      nk = nk + 2
    end
    if nk >= 400 then
      rcall('HSET', dag, unpack(kv, 1, nk))
      nk = 0
    end
    if st then
      -- set_job's, with the index moves of the nodes made together (index_flush)
      local cur = rcall('HMGET', jk, 'status', 'created_at_ms')
      -- a fresh job's result is not stored (its default, {}): not written either
      if st == JOB_DISPATCHED then
        rcall('HSET', jk, 'status', st, 'result', '{}', 'updated_at', now_s, 'ready_at_ms', now_ms)
      elseif node.ran then
        rcall('HSET', jk, 'status', st, 'result', '{}', 'updated_at', now_s)
      else
        rcall('HSET', jk, 'status', st, 'updated_at', now_s)
      end
      index_later(caller .. ':' .. id, cur[1] or nil, st, cur[2] or nil)
    end
  end
  if nk > 0 then rcall('HSET', dag, unpack(kv, 1, nk)) end
  index_flush()
end

-- dispatch_ready(caller, flow, dag, ids, now_s, now_ms, ready_ms, actor, group, mo,
-- fresh): the dispatch of nodes of flow flow ready since its start (ready_ms, the
-- start's time in ms, their ready time), all in one group message (their jobs name no
-- runner), in the context's DB: lib_dispatch's dispatch_job for many nodes, with the
-- DAG read once and written once for them all instead of twice a node. fresh: the
-- nodes were just started by start_nodes of this call (start_flow), which left their
-- DAG state to this (one that cannot be dispatched, its job missing, is left ready);
-- else (flow_start_dispatch) each is dispatched only when ready, its retry due, and
-- its flow neither paused nor held (as dispatch_job). A node's job is read once (its
-- status, creation time and route fields: route_seen) and written once; the message
-- (group: its field/value items but its id and job_ids, which hold the nodes' ids) is
-- stored and sent by lib_route's route_store (routed to the queues of this node's
-- runners, or pushed on the list mo for the router), its key tracked in the flow's
-- message set; the job.dispatched events are held (ev_later). The caller then makes the
-- held index moves and events (index_flush, ev_flush) and route_flush / wake_msg_out
-- with the count returned. Returns per id its attempt (a string) or nil, the why
-- list (per id: why not, or nil), the message key (nil: none) and the pushes onto mo.
-- Needs lib_state, lib_route (and its libraries), lib_dispatch (node_why).
local function dispatch_ready(caller, flow, dag, ids, now_s, now_ms, ready_ms, actor, group, mo, fresh)
  local n = #ids
  local attempts, whys = {}, {}
  local node, fs
  if not fresh then
    -- one read of the DAG for all: paused, hold, then s:, due:, a: of each node (the
    -- names of s: and a: written again below, not made twice)
    fs = {'paused', 'hold'}
    for k = 1, n do
      local id = ids[k]
      fs[3 * k], fs[3 * k + 1], fs[3 * k + 2] = 's:' .. id, 'due:' .. id, 'a:' .. id
    end
    node = rcall('HMGET', dag, unpack(fs))
  end
  local kv, nk, dues = {}, 0, {}
  local gids, jks = {}, {}
  local rf = route_fields()
  for k = 1, n do
    local id = ids[k]
    local jk = K_JOB .. caller .. ':' .. id
    local why, attempt = nil, '1'
    if node then
      local due = node[3 * k + 1]
      why = node_why(node[3 * k], due, node[1], node[2], now_ms) -- dispatch_job's rule
      if not why then
        local a = node[3 * k + 2] -- (none: a first attempt, '1' without a number made)
        if a then attempt = int((tonumber(a) or 0) + 1) end
        if due then dues[#dues + 1] = 'due:' .. id end
      end
    end
    local v
    if not why then
      -- its creation time, then its status and the route fields but the id (the
      -- status in its place says the job exists: lib_route's route_seen)
      v = rcall('HMGET', jk, 'created_at_ms', 'status', unpack(rf, 2))
      if not v[2] then why = 'job missing' end
    end
    if why then
      whys[k] = why
      if fresh then -- (its job missing) ready, as a start leaves a node it does not dispatch
        kv[nk + 1], kv[nk + 2] = 's:' .. id, NODE_READY
        nk = nk + 2
      end
    else
      attempts[k] = attempt
      if fs then
        kv[nk + 1], kv[nk + 2], kv[nk + 3], kv[nk + 4] = fs[3 * k], NODE_DISPATCHED, fs[3 * k + 2], attempt
      else
        kv[nk + 1], kv[nk + 2], kv[nk + 3], kv[nk + 4] = 's:' .. id, NODE_DISPATCHED, 'a:' .. id, attempt
      end
      nk = nk + 4
      route_seen(jk, v)
      -- Its result is empty already (a fresh job's, or one start_nodes cleared), and a
      -- status that is dispatched already is not written again: each field written
      -- into the job's listpack is a scan and a move of it.
      if v[2] == JOB_DISPATCHED then
        rcall('HSET', jk, 'attempt', attempt, 'dispatched_at_ms', now_ms, 'updated_at', now_s, 'ready_at_ms', ready_ms)
      else
        rcall('HSET', jk, 'status', JOB_DISPATCHED, 'attempt', attempt, 'dispatched_at_ms', now_ms, 'updated_at', now_s, 'ready_at_ms', ready_ms)
        index_later(caller .. ':' .. id, v[2], JOB_DISPATCHED, v[1] or nil)
      end
      local detail = ''
      if attempt ~= '1' then detail = 'attempt ' .. attempt end
      ev_later(EV_JOB_DISPATCHED, actor, flow, id, caller, detail)
      gids[#gids + 1] = id
      jks[#jks + 1] = jk
    end
  end
  if nk > 0 then call_each('HSET', dag, kv, 2) end
  if #dues > 0 then call_each('HDEL', dag, dues) end
  if #gids == 0 then return attempts, whys, nil, 0 end
  -- its jobs by their ids alone (job_ids, in parts: part_fields), as dispatch's group
  local mk, pushed = route_store(caller, group, now_ms, part_fields({}, 'job_ids', table.concat(gids, ' ')), jks, mo)
  track_msg(caller, gids[1], mk, flow)
  return attempts, whys, mk, pushed
end
