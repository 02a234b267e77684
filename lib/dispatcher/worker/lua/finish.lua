-- finish: writes a job's end and its reply, and acknowledges the claim, only if this
-- process still holds the claim.
--
-- KEYS: [1] the processing list, [2] the job hash, [3] the claims hash, [4] the reply
--   list, [5] the stop mark.
-- ARGV: [1] job id, [2] process, [3] now, [4] status (finished|error), [5] output,
--   [6] error, [7] reply payload, [8] reply TTL (ms).
-- Reply: 1 written, 2 claim held but the hash is gone (reply only), 0 claim lost.

if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[3], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[3], ARGV[1]) end
redis.call('DEL', KEYS[5])
local wrote = 2
if redis.call('EXISTS', KEYS[2]) == 1 then
  wrote = 1
  if ARGV[4] == ST_FINISHED then
    redis.call('HSET', KEYS[2], 'status', ST_FINISHED, 'output', ARGV[5], 'updated_at', ARGV[3])
    redis.call('HDEL', KEYS[2], 'error')
  else
    redis.call('HSET', KEYS[2], 'status', ST_ERROR, 'error', ARGV[6], 'updated_at', ARGV[3])
    if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], 'output', ARGV[5]) end
  end
end
redis.call('LPUSH', KEYS[4], ARGV[7])
redis.call('PEXPIRE', KEYS[4], ARGV[8])
return wrote
