-- flow_stage_touch: before a batch of a staged flow's jobs is created (job.create_batch
-- with flow_id), checks that the stage is open and the caller's, and renews its expiry
-- (now + its ttl): the jobs are then created with the flow's id, their ids in the
-- stage's range (the caller checks them against the reply).
--
-- KEYS: [1] coord:flowstage:<flow>.
-- ARGV: [1] context id, [2] flow id, [3] caller id, [4] now (ms).
-- Reply: {first job id, last job id}. Errors: NOTFOUND stage (none, or it expired);
--   CONFLICT the stage is another caller's, or is being stored or swept.
-- Derives: DB 0 (SELECT 0): coord:expire (member <ctx>:stage:<flow>).

local st = redis.call('HMGET', KEYS[1], 'caller', 'first', 'last', 'ttl_ms', 'state')
if not st[1] then return redis.error_reply('NOTFOUND stage') end
if st[1] ~= ARGV[3] then
  return redis.error_reply('CONFLICT flow ' .. ARGV[2] .. ' was begun by caller ' .. st[1] .. ', not ' .. ARGV[3])
end
if st[5] ~= 'open' then
  return redis.error_reply('CONFLICT flow ' .. ARGV[2] .. ' is no longer open for jobs (' .. st[5] .. ')')
end
local expires = string.format('%d', tonumber(ARGV[4]) + tonumber(st[4]))
redis.call('HSET', KEYS[1], 'expires_ms', expires)
redis.call('SELECT', '0')
redis.call('ZADD', K_EXPIRE, expires, ARGV[1] .. ':stage:' .. ARGV[2])
return {tonumber(st[2]), tonumber(st[3])}
