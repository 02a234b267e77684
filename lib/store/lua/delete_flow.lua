-- delete_flow: removes a flow with its jobs, their logs and messages, its DAG state and
-- results. A started flow is refused (cancel it first) unless force; retention of an
-- ended flow uses it too.
--
-- KEYS:
--   flow      flow:<flow>
--   dag       coord:dag:<flow>
--   results   coord:flowres:<flow>
--   messages  coord:flowmsgs:<flow>
-- ARGV:
--   ctx     int     the context id
--   flow    int     the flow id
--   force   bool    even a started flow
--   ended   bool    only an ended flow (finished or error: retention's, which took the
--                   flow's expiry before; a retry meanwhile made it run again)
--   actor   string  who deletes
--   now_ms  int     now (ms)
-- Libs: lib_busy lib_state lib_delete_job
-- Reply: int 1 deleted; 0 not ended (ended). Errors: NOTFOUND flow; CONFLICT flow <id>
--   is running.
-- Derives, from the flow's job list: context DB: coord:cascade:<flow>, the messages of coord:flowmsgs:<flow>,
--   and per job what delete_job (lib_delete_job) removes; coord:idx:flows[:<status>], coord:events;
--   DB 0 (SELECT 0): coord:flows:active, coord:expire, coord:delayed (a scheduled
--   flow's start), coord:due (the jobs' retries).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local force = ARGV[3] == '1'
local ended = ARGV[4] == '1'
local actor = ARGV[5]
local now_ms = ARGV[6]
-- luagen: end of the prologue

local fk, dag, rk, fm = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local st = rcall('HGET', fk, 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if ended and st ~= FLOW_FINISHED and st ~= FLOW_ERROR then return 0 end
if st == FLOW_STARTED and not force then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' is running; cancel it first (flow.cancel)')
end
local caller = rcall('HGET', fk, 'caller_id') or '0'
local jobs = cjson.decode(rcall('HGET', fk, 'jobs') or '[]')
for _, id in ipairs(jobs) do
  id = tostring(id)
  if rcall('HGET', K_JOB .. caller .. ':' .. id, 'flow_id') == flow then delete_job(caller, id) end
end
delete_messages(fm)
rcall('UNLINK', fk, dag, rk, K_FLOW_CASCADE .. flow)
rcall('ZREM', K_FLOW_INDEX, flow)
rcall('ZREM', K_FLOW_INDEX .. ':' .. st, flow)
event(EV_FLOW_DELETED, actor, now_ms, flow, '0', caller, st, '')
rcall('SELECT', '0')
rcall('SREM', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
rcall('ZREM', K_EXPIRE, ctx .. ':flow:' .. flow)
rcall('ZREM', K_DELAYED, ctx .. ':flow:' .. flow) -- (a scheduled flow's start: a flow made again with its id must not start on it)
for _, id in ipairs(jobs) do
  rcall('ZREM', K_DUE, 'retry:' .. ctx .. ':' .. flow .. ':' .. caller .. ':' .. tostring(id))
end
return 1
