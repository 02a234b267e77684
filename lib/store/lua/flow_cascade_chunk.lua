-- flow_cascade_chunk: goes on with the cancel of failed nodes' transitive dependents
-- that a completion left (lib_complete's cascade: more than CASCADE_CHUNK nodes to
-- examine): examines the next CASCADE_CHUNK items of the flow's cascade list
-- (coord:cascade:<flow>, "<node> <failed node>"), cancelling the nodes that have not
-- run and queueing their dependents at the list's end. When the flow's nodes are all
-- final it ends (finalize; the list goes with it). A flow that is not started (ended,
-- or deleted) only loses its list. The scheduler calls it while the reply says items
-- are left (coord:due's cascade: member; the safety sweep after a restart).
--
-- KEYS:
--   dag      coord:dag:<flow>
--   flow     flow:<flow>
--   results  coord:flowres:<flow>
--   events   coord:events
-- ARGV:
--   ctx           int     the context id
--   flow          int     the flow id
--   actor         string  who applies the failure
--   now_s         int     now (s)
--   now_ms        int     now (ms)
--   retention_ms  int     retention (ms)
-- Libs: lib_busy lib_state lib_finalize lib_complete
-- Reply: record what the call did
--   left       int     the items left in the flow's cascade list
--   status     string  the flow's status when it ended in this call, else ""
--   cancelled  int     the nodes this call cancelled
-- Derives: context DB: coord:cascade:<flow>, job:<caller>:<id> of the nodes
--   cancelled, coord:idx:jobs[:<status>], coord:idx:flows[:<status>], context:<ctx>;
--   DB 0 (SELECT 0, when the flow ends): coord:flows:active, coord:expire,
--   coord:flowdone (PUBLISH).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local actor = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local retention_ms = ARGV[6]
-- luagen: end of the prologue

local dag, fk, rk, ek = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lk = K_FLOW_CASCADE .. flow
local h = rcall('HMGET', fk, 'status', 'caller_id')
if h[1] ~= FLOW_STARTED then
  rcall('DEL', lk)
  return {0, '', 0}
end
local caller = h[2] or '0'
local items = rcall('LPOP', lk, CASCADE_CHUNK)
if not items then return {0, '', 0} end
local qd, qo = {}, {}
for k, it in ipairs(items) do
  qd[k], qo[k] = string.match(it, '^(%d+) (%d+)$')
end
-- the popped items are examined here (CASCADE_CHUNK at most); the dependents of the
-- nodes cancelled go to the list's end (cascade queues those past CASCADE_CHUNK)
local _, cancelled = cascade(dag, ek, ctx, flow, caller, qd, qo, actor, now_s, now_ms, EVENTS_CAP(), false)
local out = {rcall('LLEN', lk), '', cancelled}
local c = rcall('HMGET', dag, 'terminal', 'total')
if tonumber(c[1] or '0') >= tonumber(c[2] or '0') then
  out[2] = finalize(dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor, retention_ms)
  out[1] = 0
end
return out
