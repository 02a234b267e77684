-- heartbeat: refreshes this process's heartbeat, unless another process removed it
-- as stale.
--
-- KEYS: [1] the processes zset.
-- ARGV: [1] process, [2] now (ms).
-- Reply: 1 refreshed, 0 removed (the caller re-registers after giving up what it lost).

if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  return 1
end
return 0
