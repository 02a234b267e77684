-- flow_start_chunk: writes the DAG state of a chunk of a large flow's nodes, as
-- start_flow does for a whole flow (flow_start_begin came first; flow_start_commit
-- follows), with start_flow's node loop (lib_start's start_nodes): the nodes with no
-- dependency ready, the others waiting (their jobs waiting_for_prerequisites). A fresh
-- ready job is marked by its dispatch, after the commit; one that ran before is marked
-- dispatched here. Changes nothing when the flow
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
-- Libs: lib_busy lib_state lib_wake lib_ck lib_route lib_dispatch lib_start
-- Reply: int 1 written; 0 not: the flow is not dispatched any more (or a flow.delete
--   in chunks marked it), or another start took over.
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

local st, deleting = unpack(rcall('HMGET', KEYS[1], 'status', 'deleting'))
if deleting or st ~= FLOW_DISPATCHED and st ~= FLOW_SCHEDULED then return 0 end
local dag = KEYS[2]
if rcall('HGET', dag, 'starting') ~= token then return 0 end
-- the chunk's nodes and their jobs: start_flow's loop (lib_start's start_nodes)
start_nodes(dag, caller, nodes, now_s, now_ms, nil)
return 1
