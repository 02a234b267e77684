-- flow_stage_commit: marks a staged flow as being stored (flow.create of a flow that
-- flow.begin began), or, with ARGV[5] = 'open', opens it again after a refused store.
-- While it is being stored, the stage takes no more jobs, and its expiry is held back
-- by the hold (a store that dies there leaves the stage to the sweep, which deletes the
-- jobs unless the flow exists).
--
-- KEYS: [1] coord:flowstage:<flow>.
-- ARGV: [1] context id, [2] flow id, [3] caller id, [4] now (ms), [5] 'commit' or
--   'open', [6] the hold (ms).
-- Reply: {0} no stage of that flow (a flow created without flow.begin); {1, first job
--   id, last job id}. Error: CONFLICT another caller's stage, or one not open (commit).
-- Derives: DB 0 (SELECT 0): coord:expire (member <ctx>:stage:<flow>).

local st = redis.call('HMGET', KEYS[1], 'caller', 'first', 'last', 'ttl_ms', 'state')
if not st[1] then return {0} end
if st[1] ~= ARGV[3] then
  return redis.error_reply('CONFLICT flow ' .. ARGV[2] .. ' was begun by caller ' .. st[1] .. ', not ' .. ARGV[3])
end
local expires
if ARGV[5] == 'commit' then
  if st[5] ~= 'open' then
    return redis.error_reply('CONFLICT flow ' .. ARGV[2] .. ' is not open (' .. st[5] .. ')')
  end
  expires = string.format('%d', tonumber(ARGV[4]) + tonumber(ARGV[6]))
  redis.call('HSET', KEYS[1], 'state', 'storing', 'expires_ms', expires)
else
  if st[5] ~= 'storing' then return {1, tonumber(st[2]), tonumber(st[3])} end
  expires = string.format('%d', tonumber(ARGV[4]) + tonumber(st[4]))
  redis.call('HSET', KEYS[1], 'state', 'open', 'expires_ms', expires)
end
redis.call('SELECT', '0')
redis.call('ZADD', K_EXPIRE, expires, ARGV[1] .. ':stage:' .. ARGV[2])
return {1, tonumber(st[2]), tonumber(st[3])}
