-- acquire: takes a service replica's identity key when it is free, or when it
-- holds the value to replace (a restart of the same replica).
--
-- KEYS:
--   identity  the identity key
-- ARGV:
--   value    string  this replica's value
--   ttl_ms   int     TTL (ms)
--   replace  string  the value to replace ("": only if free)
-- Reply: string the value held before ("" when the key was free); the key is ours when
--   that is "" or replace.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local value = ARGV[1]
local ttl_ms = ARGV[2]
local replace = ARGV[3]
-- luagen: end of the prologue

local cur = rcall('GET', KEYS[1])
if not cur or cur == replace then
  rcall('SET', KEYS[1], value, 'PX', ttl_ms)
  return cur or ''
end
return cur
