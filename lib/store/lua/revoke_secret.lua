-- revokeSecretScript marks a record revoked, or stores a revoked record (a configured
-- secret, which is stored only once revoked).
--
-- KEYS[1] coord:operator_secrets. ARGV: fingerprint, the record to store when there
-- is none, revoked_ms, reason. Reply: 1 revoked now, 0 was revoked already.

local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
local r = cjson.decode(cur)
if r.revoked_ms and r.revoked_ms > 0 then return 0 end
r.revoked_ms = tonumber(ARGV[3])
r.reason = ARGV[4]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(r))
return 1
