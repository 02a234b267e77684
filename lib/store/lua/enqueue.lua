-- enqueue: pushes items onto a job queue with their wake tokens.
--
-- KEYS: [1] the job queue (queue:<type>, queue:exec:<executor> or coord:rq:<runner>:<type>).
-- ARGV: [1] context id, [2…] the items (LPUSHed in this order).
-- Reply: the number of items pushed.
-- Derives: coord:wakers:<queue> (context DB), then in DB 0 (SELECT 0) the wake lists
--   coord:wake:runner:<id>:<queue> of each runner id that may take the items, and
--   coord:busy (lib_wake, lib_busy).

local n = #ARGV - 1
for i = 2, #ARGV, 1000 do redis.call('LPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV))) end
local ids = wake_targets(KEYS[1])
redis.call('SELECT', '0')
wake_runners(ARGV[1], KEYS[1], ids, n)
mark_busy(ARGV[1])
return n
