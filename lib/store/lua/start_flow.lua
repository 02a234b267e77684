-- start_flow: starts a dispatched (or scheduled: its time came) flow: writes its DAG state, marks the nodes with
-- no dependency ready and the others waiting. The ready ones' jobs are marked by their
-- dispatch, which follows at once (the start holds Redis for the whole flow, so it does
-- only what must be atomic).
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
-- Libs: lib_busy lib_state
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
-- The nodes' fields go into the DAG hash a few hundred at a time (unpack's limit).
-- Attempt counters (a:) and a ready node's count of dependencies left (r:) start
-- absent, read as 0; so do empty dependent lists (d:), read as [] (a flow of
-- independent jobs holds one field per node, not three). A node's dependencies are
-- its job's dependends, not copied here (a field of a big flow's DAG hash, a hash
-- table, is ~60 B of Redis a node; docs/data-model.md).
local kv = {}
local function put(...)
  for _, v in ipairs({...}) do kv[#kv + 1] = v end
  if #kv >= 400 then redis.call('HSET', dag, unpack(kv)); kv = {} end
end
local out = {1}
for _, node in ipairs(nodes) do
  local id, dependents, n = node.id, node.dependents, tonumber(node.n)
  local jk = K_JOB .. caller .. ':' .. id
  if node.ran then
    redis.call('HDEL', jk, 'error', 'exit_code', 'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms', 'started_at_us', 'finished_at_us',
      'dispatched_at_ms', 'attempt', 'stop_requested', 'fatal', 'retry_after_ms', 'result_json')
  end
  if n == 0 then
    -- A fresh job is marked (status, empty result, ready time) by its dispatch, which
    -- follows at once: the start holds Redis for the whole flow, so it does only what
    -- must be atomic. One that ran before is marked here (its status may already say
    -- dispatched, which its dispatch would take as marked).
    put('s:' .. id, NODE_READY)
    if dependents ~= '[]' then put('d:' .. id, dependents) end
    if node.ran then set_job(caller, id, JOB_DISPATCHED, 'result', '{}', 'updated_at', now_s, 'ready_at_ms', now_ms) end
    out[#out + 1] = id
  else
    put('s:' .. id, NODE_PENDING, 'r:' .. id, node.n)
    if dependents ~= '[]' then put('d:' .. id, dependents) end
    set_job(caller, id, JOB_WAITING_FOR_PREREQUISITES, 'result', '{}', 'updated_at', now_s)
  end
end
if #kv > 0 then redis.call('HSET', dag, unpack(kv)) end
set_flow(flow, FLOW_STARTED, 'started_at', now_s, 'started_at_ms', now_ms, 'updated_at', now_s)
redis.call('HDEL', KEYS[1], 'error', 'failed_job', 'finished_at', 'finished_at_ms', 'cancelled_by')
redis.call('XADD', KEYS[4], 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_FLOW_STARTED, 'actor', actor, 'flow_id', flow, 'caller_id', caller, 'status', FLOW_STARTED)
redis.call('SELECT', '0')
redis.call('SADD', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
return out
