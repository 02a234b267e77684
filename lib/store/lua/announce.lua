-- announceScript merges names into runner:<id>.<ARGV[3]> (script_types, executors) and
-- counts each once per runner in KEYS[2] (coord:script_types, coord:executors): KEYS
-- runner:<id>, the count hash; ARGV the names (JSON list), now_s, the field, the
-- prefix of the names' queues (queue: or queue:exec:), the runner id. The runner id
-- joins the wakers set of each name's queue (keys.Wakers), so that every job pushed
-- there wakes it; each announce does so again, so a set lost or older than the runner
-- record is whole again at the runner's next start. Reply: 1 when a name was new.

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
    redis.call('HINCRBY', KEYS[2], t, 1)
    changed = true
  end
end
if changed then
  redis.call('HSET', KEYS[1], ARGV[3], cjson.encode(cur), 'updated_at', ARGV[2])
end
for _, t in ipairs(cur) do redis.call('SADD', K_WAKERS .. ARGV[4] .. t, ARGV[5]) end
return changed and 1 or 0
