-- pop_due: removes and returns the members of a due-time zset that are due.
--
-- KEYS: [1] a due-time zset of DB 0 (coord:due, coord:expire or coord:remote_due).
-- ARGV: [1] now (ms), [2] limit.
-- Reply: the members due by now (at most limit), earliest first.

local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(items) do redis.call('ZREM', KEYS[1], m) end
return items
