-- flow_start_chunk: writes the DAG state of a chunk of a large flow's nodes, as
-- start_flow does for a whole flow (flow_start_begin came first; flow_start_commit
-- follows): the nodes with no dependency ready, the others waiting (their jobs
-- waiting_for_prerequisites). A fresh ready job is marked by its dispatch, after the
-- commit; one that ran before is marked dispatched here. Changes nothing when the flow
-- is no longer dispatched (or scheduled) or another start took the token over.
--
-- KEYS:
--   flow  flow:<flow>
--   dag   coord:dag:<flow>
-- ARGV:
--   caller  int     the caller id
--   now_s   int     now (s)
--   now_ms  int     now (ms)
--   token   string  the start's token (flow_start_begin's)
--   nodes   []node  the chunk's nodes
--     id          int     the job id
--     dependents  string  its dependents (JSON)
--     n           int     its dependency count
--     ran         bool    the job holds fields of an earlier run to clear (false: a fresh job)
-- Libs: lib_busy lib_state
-- Reply: int 1 written; 0 not: the flow is not dispatched any more, or another start
--   took over.
-- Derives: context DB: job:<caller>:<id> of the nodes, coord:idx:jobs[:<status>].

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local now_s = ARGV[2]
local now_ms = ARGV[3]
local token = ARGV[4]
local argi = 5
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
if st ~= FLOW_DISPATCHED and st ~= FLOW_SCHEDULED then return 0 end
local dag = KEYS[2]
if redis.call('HGET', dag, 'starting') ~= token then return 0 end
local kv = {}
local function put(...)
  for _, v in ipairs({...}) do kv[#kv + 1] = v end
  if #kv >= 400 then redis.call('HSET', dag, unpack(kv)); kv = {} end
end
for _, node in ipairs(nodes) do
  local id, dependents = node.id, node.dependents
  local jk = K_JOB .. caller .. ':' .. id
  if node.ran then
    redis.call('HDEL', jk, 'error', 'exit_code', 'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms', 'started_at_us', 'finished_at_us',
      'dispatched_at_ms', 'attempt', 'stop_requested', 'fatal', 'retry_after_ms', 'result_json')
  end
  local set
  if node.n == '0' then
    put('s:' .. id, NODE_READY)
    if node.ran then set = {JOB_DISPATCHED, 'result', '{}', 'updated_at', now_s, 'ready_at_ms', now_ms} end
  else
    put('s:' .. id, NODE_PENDING, 'r:' .. id, node.n)
    set = {JOB_WAITING_FOR_PREREQUISITES, 'result', '{}', 'updated_at', now_s}
  end
  if dependents ~= '[]' then put('d:' .. id, dependents) end
  if set then
    -- set_job's, with the index moves of the chunk made together (index_flush)
    local cur = redis.call('HMGET', jk, 'status', 'created_at_ms')
    redis.call('HSET', jk, 'status', unpack(set))
    index_later(caller .. ':' .. id, cur[1] or nil, set[1], cur[2] or nil)
  end
end
if #kv > 0 then redis.call('HSET', dag, unpack(kv)) end
index_flush()
return 1
