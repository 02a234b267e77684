-- stop: handles a stop request for a job that does not run in the process that popped
-- the request.
--
-- KEYS: [1] the job hash, [2] the claims hash, [3] the stop mark, [4] the waiting zset,
--   [5] the reply list.
-- ARGV: [1] job id, [2] now, [3] stop mark TTL (ms), [4] reply TTL (ms).
-- Reply: {claimed, process} | {final, status} | {foreign} | {stopped} | {missing}.

if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local owner = redis.call('HGET', KEYS[2], ARGV[1])
if owner then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
  return {'claimed', owner}
end
local st = string.lower(redis.call('HGET', KEYS[1], 'status') or '')
if st == ST_FINISHED or st == ST_ERROR then return {'final', st} end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
if st == ST_STARTED then return {'foreign'} end
redis.call('ZREM', KEYS[4], ARGV[1])
end_stopped(KEYS[1], KEYS[5], ARGV[2], ARGV[4])
return {'stopped'}
