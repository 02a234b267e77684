-- flow_cancel_chunk: cancels a chunk of a large flow's jobs, as cancel_flow cancels a
-- whole flow, with the same code (lib_cancel; flow_cancel_begin came first): for a started flow (mode nodes) the
-- chunk's nodes that have not started are cancelled (their jobs never run; a queued
-- job of a concurrency key gives its place back) and its running ones get a stop
-- request; for a flow not started (mode jobs) its jobs end error. The chunk is the
-- flow's jobs from done (the flow's cancelling, "<done> <mode>"): a call whose from is
-- not where the cancel is changes nothing (another caller did this chunk: the one
-- that goes on after a restart, or a second flow.cancel). The last chunk ends the
-- cancel: cancelling and the DAG's hold go; a started flow whose nodes are all final
-- ends error (finalize), else when its stopped jobs end; a flow not started leaves
-- coord:flows:active and its retention starts. A started flow that ended meanwhile
-- (its last running jobs ended) only loses the marks. The actor and the reason are
-- the flow's (cancelled_by, error).
--
-- KEYS:
--   flow     flow:<flow>
--   dag      coord:dag:<flow>
--   results  coord:flowres:<flow>
-- ARGV:
--   ctx           int       the context id
--   flow          int       the flow id
--   now_s         int       now (s)
--   now_ms        int       now (ms)
--   retention_ms  int       retention (ms; context:<ctx>.retention_seconds wins when set)
--   from          int       where the chunk starts in the flow's job list (0-based)
--   last          bool      the flow's last chunk
--   ids           []string  the chunk's job ids
-- Libs: lib_busy lib_state lib_finalize lib_wake lib_ck lib_cancel
-- Reply: cancel {done, status, stopping…}
--   done         int     1 the chunk was done; 0 not: the cancel is not where from says
--                        (or not under way)
--   status       string  the flow's status
--   ...stopping  []int   the running jobs being stopped
-- Derives: from the flow's fields: context DB: context:<ctx> (read: its retention),
--   job:<caller>:<id> of the chunk's jobs, coord:idx:jobs[:<status>],
--   coord:idx:flows[:<status>], coord:events, coord:ckrun:<key>, coord:ckheld:<key>
--   and the held jobs' queues (lib_ck); DB 0 (SELECT 0): the runners' wake lists of
--   the released jobs, coord:flows:active, coord:expire, coord:flowdone (PUBLISH),
--   coord:ctl:<worker> of each running job (the stop request).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local now_s = ARGV[3]
local now_ms = ARGV[4]
local retention_ms = ARGV[5]
local from = ARGV[6]
local last = ARGV[7] == '1'
local argi = 8
local ids
local n_ids = tonumber(ARGV[argi])
if n_ids <= 7000 then ids = {unpack(ARGV, argi + 1, argi + n_ids)} else ids = {}; for k = 1, n_ids do ids[k] = ARGV[argi + k] end end
argi = argi + 1 + n_ids
-- luagen: end of the prologue

local fk, dag, rk = KEYS[1], KEYS[2], KEYS[3]
local h = rcall('HMGET', fk, 'status', 'caller_id', 'cancelling', 'cancelled_by', 'error')
local st, caller, cancelling, actor, reason = h[1], h[2] or '0', h[3], h[4] or '', h[5] or ''
if not st or not cancelling then return {0, st or ''} end
local done, mode = string.match(cancelling, '^(%d+) (%a+)$')
if done ~= from then return {0, st} end
local function finish()
  rcall('HDEL', fk, 'cancelling')
  if mode == 'nodes' then rcall('HDEL', dag, 'hold') end
end
if mode == 'nodes' and st ~= FLOW_STARTED then
  -- ended meanwhile: its last running jobs ended, every node final
  finish()
  return {1, st}
end
local out = {1, st}
local stops = {}
if mode == 'jobs' then
  cancel_jobs(caller, ids, reason, now_s)
else
  stops = cancel_nodes(dag, ctx, flow, caller, ids, actor, reason, now_s, now_ms, out)
end
if not last then
  rcall('HSET', fk, 'cancelling', int(tonumber(done) + #ids) .. ' ' .. mode)
else
  finish()
  if mode == 'nodes' then
    if tonumber(rcall('HGET', dag, 'terminal')) >= tonumber(rcall('HGET', dag, 'total')) then
      out[2] = finalize(dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor, retention_ms)
    end
  else
    local keep = tonumber(rcall('HGET', K_CONTEXT .. ctx, 'retention_seconds') or '0') or 0
    if keep > 0 then retention_ms = keep * 1000 end
    rcall('SELECT', '0')
    rcall('SREM', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
    if tonumber(retention_ms) > 0 then
      rcall('ZADD', K_EXPIRE, tonumber(now_ms) + tonumber(retention_ms), ctx .. ':flow:' .. flow)
    end
    rcall('SELECT', ctx)
  end
end
push_stops(stops)
return out
