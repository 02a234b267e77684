-- acquireScript: KEYS the identity key; ARGV value, ttl ms, the value to replace ("":
-- only if free). Sets it when free or when it holds the value to replace; returns
-- the value held before ("" when it was free).

local cur = redis.call('GET', KEYS[1])
if not cur or cur == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return cur or ''
end
return cur
