-- revoke_secret: marks an operator secret's record revoked, or stores a revoked
-- record (a configured secret, which is stored only once revoked), and tells
-- supervisor-daemon's replicas (their open streams of that secret end).
--
-- KEYS: [1] coord:operator_secrets (primary server, DB 0).
-- ARGV: [1] fingerprint, [2] the record to store when there is none, [3] revoked_ms,
--   [4] reason.
-- Reply: 1 revoked now, 0 revoked already.
-- Derives: K_AUTH_CHANGED, the pub/sub channel of credential changes; its message is
--   "secret:<fingerprint>".

local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('PUBLISH', K_AUTH_CHANGED, 'secret:' .. ARGV[1])
  return 1
end
local r = cjson.decode(cur)
if r.revoked_ms and r.revoked_ms > 0 then return 0 end
r.revoked_ms = tonumber(ARGV[3])
r.reason = ARGV[4]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(r))
redis.call('PUBLISH', K_AUTH_CHANGED, 'secret:' .. ARGV[1])
return 1
