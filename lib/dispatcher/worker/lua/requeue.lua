-- requeue: hands every job of one of our processes back to its work queue (at the
-- consuming end, oldest first) and removes the process: for a process that stopped
-- heart-beating (only if its heartbeat is still older than the cutoff), or for this
-- process at shutdown (cutoff "-").
--
-- KEYS:
--   procs     the processes zset
--   process   the process's key
--   control   its control list
--   claims    the claims hash
--   ...lists  (processing list, work queue) pairs
-- ARGV:
--   process  string  the process
--   cutoff   string  cutoff (ms), or "-"
--   now      string  now (ISO 8601)
--   prefix   string  the job key prefix
-- Reply: int the number of jobs moved, or -1 when the process is alive after all.
-- Derives: the job hash <prefix><id> of each job moved (the ids are only known here,
--   popped from the processing lists; the protocol runs on one Redis server).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local process = ARGV[1]
local cutoff = ARGV[2]
local now = ARGV[3]
local prefix = ARGV[4]
-- luagen: end of the prologue

if cutoff ~= '-' then
  local s = redis.call('ZSCORE', KEYS[1], process)
  if s and tonumber(s) > tonumber(cutoff) then return -1 end
end
local n = 0
for i = 5, #KEYS, 2 do
  while true do
    local id = redis.call('LPOP', KEYS[i])
    if not id then break end
    redis.call('RPUSH', KEYS[i + 1], id)
    if redis.call('HGET', KEYS[4], id) == process then
      redis.call('HDEL', KEYS[4], id)
      local jk = prefix .. id
      if redis.call('HGET', jk, 'status') == ST_STARTED then
        redis.call('HSET', jk, 'status', ST_DISPATCHED, 'updated_at', now)
      end
    end
    n = n + 1
  end
end
redis.call('ZREM', KEYS[1], process)
redis.call('DEL', KEYS[2], KEYS[3])
return n
