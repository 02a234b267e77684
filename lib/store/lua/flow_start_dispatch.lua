-- flow_start_dispatch: dispatches nodes of a started flow that were ready at its start
-- and name no runner (a large flow's, after flow_start_commit; or ones the safety
-- sweep finds never dispatched), in one group message: dispatch's work for them, with
-- the DAG read once and written once for all the nodes (lib_start's dispatch_ready):
-- each node is dispatched only when ready, its retry due and its flow neither paused
-- nor held; its job is marked dispatched with the start's time as its ready time. The
-- message is routed here when a runner of this node can take every job (lib_route),
-- else pushed on msg_out for the router.
--
-- KEYS:
--   msg_out  msg_out
--   dag      coord:dag:<flow>
-- ARGV:
--   ctx       int       the context id
--   flow      int       the flow id
--   caller    int       the caller id
--   now_s     int       now (s)
--   now_ms    int       now (ms)
--   actor     string    who dispatches
--   ready_ms  int       the flow's start (ms): the nodes' ready time
--   group     []raw     field/value items of the group message (all but its id and
--                       job_ids)
--   ids       []string  the nodes' job ids
-- Libs: lib_busy lib_state lib_wake lib_ck lib_route lib_dispatch lib_start
-- Reply: flat[]dispatched  per node, in order (a table a node cost ~5k instructions)
--   msg      string  its message key, or "" when it was not dispatched
--   attempt  string  its attempt (a number's text), or why it was not dispatched
-- Derives: context DB: job:<caller>:<id> of the nodes, message:<caller>:<id> (a fresh
--   id), coord:seq:message, coord:idx:jobs:<status>, coord:flowmsgs:<flow>,
--   coord:events, and lib_route's coord:executors, coord:script_types, coord:features,
--   queue:<type>, queue:exec:<executor>, coord:prio:<queue>, context:<ctx>, lib_ck's
--   keys, coord:wakers:<queue>; DB 0 (SELECT 0, last): coord:wake:msg_out, the
--   runners' wake lists coord:wake:runner:<id>:<queue>, coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local caller = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local actor = ARGV[6]
local ready_ms = ARGV[7]
local argi = 8
local group
local n_group = tonumber(ARGV[argi])
if n_group <= 7000 then group = {unpack(ARGV, argi + 1, argi + n_group)} else group = {}; for k = 1, n_group do group[k] = ARGV[argi + k] end end
argi = argi + 1 + n_group
local ids
local n_ids = tonumber(ARGV[argi])
if n_ids <= 7000 then ids = {unpack(ARGV, argi + 1, argi + n_ids)} else ids = {}; for k = 1, n_ids do ids[k] = ARGV[argi + k] end end
argi = argi + 1 + n_ids
-- luagen: end of the prologue

local attempts, whys, mk, pushed = dispatch_ready(caller, flow, KEYS[2], ids, now_s, now_ms, ready_ms, actor, group, KEYS[1], false)
local out = {}
for k = 1, #ids do
  if attempts[k] then
    out[2 * k - 1], out[2 * k] = mk, attempts[k]
  else
    out[2 * k - 1], out[2 * k] = '', whys[k]
  end
end
index_flush()
ev_flush() -- the job.dispatched events, before any a push writes
route_flush(ctx)
wake_msg_out(ctx, pushed)
return out
