-- cancel_flow: cancels a flow. Nodes that have not started are cancelled at once
-- (their jobs never run); running ones get a stop request in their runner's control
-- list; when no node is left running the flow ends error (finalize). The jobs are
-- cancelled as flow_cancel_chunk cancels a chunk of a larger flow's (lib_cancel). Only
-- for a flow of at most cancelChunk jobs (lib/store): a larger one is cancelled in
-- chunks.
--
-- KEYS:
--   flow     flow:<flow>
--   dag      coord:dag:<flow>
--   results  coord:flowres:<flow>
-- ARGV:
--   ctx           int     the context id
--   flow          int     the flow id
--   actor         string  who cancels
--   now_s         int     now (s)
--   now_ms        int     now (ms)
--   reason        string  why
--   retention_ms  int     retention (ms; context:<ctx>.retention_seconds wins when set)
-- Libs: lib_busy lib_state lib_finalize lib_wake lib_ck lib_cancel
-- Reply: cancel {cancelled, status, stopping…}; error NOTFOUND flow
--   cancelled    int     1 cancelled now; 0 the flow had ended already (nothing changed)
--   status       string  the flow's status (error, or started while jobs are being
--                        stopped)
--   ...stopping  []int   the running jobs being stopped
-- Derives, from ctx and the flow's own fields (its job list and caller, its jobs'
--   workers): context DB: context:<ctx> (read: its retention; not one of KEYS, which
--   the caller must be allowed to write, and the scheduler's Redis user may only read
--   it), job:<caller>:<id> of its jobs, coord:idx:jobs[:<status>],
--   coord:idx:flows[:<status>], coord:events, coord:ckrun:<key>, coord:ckheld:<key>
--   and the held jobs' queues of its queued jobs' concurrency keys (lib_ck); DB 0
--   (SELECT 0): the runners' wake lists of the released jobs, coord:flows:active,
--   coord:expire, coord:delayed (a scheduled flow's entry), coord:flowdone (PUBLISH),
--   coord:ctl:<worker> of each running job
--   (the stop request).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local actor = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local reason = ARGV[6]
local retention_ms = ARGV[7]
-- luagen: end of the prologue

local fk, dag, rk = KEYS[1], KEYS[2], KEYS[3]
local st = rcall('HGET', fk, 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if st == FLOW_FINISHED or st == FLOW_ERROR then return {0, st} end
local caller = rcall('HGET', fk, 'caller_id') or '0'
rcall('HSET', fk, 'cancelled_by', actor, 'error', reason, 'updated_at', now_s)
event(EV_FLOW_CANCELLED, actor, now_ms, flow, '0', caller, st, reason)
-- the job ids as strings (cjson decodes numbers, which Lua would format as floats)
local jobs = {}
for id in string.gmatch(rcall('HGET', fk, 'jobs') or '', '%d+') do jobs[#jobs + 1] = id end
if st == FLOW_DISPATCHED or st == FLOW_SCHEDULED then
  cancel_jobs(caller, jobs, reason, now_s)
  set_flow(flow, FLOW_ERROR, 'finished_at', now_s, 'finished_at_ms', now_ms, 'updated_at', now_s)
  event(EV_FLOW_ERROR, actor, now_ms, flow, '0', caller, FLOW_ERROR, reason)
  local keep = tonumber(rcall('HGET', K_CONTEXT .. ctx, 'retention_seconds') or '0') or 0
  if keep > 0 then retention_ms = keep * 1000 end
  rcall('SELECT', '0')
  if tonumber(retention_ms) > 0 then
    rcall('ZADD', K_EXPIRE, tonumber(now_ms) + tonumber(retention_ms), ctx .. ':flow:' .. flow)
  end
  if st == FLOW_SCHEDULED then rcall('ZREM', K_DELAYED, ctx .. ':flow:' .. flow) end
  return {1, FLOW_ERROR}
end
local out = {1, FLOW_STARTED}
local stops = cancel_nodes(dag, ctx, flow, caller, jobs, actor, reason, now_s, now_ms, out)
if tonumber(rcall('HGET', dag, 'terminal')) >= tonumber(rcall('HGET', dag, 'total')) then
  out[2] = finalize(dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor, retention_ms)
end
push_stops(stops)
return out
