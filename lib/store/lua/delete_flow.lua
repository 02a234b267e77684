-- deleteFlowScript: ARGV ctx, flow, force, actor, now_ms. A started flow is refused
-- (cancel it first); force deletes it anyway (retention of an ended flow uses it too).

local ctx, flow, force, actor, now_ms = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4], ARGV[5]
local fk = K_FLOW .. flow
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
delete_messages(K_FLOW_MESSAGES .. flow)
redis.call('UNLINK', fk, K_DAG .. flow, K_FLOW_RESULTS .. flow)
redis.call('ZREM', K_FLOW_INDEX, flow)
redis.call('ZREM', K_FLOW_INDEX .. ':' .. st, flow)
event(EV_FLOW_DELETED, actor, now_ms, flow, '0', caller, st, '')
redis.call('SELECT', 0)
redis.call('SREM', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
redis.call('ZREM', K_EXPIRE, ctx .. ':flow:' .. flow)
for _, id in ipairs(jobs) do
  redis.call('ZREM', K_DUE, 'retry:' .. ctx .. ':' .. flow .. ':' .. caller .. ':' .. tostring(id))
end
return 1
