-- limit_set: limit.set and limit.delete: a context's limit of one scope is stored
-- (spec "<max running> <rate> <per ms> <burst>") or removed (spec ""), and the job
-- queues that limits parked (coord:limpark) are woken at once, so that a limit
-- raised or removed holds from the next claim (one still limited parks anew). A limit
-- set marks the context as using limits (coord:features "limit": its claims read
-- them). A rate's bucket keeps its tokens across a change (capped at the new burst
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
--   coord:wakers:<queue> of the parked queues (lib_wake); DB 0 (SELECT 0, last): their
--   runners' wake lists, coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local scope = ARGV[2]
local spec = ARGV[3]
-- luagen: end of the prologue

local n = 1
if spec == '' then
  n = redis.call('HDEL', KEYS[1], scope)
  redis.call('DEL', K_LIM_BUCKET .. scope)
else
  redis.call('HSET', KEYS[1], scope, spec)
  redis.call('SADD', K_FEATURES, 'limit')
end
local qs = redis.call('SMEMBERS', K_LIM_PARK)
if #qs == 0 then return n end
redis.call('DEL', K_LIM_PARK)
local targets = {}
for k, q in ipairs(qs) do targets[k] = wake_targets(q) end
redis.call('SELECT', '0')
for k, q in ipairs(qs) do wake_runners(ctx, q, targets[k], 1) end
mark_busy(ctx)
return n
