-- park: checks a claimed job's dependencies and, when some have not finished, moves
-- the job from the processing list to the waiting zset and registers it with each
-- unfinished dependency.
--
-- KEYS: [1] the processing list, [2] the job hash, [3] the stop mark, [4] the reply list,
--   [5] the waiting zset, [6 … 5+n] the dependencies' job hashes, [6+n … 5+2n] their
--   dependents sets.
-- ARGV: [1] job id, [2] now, [3] reply TTL (ms), [4] re-check at (ms), [5] member
--   "<worker_id>\t<job_id>", [6] dependents TTL (ms), [7] n.
-- Reply: {ready} | {waiting, count} | {failed, index} | {stopped} | {dropped} | {lost}.

local n = tonumber(ARGV[7])
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return {'lost'} end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('DEL', KEYS[3])
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  if redis.call('EXISTS', KEYS[2]) == 1 and end_stopped(KEYS[2], KEYS[4], ARGV[2], ARGV[3]) == 1 then return {'stopped'} end
  return {'dropped'}
end
local pending = {}
for i = 1, n do
  local st = string.lower(redis.call('HGET', KEYS[5 + i], 'status') or '')
  if st == ST_ERROR then return {'failed', tostring(i)} end
  if st ~= ST_FINISHED then table.insert(pending, i) end
end
if #pending == 0 then return {'ready'} end
redis.call('LREM', KEYS[1], 1, ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[1])
for _, i in ipairs(pending) do
  local k = KEYS[5 + n + i]
  redis.call('SADD', k, ARGV[5])
  redis.call('PEXPIRE', k, ARGV[6])
end
return {'waiting', tostring(#pending)}
