-- park: checks a claimed job's dependencies and, when some have not finished, moves
-- the job from the processing list to the waiting zset and registers it with each
-- unfinished dependency.
--
-- KEYS:
--   proc     the processing list
--   job      the job hash
--   stop     the stop mark
--   reply    the reply list
--   waiting  the waiting zset
--   ...deps  the n dependencies' job hashes, then their n dependents sets
-- ARGV:
--   id                string  the job id
--   now               string  now (ISO 8601)
--   reply_ttl_ms      int     the reply's TTL (ms)
--   recheck_ms        int     when to check again (ms)
--   member            string  "<worker_id>\t<job_id>"
--   dependents_ttl_ms int     the dependents sets' TTL (ms)
--   n                 num     the number of dependencies
-- Libs: lib_end_stopped
-- Reply: []string {ready} | {waiting, count} | {failed, index} | {stopped} | {dropped} | {lost}.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local id = ARGV[1]
local now = ARGV[2]
local reply_ttl_ms = ARGV[3]
local recheck_ms = ARGV[4]
local member = ARGV[5]
local dependents_ttl_ms = ARGV[6]
local n = tonumber(ARGV[7])
-- luagen: end of the prologue

if not redis.call('LPOS', KEYS[1], id) then return {'lost'} end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('DEL', KEYS[3])
  redis.call('LREM', KEYS[1], 1, id)
  if redis.call('EXISTS', KEYS[2]) == 1 and end_stopped(KEYS[2], KEYS[4], now, reply_ttl_ms) == 1 then return {'stopped'} end
  return {'dropped'}
end
local pending = {}
for i = 1, n do
  local st = string.lower(redis.call('HGET', KEYS[5 + i], 'status') or '')
  if st == ST_ERROR then return {'failed', tostring(i)} end
  if st ~= ST_FINISHED then table.insert(pending, i) end
end
if #pending == 0 then return {'ready'} end
redis.call('LREM', KEYS[1], 1, id)
redis.call('ZADD', KEYS[5], recheck_ms, id)
for _, i in ipairs(pending) do
  local k = KEYS[5 + n + i]
  redis.call('SADD', k, member)
  redis.call('PEXPIRE', k, dependents_ttl_ms)
end
return {'waiting', tostring(#pending)}
