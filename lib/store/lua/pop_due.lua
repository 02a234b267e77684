-- popDueScript: KEYS a due-time zset of DB 0 (coord:due, coord:expire or
-- coord:remote_due); ARGV now ms, limit. Removes and returns the members due by now
-- (at most limit). Reply: the members, earliest first.

local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(items) do redis.call('ZREM', KEYS[1], m) end
return items
