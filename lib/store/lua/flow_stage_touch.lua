-- flow_stage_touch: before a batch of a staged flow's jobs is created (job.create_batch
-- with flow_id), checks that the stage is open and the caller's, and renews its expiry
-- (now + its ttl): the jobs are then created with the flow's id, their ids in the
-- stage's range (the caller checks them against the reply). NOTFOUND: no stage (never
-- begun, or expired and swept); CONFLICT: another caller's, or one being stored or swept.
--
-- KEYS:
--   stage  coord:flowstage:<flow>
-- ARGV:
--   ctx     string  the context id
--   flow    string  the flow id
--   caller  string  the caller id
--   now_ms  num     now (ms)
-- Reply: record the stage's range (errors: NOTFOUND, CONFLICT; see above)
--   first  int  the first job id
--   last   int  the last job id
-- Derives: DB 0 (SELECT 0): coord:expire (member <ctx>:stage:<flow>).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local caller = ARGV[3]
local now_ms = tonumber(ARGV[4])
-- luagen: end of the prologue

local st = rcall('HMGET', KEYS[1], 'caller', 'first', 'last', 'ttl_ms', 'state')
if not st[1] then return redis.error_reply('NOTFOUND stage') end
if st[1] ~= caller then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' was begun by caller ' .. st[1] .. ', not ' .. caller)
end
if st[5] ~= 'open' then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' is no longer open for jobs (' .. st[5] .. ')')
end
local expires = string.format('%d', now_ms + tonumber(st[4]))
rcall('HSET', KEYS[1], 'expires_ms', expires)
rcall('SELECT', '0')
rcall('ZADD', K_EXPIRE, expires, ctx .. ':stage:' .. flow)
return {tonumber(st[2]), tonumber(st[3])}
