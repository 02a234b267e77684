-- refreshScript: KEYS the identity key; ARGV value, ttl ms. Extends the hold, or takes
-- the id again when it expired (Redis was away longer than the TTL); returns the
-- value that holds it now.

local cur = redis.call('GET', KEYS[1])
if not cur or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
return cur
