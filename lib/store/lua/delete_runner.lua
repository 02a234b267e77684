-- delete_runner: removes a runner record, its process heartbeats and its pinned
-- queues. The runner leaves the context's wakers sets of every script type and of the
-- executors it announced, and its wake lists lose the context's tokens.
--
-- KEYS:
--   runner  runner:<id>
--   procs   coord:runner:<id>:procs
-- ARGV:
--   ctx     int     the context id
--   id      int     the runner id
--   force   bool    even with jobs waiting in its pinned queues
--   actor   string  who deletes
--   now_ms  int     now (ms)
--   types   json    every known script type (a JSON list)
-- Libs: lib_busy lib_state
-- Reply: int 1. Errors: NOTFOUND runner; CONFLICT jobs are pinned to it.
-- Derives, from the script types and the runner's executors: context DB: coord:rq:<id>:<type>,
--   coord:script_types, coord:wakers:<queue>, coord:idx:runners, coord:events; DB 0
--   (SELECT 0; the lists are shared with the server's other contexts):
--   coord:wake:runner:<id>:<queue>, coord:runner:<id>:contexts, coord:control (PUBLISH).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local id = ARGV[2]
local force = ARGV[3] == '1'
local actor = ARGV[4]
local now_ms = ARGV[5]
local types = ARGV[6]
-- luagen: end of the prologue

local rk = KEYS[1]
if rcall('EXISTS', rk) == 0 then return redis.error_reply('NOTFOUND runner') end
local all = cjson.decode(types)
if not force then
  for _, t in ipairs(all) do
    local n = rcall('LLEN', K_PINNED_QUEUE .. id .. ':' .. t)
    if n > 0 then
      return redis.error_reply('CONFLICT runner ' .. id .. ' has ' .. n .. ' job(s) pinned to it waiting in coord:rq:' .. id .. ':' .. t .. '; delete them or delete with force')
    end
  end
end
local have = rcall('HGET', rk, 'script_types')
if have and have ~= '' then
  for _, t in ipairs(cjson.decode(have)) do
    if rcall('HINCRBY', K_SCRIPT_TYPES, t, -1) <= 0 then rcall('HDEL', K_SCRIPT_TYPES, t) end
  end
end
local queues = {}
for _, t in ipairs(all) do queues[#queues + 1] = K_QUEUE .. t end
local ex = rcall('HGET', rk, 'executors')
if ex and ex ~= '' then
  local ok, v = pcall(cjson.decode, ex)
  if ok and type(v) == 'table' then
    for _, e in ipairs(v) do queues[#queues + 1] = K_QUEUE .. 'exec:' .. e end
  end
end
for _, q in ipairs(queues) do rcall('SREM', K_WAKERS .. q, id) end
local dels = {rk, KEYS[2]}
for _, t in ipairs(all) do dels[#dels + 1] = K_PINNED_QUEUE .. id .. ':' .. t end
rcall('UNLINK', unpack(dels))
rcall('ZREM', K_RUNNER_INDEX, id)
event(EV_RUNNER_DELETED, actor, now_ms, '0', '0', '0', '', 'runner ' .. id)
rcall('SELECT', '0')
for _, q in ipairs(queues) do
  rcall('LREM', K_WAKE_RUNNER .. id .. ':' .. q, '0', ctx)
  if string.sub(q, 1, 6) == K_QUEUE then
    rcall('LREM', K_WAKE_RUNNER .. id .. ':' .. K_PINNED_QUEUE .. id .. ':' .. string.sub(q, 7), 0, ctx)
  end
end
rcall('SREM', K_RUNNER_COORD .. id .. ':contexts', ctx)
rcall('PUBLISH', K_CONTROL, 'runner-deleted:' .. ctx .. ':' .. id)
return 1
