-- flow_stage_begin: begins a flow's creation as a unit (flow.begin): reserves the
-- flow's id and a range of n job ids of its caller, and records the stage that the
-- flow's jobs are created under (each created with the flow's id, flow_id) until
-- flow.create stores the flow. A stage not renewed within its ttl expires: the
-- scheduler's retention deletes its jobs (flow_stage_sweep), so that an interrupted
-- creation leaves nothing outside a flow.
--
-- KEYS: [1] coord:seq:flow, [2] coord:seq:job:<caller>.
-- ARGV: [1] context id, [2] caller id, [3] n (jobs, at least 1), [4] ttl (ms), [5] now (ms).
-- Reply: {flow id, first job id, last job id, expiry (ms)}. Error: CONFLICT when the
--   caller's job ids would pass 2^32-1.
-- Derives: context DB: flow:<flow> (a free id), coord:flowstage:<flow> (the stage:
--   caller, first, last, ttl_ms, expires_ms, state open); DB 0 (SELECT 0): coord:expire
--   (member <ctx>:stage:<flow> at the expiry).

local ctx, caller, n, ttl, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local last = redis.call('INCRBY', KEYS[2], n)
if last > 4294967295 then
  redis.call('DECRBY', KEYS[2], n)
  return redis.error_reply('CONFLICT the job ids of caller ' .. caller .. ' are exhausted')
end
local flow
repeat
  flow = string.format('%d', redis.call('INCR', KEYS[1]))
until redis.call('EXISTS', K_FLOW .. flow) == 0 and redis.call('EXISTS', K_FLOW_STAGE .. flow) == 0
local first = last - n + 1
local expires = string.format('%d', now + ttl)
redis.call('HSET', K_FLOW_STAGE .. flow, 'caller', caller, 'first', string.format('%d', first), 'last', string.format('%d', last),
  'ttl_ms', ARGV[4], 'expires_ms', expires, 'state', 'open')
redis.call('SELECT', '0')
redis.call('ZADD', K_EXPIRE, expires, ctx .. ':stage:' .. flow)
return {tonumber(flow), first, last, tonumber(expires)}
