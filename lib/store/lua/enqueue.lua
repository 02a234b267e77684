-- enqueueScript pushes items onto a job queue with their wake tokens: KEYS the queue;
-- ARGV context id, then the items (LPUSHed in this order). One token per item goes
-- onto the queue's wake list of each runner id that may take it (LuaWake), and the
-- context is marked busy (DB 0). Reply: the number of items pushed.

local n = #ARGV - 1
for i = 2, #ARGV, 1000 do redis.call('LPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV))) end
local ids = wake_targets(KEYS[1])
redis.call('SELECT', 0)
wake_runners(ARGV[1], KEYS[1], ids, n)
mark_busy(ARGV[1])
return n
