-- append_log: appends to a job's bounded Redis copy of its output.
--
-- KEYS:
--   log  the job's log
-- ARGV:
--   chunk   string  the chunk
--   max     num     the most bytes kept
--   ttl_ms  int     the log's TTL (ms)
-- Reply: int the log's length.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local chunk = ARGV[1]
local max = tonumber(ARGV[2])
local ttl_ms = ARGV[3]
-- luagen: end of the prologue

local cur = redis.call('STRLEN', KEYS[1])
if cur >= max then return cur end
local c = chunk
if cur + #c > max then
  c = string.sub(c, 1, max - cur) .. '\n[hero] output truncated: Redis keeps the first ' .. max .. ' bytes\n'
end
redis.call('APPEND', KEYS[1], c)
redis.call('PEXPIRE', KEYS[1], ttl_ms)
return cur + #c
