-- start_flow: starts a dispatched (or scheduled: its time came) flow: writes its DAG state, marks the nodes with
-- no dependency ready and the others waiting (lib_start's start_nodes, as
-- flow_start_chunk for a chunk of a larger flow). The ready ones' jobs are marked by
-- their dispatch, which follows at once (the start holds Redis for the whole flow, so
-- it does only what must be atomic). Only for a flow of at most startChunk jobs
-- (lib/store): a larger one is started in chunks.
--
-- KEYS:
--   flow     flow:<flow>
--   dag      coord:dag:<flow>
--   results  coord:flowres:<flow>
--   events   coord:events
-- ARGV:
--   ctx     int     the context id
--   flow    int     the flow id
--   caller  int     the caller id
--   now_s   int     now (s)
--   now_ms  int     now (ms)
--   actor   string  who starts it
--   nodes   []node  the flow's nodes
--     id          int     the job id
--     dependents  string  its dependents (JSON)
--     n           int     its dependency count
--     ran         bool    the job holds fields of an earlier run to clear (false: a fresh job)
-- Libs: lib_busy lib_state lib_start
-- Reply: raw {1, ready job ids…} started; {0, status} the flow was not dispatched (or scheduled).
--   Error NOTFOUND flow.
-- Derives: context DB: job:<caller>:<id> of the nodes, coord:idx:jobs[:<status>],
--   coord:idx:flows[:<status>]; DB 0 (SELECT 0): coord:flows:active.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local caller = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local actor = ARGV[6]
local argi = 7
local nodes
local n_nodes = tonumber(ARGV[argi])
nodes = {}
argi = argi + 1
for k = 1, n_nodes do
  nodes[k] = {id = ARGV[argi], dependents = ARGV[argi + 1], n = ARGV[argi + 2], ran = ARGV[argi + 3] == '1'}
  argi = argi + 4
end
-- luagen: end of the prologue

local st = redis.call('HGET', KEYS[1], 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if st ~= FLOW_DISPATCHED and st ~= FLOW_SCHEDULED then return {0, st} end
local dag = KEYS[2]
redis.call('DEL', dag, KEYS[3])
local total = #nodes
redis.call('HSET', dag, 'caller', caller, 'total', total, 'terminal', 0, 'failed', 0, 'completed', 0, 'cancelled', 0)
-- the nodes' DAG state and their jobs (lib_start's start_nodes, flow_start_chunk's
-- loop too); out: 1, then the ready nodes
local out = {1}
start_nodes(dag, caller, nodes, now_s, now_ms, out)
set_flow(flow, FLOW_STARTED, 'started_at', now_s, 'started_at_ms', now_ms, 'updated_at', now_s)
redis.call('HDEL', KEYS[1], 'error', 'failed_job', 'finished_at', 'finished_at_ms', 'cancelled_by')
redis.call('XADD', KEYS[4], 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_FLOW_STARTED, 'actor', actor, 'flow_id', flow, 'caller_id', caller, 'status', FLOW_STARTED)
redis.call('SELECT', '0')
redis.call('SADD', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
return out
