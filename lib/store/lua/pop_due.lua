-- pop_due: removes and returns the members of a due-time zset that are due.
--
-- KEYS:
--   due  a due-time zset of DB 0 (coord:due, coord:expire or coord:remote_due)
-- ARGV:
--   now_ms  int  now (ms)
--   limit   num  the most members returned
-- Reply: []string the members due by now (at most limit), earliest first.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local now_ms = ARGV[1]
local limit = tonumber(ARGV[2])
-- luagen: end of the prologue

local items = rcall('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, limit)
for _, m in ipairs(items) do rcall('ZREM', KEYS[1], m) end
return items
