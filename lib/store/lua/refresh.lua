-- refresh: extends a replica's hold on its identity key, or takes it again when it
-- expired (Redis was away longer than the TTL).
--
-- KEYS:
--   identity  the identity key
-- ARGV:
--   value   string  this replica's value
--   ttl_ms  int     TTL (ms)
-- Reply: string the value that holds the key now (ours when it is value).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local value = ARGV[1]
local ttl_ms = ARGV[2]
-- luagen: end of the prologue

local cur = rcall('GET', KEYS[1])
if not cur or cur == value then
  rcall('SET', KEYS[1], value, 'PX', ttl_ms)
  return value
end
return cur
