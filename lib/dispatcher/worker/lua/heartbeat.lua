-- heartbeat: refreshes this process's heartbeat, unless another process removed it
-- as stale.
--
-- KEYS:
--   procs  the processes zset
-- ARGV:
--   process  string  this process
--   now_ms   int     now (ms)
-- Reply: int 1 refreshed, 0 removed (the caller re-registers after giving up what it lost).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local process = ARGV[1]
local now_ms = ARGV[2]
-- luagen: end of the prologue

if redis.call('ZSCORE', KEYS[1], process) then
  redis.call('ZADD', KEYS[1], now_ms, process)
  return 1
end
return 0
