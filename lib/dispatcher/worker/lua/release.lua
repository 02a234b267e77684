-- release: puts a waiting job back at the consuming end of its work queue, exactly
-- once.
--
-- KEYS: [1] the waiting zset, [2] the work queue.
-- ARGV: [1] job id.
-- Reply: 1 released, 0 it was not waiting.

if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[1])
  return 1
end
return 0
