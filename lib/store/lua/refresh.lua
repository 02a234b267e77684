-- refresh: extends a replica's hold on its identity key, or takes it again when it
-- expired (Redis was away longer than the TTL).
--
-- KEYS: [1] the identity key.
-- ARGV: [1] value, [2] TTL (ms).
-- Reply: the value that holds the key now (ours when it is ARGV[1]).

local cur = redis.call('GET', KEYS[1])
if not cur or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
return cur
