-- append_log: appends a chunk to a job's log within a size cap.
--
-- KEYS: [1] coord:log:<caller>:<id>.
-- ARGV: [1] the chunk, [2] the cap (bytes).
-- Reply: the log's new length. Past the cap one truncation note is written, then nothing.

local len = redis.call('STRLEN', KEYS[1])
local max = tonumber(ARGV[2])
if len >= max then return len end
local chunk = ARGV[1]
if len + #chunk > max then
  chunk = string.sub(chunk, 1, max - len) .. '\n[log truncated at ' .. max .. ' bytes]\n'
end
return redis.call('APPEND', KEYS[1], chunk)
