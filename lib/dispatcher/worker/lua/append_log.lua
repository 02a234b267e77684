-- append_log: appends to a job's bounded Redis copy of its output.
--
-- KEYS: [1] the job's log.
-- ARGV: [1] chunk, [2] max bytes, [3] TTL (ms).
-- Reply: the log's length.

local cur = redis.call('STRLEN', KEYS[1])
local max = tonumber(ARGV[2])
if cur >= max then return cur end
local c = ARGV[1]
if cur + #c > max then
  c = string.sub(c, 1, max - cur) .. '\n[hero] output truncated: Redis keeps the first ' .. max .. ' bytes\n'
end
redis.call('APPEND', KEYS[1], c)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return cur + #c
