-- announce: merges names into a field of a runner record (script_types or executors)
-- and counts each name once per runner.
--
-- KEYS: [1] runner:<id>, [2] the count hash (coord:script_types or coord:executors).
-- ARGV: [1] the names (JSON list), [2] now (s), [3] the field, [4] the prefix of the
--   names' queues (queue: or queue:exec:), [5] the runner id.
-- Reply: 1 when a name was new, else 0. Error: ERR runner does not exist.
-- Derives: coord:wakers:<prefix><name> (context DB) for every name the runner has: the
--   runner id joins the wakers set of each of its queues, so that every job pushed there
--   wakes it; each announce does so again, so a set lost or older than the runner record
--   is whole again at the runner's next start.

if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('ERR runner does not exist') end
local have = redis.call('HGET', KEYS[1], ARGV[3])
local cur = {}
if have and have ~= '' then
  local ok, v = pcall(cjson.decode, have)
  if ok and type(v) == 'table' then cur = v end
end
local set = {}
for _, t in ipairs(cur) do set[t] = true end
local changed = false
for _, t in ipairs(cjson.decode(ARGV[1])) do
  if not set[t] then
    set[t] = true
    cur[#cur + 1] = t
    redis.call('HINCRBY', KEYS[2], t, '1')
    changed = true
  end
end
if changed then
  redis.call('HSET', KEYS[1], ARGV[3], cjson.encode(cur), 'updated_at', ARGV[2])
end
for _, t in ipairs(cur) do redis.call('SADD', K_WAKERS .. ARGV[4] .. t, ARGV[5]) end
return changed and 1 or 0
