-- start_flow: starts a dispatched (or scheduled: its time came) flow: writes its DAG state, marks the nodes with
-- no dependency ready and the others waiting (lib_start's start_nodes, as
-- flow_start_chunk for a chunk of a larger flow). The ready nodes whose record says
-- here (their jobs name no runner) are dispatched by this call, in one group message
-- (lib_start's dispatch_ready, which routes it as dispatch does: lib_route); the
-- other ready ones are left to the caller, whose dispatch marks their jobs. Only for a
-- flow of at most startChunk jobs (lib/store): a larger one is started in chunks.
--
-- KEYS:
--   flow     flow:<flow>
--   dag      coord:dag:<flow>
--   results  coord:flowres:<flow>
--   events   coord:events
--   msg_out  msg_out
-- ARGV:
--   ctx     int     the context id
--   flow    int     the flow id
--   caller  int     the caller id
--   now_s   int     now (s)
--   now_ms  int     now (ms)
--   actor   string  who starts it
--   group   []raw   field/value items of the group message of the nodes dispatched
--                   here (all but its id and job_ids; none: no node is)
--   nodes   []node  the flow's nodes
--     id          int     the job id
--     dependents  string  its dependents (JSON)
--     n           int     its dependency count
--     ran         bool    the job holds fields of an earlier run to clear (false: a fresh job)
--     here        bool    when ready, dispatched by this call (its job names no runner)
-- Libs: lib_busy lib_state lib_wake lib_ck lib_route lib_dispatch lib_start
-- Reply: raw {1, dispatched, ready job ids…} started: how many nodes this call
--   dispatched, then the ready nodes left to the caller's dispatch; {0, status} the
--   flow was not dispatched (or scheduled), status "deleting" when a flow.delete in
--   chunks marked it (flow_delete_chunk). Error NOTFOUND flow.
-- Derives: context DB: job:<caller>:<id> of the nodes, coord:idx:jobs[:<status>],
--   coord:idx:flows[:<status>], and dispatch's message:<caller>:<id> (fresh ids),
--   coord:seq:message, coord:flowmsgs:<flow> and lib_route's keys (coord:executors,
--   coord:script_types, coord:features, queue:<type>, queue:exec:<executor>,
--   coord:prio:<queue>, context:<ctx>, lib_ck's keys, coord:wakers:<queue>); DB 0
--   (SELECT 0): coord:flows:active, coord:wake:msg_out, the runners' wake lists
--   coord:wake:runner:<id>:<queue>, coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local caller = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local actor = ARGV[6]
local argi = 7
local group
local n_group = tonumber(ARGV[argi])
if n_group <= 7000 then group = {unpack(ARGV, argi + 1, argi + n_group)} else group = {}; for k = 1, n_group do group[k] = ARGV[argi + k] end end
argi = argi + 1 + n_group
local nodes
local n_nodes = tonumber(ARGV[argi])
nodes = {}
argi = argi + 1
for k = 1, n_nodes do
  nodes[k] = {id = ARGV[argi], dependents = ARGV[argi + 1], n = ARGV[argi + 2], ran = ARGV[argi + 3] == '1', here = ARGV[argi + 4] == '1'}
  argi = argi + 5
end
-- luagen: end of the prologue

local st, deleting = unpack(rcall('HMGET', KEYS[1], 'status', 'deleting'))
if not st then return redis.error_reply('NOTFOUND flow') end
if deleting then return {0, 'deleting'} end -- (flow_delete_chunk's mark)
if st ~= FLOW_DISPATCHED and st ~= FLOW_SCHEDULED then return {0, st} end
local dag = KEYS[2]
rcall('DEL', dag, KEYS[3])
local total = #nodes
rcall('HSET', dag, 'caller', caller, 'total', total, 'terminal', 0, 'failed', 0, 'completed', 0, 'cancelled', 0)
-- the nodes' DAG state and their jobs (lib_start's start_nodes, flow_start_chunk's
-- loop too); out: 1, the count dispatched here, then the ready nodes left
local out, here = {1, 0}, nil
if #group > 0 then here = {} end
start_nodes(dag, caller, nodes, now_s, now_ms, out, here)
set_flow(flow, FLOW_STARTED, 'started_at', now_s, 'started_at_ms', now_ms, 'updated_at', now_s)
rcall('HDEL', KEYS[1], 'error', 'failed_job', 'finished_at', 'finished_at_ms', 'cancelled_by')
rcall('XADD', KEYS[4], 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_FLOW_STARTED, 'actor', actor, 'flow_id', flow, 'caller_id', caller, 'status', FLOW_STARTED)
local pushed = 0
if here and #here > 0 then
  -- the ready nodes of the start's own message, after the flow's event (as their
  -- dispatch after the start was)
  local attempts, _, _, p = dispatch_ready(caller, flow, dag, here, now_s, now_ms, now_ms, actor, group, KEYS[5], true)
  pushed = p
  for k = 1, #here do
    if attempts[k] then out[2] = out[2] + 1 else out[#out + 1] = here[k] end
  end
  index_flush()
  ev_flush() -- the job.dispatched events, before any a push writes
  route_flush(ctx)
  wake_msg_out(ctx, pushed)
end
rcall('SELECT', '0')
rcall('SADD', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
return out
