-- appendLogScript: KEYS log; ARGV chunk, max bytes, ttl seconds (0 none). Appends
-- within the cap; past it, one truncation note. Returns the new length.

local len = redis.call('STRLEN', KEYS[1])
local max = tonumber(ARGV[2])
if len >= max then return len end
local chunk = ARGV[1]
if len + #chunk > max then
  chunk = string.sub(chunk, 1, max - len) .. '\n[log truncated at ' .. max .. ' bytes]\n'
end
return redis.call('APPEND', KEYS[1], chunk)
