-- lib_start: defines start_nodes(dag, caller, nodes, now_s, now_ms, ready), the one
-- node loop of a flow's start, shared by start_flow (a whole flow in one call) and
-- flow_start_chunk (a chunk of a large flow a call): writes the DAG state of the nodes
-- (records {id, dependents, n, ran} as their headers declare them) into the DAG hash
-- dag and marks their jobs (of caller): a node with no dependency ready, the others
-- pending with their count of dependencies left (r:) and their jobs
-- waiting_for_prerequisites. A fresh ready job is marked by its dispatch, which follows
-- the start (a start does only what must be atomic); one that ran before (ran) has the
-- fields of its last run cleared and is marked dispatched here (its status may already
-- say dispatched, which its dispatch would take as marked). The ids of the ready nodes
-- are appended to the list ready (when given). The jobs' index moves are made together
-- at the end (lib_state's index_later, index_flush): the script is left in the
-- context's DB. Needs lib_state.
--
-- Attempt counters (a:) and a ready node's count of dependencies left (r:) start
-- absent, read as 0; so do empty dependent lists (d:), read as [] (a flow of
-- independent jobs holds one field per node, not three). A node's dependencies are its
-- job's dependends, not copied here (a field of a big flow's DAG hash, a hash table,
-- is ~60 B of Redis a node; docs/data-model.md). The fields go into the DAG hash a few
-- hundred at a time (unpack's limit).

local function start_nodes(dag, caller, nodes, now_s, now_ms, ready)
  local kv, nk = {}, 0
  for _, node in ipairs(nodes) do
    local id, dependents = node.id, node.dependents
    local jk = K_JOB .. caller .. ':' .. id
    if node.ran then
      redis.call('HDEL', jk, 'error', 'exit_code', 'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms', 'started_at_us', 'finished_at_us',
        'dispatched_at_ms', 'attempt', 'stop_requested', 'fatal', 'retry_after_ms', 'result_json')
    end
    local st -- the job's new status (nil: left to its dispatch)
    if node.n == '0' then
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
      redis.call('HSET', dag, unpack(kv, 1, nk))
      nk = 0
    end
    if st then
      -- set_job's, with the index moves of the nodes made together (index_flush)
      local cur = redis.call('HMGET', jk, 'status', 'created_at_ms')
      if st == JOB_DISPATCHED then
        redis.call('HSET', jk, 'status', st, 'result', '{}', 'updated_at', now_s, 'ready_at_ms', now_ms)
      else
        redis.call('HSET', jk, 'status', st, 'result', '{}', 'updated_at', now_s)
      end
      index_later(caller .. ':' .. id, cur[1] or nil, st, cur[2] or nil)
    end
  end
  if nk > 0 then redis.call('HSET', dag, unpack(kv, 1, nk)) end
  index_flush()
end
