-- announce: merges names into a field of a runner record (script_types or executors)
-- and counts each name once per runner.
--
-- KEYS:
--   runner  runner:<id>
--   counts  the count hash (coord:script_types or coord:executors)
-- ARGV:
--   names      json    the names (a JSON list)
--   now_s      int     now (s)
--   field      string  the field
--   prefix     string  the prefix of the names' queues (queue: or queue:exec:)
--   runner_id  int     the runner's id
-- Reply: int 1 when a name was new, else 0. Error: ERR runner does not exist.
-- Derives: coord:wakers:<prefix><name> (context DB) for every name the runner has: the
--   runner id joins the wakers set of each of its queues, so that every job pushed there
--   wakes it; each announce does so again, so a set lost or older than the runner record
--   is whole again at the runner's next start.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local names = ARGV[1]
local now_s = ARGV[2]
local field = ARGV[3]
local prefix = ARGV[4]
local runner_id = ARGV[5]
-- luagen: end of the prologue

if rcall('EXISTS', KEYS[1]) == 0 then return redis.error_reply('ERR runner does not exist') end
local have = rcall('HGET', KEYS[1], field)
local cur = {}
if have and have ~= '' then
  local ok, v = pcall(cjson.decode, have)
  if ok and type(v) == 'table' then cur = v end
end
local set = {}
for _, t in ipairs(cur) do set[t] = true end
local changed = false
for _, t in ipairs(cjson.decode(names)) do
  if not set[t] then
    set[t] = true
    cur[#cur + 1] = t
    rcall('HINCRBY', KEYS[2], t, '1')
    changed = true
  end
end
if changed then
  rcall('HSET', KEYS[1], field, cjson.encode(cur), 'updated_at', now_s)
end
for _, t in ipairs(cur) do rcall('SADD', K_WAKERS .. prefix .. t, runner_id) end
return changed and 1 or 0
