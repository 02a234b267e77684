-- limit_set: limit.set and limit.delete: a context's limit of one scope is stored
-- (spec "<max running> <rate> <per ms> <burst>") or removed (spec ""), and the job
-- queues that limits parked (coord:limpark) are woken at once, so that a limit
-- raised or removed holds from the next claim (one still limited parks anew). A limit
-- set marks the context as using limits (coord:features "limit": its claims read
-- them); a concurrency key's rate adds "keyrate" (its claims read the jobs' keys), and
-- a change of a key's limit makes the jobs its rate held due for release now
-- (coord:delayed "<ctx>:keyrate:<key>": lua/key_rate_wake.lua). A rate's bucket keeps its tokens across a change (capped at the new burst
-- at its next refill); a removed limit's bucket goes.
--
-- KEYS:
--   limits  coord:limits
-- ARGV:
--   ctx    string  the context id
--   scope  string  the limit's scope
--   spec   string  the limit ("": remove it)
-- Libs: lib_busy lib_wake
-- Reply: int 1 stored, or removed; 0 there was none to remove.
-- Derives: context DB: coord:features, coord:limbucket:<scope>, coord:limpark,
--   coord:ckrate:<key> (a key's scope), coord:wakers:<queue> of the parked queues
--   (lib_wake); DB 0 (SELECT 0, last): coord:delayed and coord:delayedwake (a key's
--   held jobs), their runners' wake lists, coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local scope = ARGV[2]
local spec = ARGV[3]
-- luagen: end of the prologue

local n = 1
if spec == '' then
  n = rcall('HDEL', KEYS[1], scope)
  rcall('DEL', K_LIM_BUCKET .. scope)
else
  rcall('HSET', KEYS[1], scope, spec)
  rcall('SADD', K_FEATURES, 'limit')
end
-- a concurrency key's rate: its claims read the jobs' keys; a change releases the
-- jobs its rate held at once (key_rate_wake, by the new rate)
local ck = string.match(scope, '^key:(.+)$')
local release
if ck then
  if string.match(spec, '^%d+ [1-9]') then rcall('SADD', K_FEATURES, 'keyrate') end
  if rcall('LLEN', K_CK_RATE .. ck) > 0 then
    local tt = rcall('TIME')
    release = tonumber(tt[1]) * 1000 + math.floor(tonumber(tt[2]) / 1000)
  end
end
if release then
  rcall('SELECT', '0')
  rcall('ZADD', K_DELAYED, 'LT', release, ctx .. ':keyrate:' .. ck)
  rcall('PUBLISH', K_DELAYED_WAKE, release)
  rcall('SELECT', ctx)
end
local qs = rcall('SMEMBERS', K_LIM_PARK)
if #qs == 0 then return n end
rcall('DEL', K_LIM_PARK)
local targets = {}
for k, q in ipairs(qs) do targets[k] = wake_targets(q) end
rcall('SELECT', '0')
for k, q in ipairs(qs) do wake_runners(ctx, q, targets[k], 1) end
mark_busy(ctx)
return n
