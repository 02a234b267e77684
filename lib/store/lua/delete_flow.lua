-- delete_flow: removes a flow with its jobs, their logs and messages, its DAG state and
-- results. A started flow is refused (cancel it first) unless force; retention of an
-- ended flow uses it too.
--
-- KEYS: [1] flow:<flow>, [2] coord:dag:<flow>, [3] coord:flowres:<flow>,
--   [4] coord:flowmsgs:<flow>.
-- ARGV: [1] context id, [2] flow id, [3] force (1/0), [4] actor, [5] now (ms).
-- Reply: 1. Errors: NOTFOUND flow; CONFLICT flow <id> is running.
-- Derives, from the flow's job list: context DB: the messages of coord:flowmsgs:<flow>,
--   and per job what delete_job (lib_delete_job) removes; coord:idx:flows[:<status>], coord:events;
--   DB 0 (SELECT 0): coord:flows:active, coord:expire, coord:due (the jobs' retries).

local ctx, flow, force, actor, now_ms = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4], ARGV[5]
local fk, dag, rk, fm = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local st = redis.call('HGET', fk, 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if st == FLOW_STARTED and not force then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' is running; cancel it first (flow.cancel)')
end
local caller = redis.call('HGET', fk, 'caller_id') or '0'
local jobs = cjson.decode(redis.call('HGET', fk, 'jobs') or '[]')
for _, id in ipairs(jobs) do
  id = tostring(id)
  if redis.call('HGET', K_JOB .. caller .. ':' .. id, 'flow_id') == flow then delete_job(caller, id) end
end
delete_messages(fm)
redis.call('UNLINK', fk, dag, rk)
redis.call('ZREM', K_FLOW_INDEX, flow)
redis.call('ZREM', K_FLOW_INDEX .. ':' .. st, flow)
event(EV_FLOW_DELETED, actor, now_ms, flow, '0', caller, st, '')
redis.call('SELECT', '0')
redis.call('SREM', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
redis.call('ZREM', K_EXPIRE, ctx .. ':flow:' .. flow)
for _, id in ipairs(jobs) do
  redis.call('ZREM', K_DUE, 'retry:' .. ctx .. ':' .. flow .. ':' .. caller .. ':' .. tostring(id))
end
return 1
