-- materialize: creates, on the node that runs it, the job of a request from another
-- node. A job of the same origin is replaced (the origin retried it); a local job with
-- that key is a conflict.
--
-- KEYS: [1] job:<caller>:<id>.
-- ARGV: [1] caller id, [2] job id, [3] the origin's message key, [4] now (s), [5] now (ms),
--   [6…] the job's field/value pairs (with origin, a JSON object holding msg_key and pk).
-- Reply: 1 created, 0 a duplicate of the same request. Error: CONFLICT the key belongs to
--   a local job of this context.
-- Derives (the prelude's keys; context DB): coord:idx:jobs[:<status>], coord:events. A
--   replaced job keeps its msgs (this node's messages about it, deleted with it).

local caller, id, origin_msg, now_s, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local jk = KEYS[1]
local prev = redis.call('HGET', jk, 'origin')
local kept
if redis.call('EXISTS', jk) == 1 then
  if not prev then
    return redis.error_reply('CONFLICT job key ' .. jk .. ' belongs to a local job of this context')
  end
  local ok, o = pcall(cjson.decode, prev)
  if ok and o.msg_key == origin_msg then return 0 end
  local st = redis.call('HGET', jk, 'status')
  if st then redis.call('ZREM', K_JOB_INDEX .. ':' .. st, caller .. ':' .. id) end
  kept = redis.call('HGET', jk, 'msgs') -- this node's messages about the job stay its
  redis.call('DEL', jk)
end
local fields = {}
for i = 6, #ARGV, 2 do
  if ARGV[i] ~= 'msgs' then -- this node's own record, never the origin's to set
    fields[#fields + 1] = ARGV[i]
    fields[#fields + 1] = ARGV[i + 1]
  end
end
if kept then fields[#fields + 1] = 'msgs'; fields[#fields + 1] = kept end
redis.call('HSET', jk, unpack(fields))
redis.call('ZADD', K_JOB_INDEX, now_ms, caller .. ':' .. id)
local st = redis.call('HGET', jk, 'status')
if st then redis.call('ZADD', K_JOB_INDEX .. ':' .. st, now_ms, caller .. ':' .. id) end
event(EV_JOB_CREATED, 'router', now_ms, redis.call('HGET', jk, 'flow_id') or '0', id, caller, st, 'from node ' .. (cjson.decode(redis.call('HGET', jk, 'origin')).pk or '?'))
return 1
