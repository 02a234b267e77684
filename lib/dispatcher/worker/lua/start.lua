-- start: marks a claimed job started.
--
-- KEYS:
--   proc    the worker's processing list
--   job     the job hash
--   claims  the claims hash (job id → process)
--   stop    the job's stop mark
--   reply   its reply list
--   log     its log
-- ARGV:
--   id            string  the job id
--   process       string  this process
--   now           string  now (ISO 8601)
--   reply_ttl_ms  int     the reply's TTL (ms)
-- Libs: lib_end_stopped
-- Reply: string ok | lost (no longer in our processing list) | gone (no hash) | stopped |
--   dropped (stopped before, by the process that took the stop request).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local id = ARGV[1]
local process = ARGV[2]
local now = ARGV[3]
local reply_ttl_ms = ARGV[4]
-- luagen: end of the prologue

if not redis.call('LPOS', KEYS[1], id) then return 'lost' end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('LREM', KEYS[1], 1, id)
  return 'gone'
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('DEL', KEYS[4])
  redis.call('LREM', KEYS[1], 1, id)
  if end_stopped(KEYS[2], KEYS[5], now, reply_ttl_ms) == 1 then return 'stopped' end
  return 'dropped'
end
redis.call('HSET', KEYS[2], 'status', ST_STARTED, 'updated_at', now)
redis.call('HDEL', KEYS[2], 'output', 'error')
redis.call('HSET', KEYS[3], id, process)
redis.call('DEL', KEYS[6])
return 'ok'
