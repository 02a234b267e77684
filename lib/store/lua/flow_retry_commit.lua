-- flow_retry_commit: the last call of a large failed flow's retry in chunks: every
-- node is reset (flow_retry_chunk, the flow's retrying at the flow's size), so the
-- flow is started again as retry_flow starts it: retrying and the DAG's hold go, the
-- failed and cancelled counters are 0 (every such node was reset, none ran since),
-- the flow's end fields go, its event is written and its retention ends. The caller
-- dispatches the ready nodes. A call when the retry is not at total changes nothing.
--
-- KEYS:
--   flow  flow:<flow>
--   dag   coord:dag:<flow>
-- ARGV:
--   ctx     int     the context id
--   flow    int     the flow id
--   actor   string  who retries
--   now_s   int     now (s)
--   now_ms  int     now (ms)
--   total   int     the flow's number of jobs (where the chunks end)
--   nready  int     how many nodes the chunks made ready (for the event's text)
-- Libs: lib_busy lib_state
-- Reply: int 1 started again; 0 not (the retry is not at total, or not under way).
-- Derives: context DB: coord:idx:flows[:<status>], coord:events; DB 0 (SELECT 0):
--   coord:flows:active, coord:expire.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local actor = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local total = ARGV[6]
local nready = ARGV[7]
-- luagen: end of the prologue

local fk, dag = KEYS[1], KEYS[2]
local h = rcall('HMGET', fk, 'retrying', 'caller_id', 'status')
if h[1] ~= total or h[3] ~= FLOW_ERROR then return 0 end
local caller = h[2] or '0'
rcall('HDEL', dag, 'hold')
rcall('HSET', dag, 'failed', 0, 'cancelled', 0)
set_flow(flow, FLOW_STARTED, 'updated_at', now_s)
rcall('HDEL', fk, 'retrying', 'error', 'failed_job', 'cancelled_by', 'finished_at', 'finished_at_ms', 'result')
event(EV_FLOW_RETRIED, actor, now_ms, flow, '0', caller, FLOW_STARTED, nready .. ' job(s) ready to run again')
rcall('SELECT', '0')
rcall('SADD', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
rcall('ZREM', K_EXPIRE, ctx .. ':flow:' .. flow)
return 1
