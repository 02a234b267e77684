-- flow_start_commit: the last call of a large flow's start in chunks: every node's
-- state is written (flow_start_chunk), so the flow is marked started, the start's
-- token removed, its event written and the flow made active. The nodes with no
-- dependency are ready; the caller dispatches them. Changes nothing when the flow is
-- no longer dispatched (or scheduled) or another start took the token over.
--
-- KEYS:
--   flow    flow:<flow>
--   dag     coord:dag:<flow>
--   events  coord:events
-- ARGV:
--   ctx     int     the context id
--   flow    int     the flow id
--   caller  int     the caller id
--   now_s   int     now (s)
--   now_ms  int     now (ms)
--   actor   string  who starts it
--   token   string  the start's token (flow_start_begin's)
-- Libs: lib_busy lib_state
-- Reply: raw {1} started; {0, status} the flow was not dispatched (or scheduled) any
--   more, status "deleting" when a flow.delete in chunks marked it (flow_delete_chunk); {2, status} another start took over (the flow's status is still dispatched or
--   scheduled: that start goes on). Error NOTFOUND flow.
-- Derives: context DB: coord:idx:flows[:<status>]; DB 0 (SELECT 0): coord:flows:active.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local caller = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local actor = ARGV[6]
local token = ARGV[7]
-- luagen: end of the prologue

local st, deleting = unpack(rcall('HMGET', KEYS[1], 'status', 'deleting'))
if not st then return redis.error_reply('NOTFOUND flow') end
if deleting then return {0, 'deleting'} end -- (flow_delete_chunk's mark)
if st ~= FLOW_DISPATCHED and st ~= FLOW_SCHEDULED then return {0, st} end
if rcall('HGET', KEYS[2], 'starting') ~= token then return {2, st} end
rcall('HDEL', KEYS[2], 'starting')
set_flow(flow, FLOW_STARTED, 'started_at', now_s, 'started_at_ms', now_ms, 'updated_at', now_s)
rcall('HDEL', KEYS[1], 'error', 'failed_job', 'finished_at', 'finished_at_ms', 'cancelled_by')
rcall('XADD', KEYS[3], 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_FLOW_STARTED, 'actor', actor, 'flow_id', flow, 'caller_id', caller, 'status', FLOW_STARTED)
rcall('SELECT', '0')
rcall('SADD', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
return {1}
