-- start: marks a claimed job started.
--
-- KEYS: [1] the worker's processing list, [2] the job hash, [3] the claims hash (job id →
--   process), [4] the job's stop mark, [5] its reply list, [6] its log.
-- ARGV: [1] job id, [2] process, [3] now (ISO 8601), [4] reply TTL (ms).
-- Reply: ok | lost (no longer in our processing list) | gone (no hash) | stopped |
--   dropped (stopped before, by the process that took the stop request).

if not redis.call('LPOS', KEYS[1], ARGV[1]) then return 'lost' end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  return 'gone'
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('DEL', KEYS[4])
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  if end_stopped(KEYS[2], KEYS[5], ARGV[3], ARGV[4]) == 1 then return 'stopped' end
  return 'dropped'
end
redis.call('HSET', KEYS[2], 'status', ST_STARTED, 'updated_at', ARGV[3])
redis.call('HDEL', KEYS[2], 'output', 'error')
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('DEL', KEYS[6])
return 'ok'
