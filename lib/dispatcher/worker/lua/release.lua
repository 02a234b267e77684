-- release: puts a waiting job back at the consuming end of its work queue, exactly
-- once.
--
-- KEYS:
--   waiting  the waiting zset
--   queue    the work queue
-- ARGV:
--   id  string  the job id
-- Reply: int 1 released, 0 it was not waiting.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local id = ARGV[1]
-- luagen: end of the prologue

if redis.call('ZREM', KEYS[1], id) == 1 then
  redis.call('RPUSH', KEYS[2], id)
  return 1
end
return 0
