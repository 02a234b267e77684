-- acquire: takes a service replica's identity key when it is free, or when it
-- holds the value to replace (a restart of the same replica).
--
-- KEYS: [1] the identity key.
-- ARGV: [1] value, [2] TTL (ms), [3] the value to replace ("": only if free).
-- Reply: the value held before ("" when the key was free); the key is ours when that is
--   "" or ARGV[3].

local cur = redis.call('GET', KEYS[1])
if not cur or cur == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return cur or ''
end
return cur
