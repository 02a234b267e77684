-- flow_stage_commit: marks a staged flow as being stored (flow.create of a flow that
-- flow.begin began), or, with op 'open', opens it again after a refused store.
-- While it is being stored, the stage takes no more jobs, and its expiry is held back
-- by the hold (a store that dies there leaves the stage to the sweep, which deletes the
-- jobs unless the flow exists). CONFLICT: another caller's stage, or (commit) one
-- not open.
--
-- KEYS:
--   stage  coord:flowstage:<flow>
-- ARGV:
--   ctx      string  the context id
--   flow     string  the flow id
--   caller   string  the caller id
--   now_ms   num     now (ms)
--   op       string  'commit' or 'open'
--   hold_ms  num     the hold while stored (ms)
-- Reply: record whether the flow has a stage, and its range (error: CONFLICT)
--   staged  int  0: no stage of that flow (a flow created without flow.begin), 1: one
--   ...ids  []int  the first and last job ids of its range (staged 1)
-- Derives: DB 0 (SELECT 0): coord:expire (member <ctx>:stage:<flow>).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local caller = ARGV[3]
local now_ms = tonumber(ARGV[4])
local op = ARGV[5]
local hold_ms = tonumber(ARGV[6])
-- luagen: end of the prologue

local st = rcall('HMGET', KEYS[1], 'caller', 'first', 'last', 'ttl_ms', 'state')
if not st[1] then return {0} end
if st[1] ~= caller then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' was begun by caller ' .. st[1] .. ', not ' .. caller)
end
local expires
if op == 'commit' then
  if st[5] ~= 'open' then
    return redis.error_reply('CONFLICT flow ' .. flow .. ' is not open (' .. st[5] .. ')')
  end
  expires = string.format('%d', now_ms + hold_ms)
  rcall('HSET', KEYS[1], 'state', 'storing', 'expires_ms', expires)
else
  if st[5] ~= 'storing' then return {1, tonumber(st[2]), tonumber(st[3])} end
  expires = string.format('%d', now_ms + tonumber(st[4]))
  rcall('HSET', KEYS[1], 'state', 'open', 'expires_ms', expires)
end
rcall('SELECT', '0')
rcall('ZADD', K_EXPIRE, expires, ctx .. ':stage:' .. flow)
return {1, tonumber(st[2]), tonumber(st[3])}
