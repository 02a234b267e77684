-- flow_cancel_begin: the first call of a large flow's cancel in chunks (CancelFlow: a
-- flow of more than cancelChunk jobs; a smaller one is cancelled whole by cancel_flow).
-- It records the cancel as cancel_flow does (cancelled_by, error, the event) and that
-- it is under way: the flow's field cancelling ("<done> <mode>": how many of the flow's
-- jobs the chunks have done, in its job list's order; mode nodes for a started flow,
-- jobs for one not started), and for a started flow the DAG's hold (lib_dispatch: no
-- node of the flow is dispatched meanwhile, so none starts that a later chunk would
-- have cancelled). A flow not started ends error at once (as cancel_flow ends it; its
-- jobs are marked by the chunks); a scheduled one leaves coord:delayed. Either is in
-- coord:flows:active until the last chunk, where the scheduler's safety sweep finds a
-- cancel that its caller left unfinished (a restart) and finishes it. A cancel already
-- under way is not begun again: the reply says where it is, for the caller to go on.
--
-- KEYS:
--   flow  flow:<flow>
--   dag   coord:dag:<flow>
-- ARGV:
--   ctx     int     the context id
--   flow    int     the flow id
--   actor   string  who cancels
--   now_s   int     now (s)
--   now_ms  int     now (ms)
--   reason  string  why
-- Libs: lib_busy lib_state
-- Reply: raw {1, cancelling} begun; {2, cancelling} under way already (the field's
--   value, "<done> <mode>"); {0, status} the flow had ended (nothing changed). Error
--   NOTFOUND flow.
-- Derives: context DB: coord:idx:flows[:<status>], coord:events; DB 0 (SELECT 0):
--   coord:flows:active, coord:delayed (a scheduled flow's entry).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local actor = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local reason = ARGV[6]
-- luagen: end of the prologue

local fk, dag = KEYS[1], KEYS[2]
local h = rcall('HMGET', fk, 'status', 'caller_id', 'cancelling')
local st, caller = h[1], h[2] or '0'
if not st then return redis.error_reply('NOTFOUND flow') end
if h[3] then return {2, h[3]} end
if st == FLOW_FINISHED or st == FLOW_ERROR then return {0, st} end
local mode = 'jobs'
if st == FLOW_STARTED then mode = 'nodes' end
rcall('HSET', fk, 'cancelled_by', actor, 'error', reason, 'updated_at', now_s, 'cancelling', '0 ' .. mode)
event(EV_FLOW_CANCELLED, actor, now_ms, flow, '0', caller, st, reason)
if mode == 'nodes' then
  rcall('HSET', dag, 'hold', 'cancel')
else
  set_flow(flow, FLOW_ERROR, 'finished_at', now_s, 'finished_at_ms', now_ms, 'updated_at', now_s)
  event(EV_FLOW_ERROR, actor, now_ms, flow, '0', caller, FLOW_ERROR, reason)
end
rcall('SELECT', '0')
rcall('SADD', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
if st == FLOW_SCHEDULED then rcall('ZREM', K_DELAYED, ctx .. ':flow:' .. flow) end
return {1, '0 ' .. mode}
