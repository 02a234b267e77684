-- lib_cancel: a flow's cancel applied to its jobs, the one copy shared by cancel_flow
-- (a whole flow in one call) and flow_cancel_chunk (a chunk of a large flow a call).
--
--   - cancel_jobs(caller, ids, reason, now_s): a flow not started (it has no DAG):
--     each of the jobs ids (of caller) that exists ends error with the cancel's reason.
--   - cancel_nodes(dag, ctx, flow, caller, ids, actor, reason, now_s, now_ms, out): a
--     started flow (its DAG hash dag): each of the nodes ids that has not started
--     (pending, ready or dispatched) is cancelled: its error the reason, its retry time
--     gone, its job error with a stop request (it never runs; a queued job of a
--     concurrency key gives its place back, lib_ck), a job.cancelled event (by actor);
--     each running one gets a stop request and its id is appended to the list out. The
--     DAG's terminal and cancelled counters grow by the nodes cancelled (one HINCRBY
--     each per call). Returns the stop requests, for push_stops.
--   - push_stops(stops): pushes cancel_nodes' stop requests onto their runners' control
--     lists (coord:ctl:<worker>, "<ctx>:<caller>:<id>"); SELECT 0: the script is left
--     in DB 0, so it comes last.
--
-- The jobs' index moves are made together (lib_state's index_later, index_flush) before
-- each function returns; both leave the script in the context's DB. Needs lib_state and
-- lib_ck.

local function cancel_jobs(caller, ids, reason, now_s)
  for _, id in ipairs(ids) do
    local jk = K_JOB .. caller .. ':' .. id
    local cur = rcall('HMGET', jk, 'status', 'created_at_ms')
    if cur[1] then
      rcall('HSET', jk, 'status', JOB_ERROR, 'error', reason, 'updated_at', now_s)
      index_later(caller .. ':' .. id, cur[1], JOB_ERROR, cur[2] or nil)
    end
  end
  index_flush()
end

local function cancel_nodes(dag, ctx, flow, caller, ids, actor, reason, now_s, now_ms, out)
  local stops, n = {}, 0
  for _, id in ipairs(ids) do
    local s = rcall('HGET', dag, 's:' .. id)
    local jk = K_JOB .. caller .. ':' .. id
    if s == NODE_PENDING or s == NODE_READY or s == NODE_DISPATCHED then
      rcall('HSET', dag, 's:' .. id, NODE_CANCELLED, 'e:' .. id, reason)
      rcall('HDEL', dag, 'due:' .. id)
      n = n + 1
      -- set_job's, the index move made with the others' (index_flush)
      local cur = rcall('HMGET', jk, 'status', 'created_at_ms')
      rcall('HSET', jk, 'status', JOB_ERROR, 'error', reason, 'stop_requested', '1', 'updated_at', now_s)
      index_later(caller .. ':' .. id, cur[1] or nil, JOB_ERROR, cur[2] or nil)
      event(EV_JOB_CANCELLED, actor, now_ms, flow, id, caller, JOB_ERROR, reason)
      -- a queued job of a concurrency key gives its place back (lib_ck)
      if s == NODE_DISPATCHED then
        local ck = rcall('HGET', jk, 'concurrency_key')
        if ck then ck_end(ck, jk, now_ms) end
      end
    elseif s == NODE_RUNNING then
      rcall('HSET', jk, 'stop_requested', '1')
      local w = rcall('HGET', jk, 'worker')
      if w then stops[#stops + 1] = {w, ctx .. ':' .. caller .. ':' .. id} end
      out[#out + 1] = id
    end
  end
  if n > 0 then
    rcall('HINCRBY', dag, 'terminal', int(n))
    rcall('HINCRBY', dag, 'cancelled', int(n))
  end
  index_flush()
  ck_wake(ctx)
  return stops
end

local function push_stops(stops)
  if #stops == 0 then return end
  rcall('SELECT', '0')
  for _, s in ipairs(stops) do
    rcall('LPUSH', K_STOP_LIST .. s[1], s[2])
    rcall('EXPIRE', K_STOP_LIST .. s[1], 3600)
  end
end
