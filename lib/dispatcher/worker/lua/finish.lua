-- finish: writes a job's end and its reply, and acknowledges the claim, only if this
-- process still holds the claim.
--
-- KEYS:
--   proc    the processing list
--   job     the job hash
--   claims  the claims hash
--   reply   the reply list
--   stop    the stop mark
-- ARGV:
--   id            string  the job id
--   process       string  this process
--   now           string  now (ISO 8601)
--   status        string  finished or error
--   output        string  the output
--   err           string  the error
--   payload       string  the reply's payload
--   reply_ttl_ms  int     the reply's TTL (ms)
-- Reply: int 1 written, 2 claim held but the hash is gone (reply only), 0 claim lost.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local id = ARGV[1]
local process = ARGV[2]
local now = ARGV[3]
local status = ARGV[4]
local output = ARGV[5]
local err = ARGV[6]
local payload = ARGV[7]
local reply_ttl_ms = ARGV[8]
-- luagen: end of the prologue

if redis.call('LREM', KEYS[1], 1, id) == 0 then return 0 end
if redis.call('HGET', KEYS[3], id) == process then redis.call('HDEL', KEYS[3], id) end
redis.call('DEL', KEYS[5])
local wrote = 2
if redis.call('EXISTS', KEYS[2]) == 1 then
  wrote = 1
  if status == ST_FINISHED then
    redis.call('HSET', KEYS[2], 'status', ST_FINISHED, 'output', output, 'updated_at', now)
    redis.call('HDEL', KEYS[2], 'error')
  else
    redis.call('HSET', KEYS[2], 'status', ST_ERROR, 'error', err, 'updated_at', now)
    if output ~= '' then redis.call('HSET', KEYS[2], 'output', output) end
  end
end
redis.call('LPUSH', KEYS[4], payload)
redis.call('PEXPIRE', KEYS[4], reply_ttl_ms)
return wrote
