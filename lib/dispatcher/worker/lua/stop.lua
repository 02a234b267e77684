-- stop: handles a stop request for a job that does not run in the process that popped
-- the request.
--
-- KEYS:
--   job      the job hash
--   claims   the claims hash
--   stop     the stop mark
--   waiting  the waiting zset
--   reply    the reply list
-- ARGV:
--   id            string  the job id
--   now           string  now (ISO 8601)
--   stop_ttl_ms   int     the stop mark's TTL (ms)
--   reply_ttl_ms  int     the reply's TTL (ms)
-- Libs: lib_end_stopped
-- Reply: []string {claimed, process} | {final, status} | {foreign} | {stopped} | {missing}.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local id = ARGV[1]
local now = ARGV[2]
local stop_ttl_ms = ARGV[3]
local reply_ttl_ms = ARGV[4]
-- luagen: end of the prologue

if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local owner = redis.call('HGET', KEYS[2], id)
if owner then
  redis.call('SET', KEYS[3], '1', 'PX', stop_ttl_ms)
  return {'claimed', owner}
end
local st = string.lower(redis.call('HGET', KEYS[1], 'status') or '')
if st == ST_FINISHED or st == ST_ERROR then return {'final', st} end
redis.call('SET', KEYS[3], '1', 'PX', stop_ttl_ms)
if st == ST_STARTED then return {'foreign'} end
redis.call('ZREM', KEYS[4], id)
end_stopped(KEYS[1], KEYS[5], now, reply_ttl_ms)
return {'stopped'}
