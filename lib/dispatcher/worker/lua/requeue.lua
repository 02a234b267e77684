-- requeue: hands every job of one of our processes back to its work queue (at the
-- consuming end, oldest first) and removes the process: for a process that stopped
-- heart-beating (only if its heartbeat is still older than the cutoff), or for this
-- process at shutdown (cutoff "-").
--
-- KEYS: [1] the processes zset, [2] the process's key, [3] its control list, [4] the
--   claims hash, then (processing list, work queue) pairs.
-- ARGV: [1] process, [2] cutoff (ms) or "-", [3] now, [4] the job key prefix.
-- Reply: the number of jobs moved, or -1 when the process is alive after all.
-- Derives: the job hash <prefix><id> of each job moved (the ids are only known here,
--   popped from the processing lists; the protocol runs on one Redis server).

if ARGV[2] ~= '-' then
  local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if s and tonumber(s) > tonumber(ARGV[2]) then return -1 end
end
local n = 0
for i = 5, #KEYS, 2 do
  while true do
    local id = redis.call('LPOP', KEYS[i])
    if not id then break end
    redis.call('RPUSH', KEYS[i + 1], id)
    if redis.call('HGET', KEYS[4], id) == ARGV[1] then
      redis.call('HDEL', KEYS[4], id)
      local jk = ARGV[4] .. id
      if redis.call('HGET', jk, 'status') == ST_STARTED then
        redis.call('HSET', jk, 'status', ST_DISPATCHED, 'updated_at', ARGV[3])
      end
    end
    n = n + 1
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3])
return n
