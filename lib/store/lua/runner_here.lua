-- runner_here: says whether a runner record exists in this context and keeps the
-- server's index of the runner's contexts true for it, in one step.
--
-- KEYS: [1] runner:<id> (context DB), [2] coord:runner:<id>:contexts (DB 0, SELECT 0).
-- ARGV: [1] runner id, [2] context id.
-- Reply: 1 when the runner exists (the context is then in the index), 0 when not (it is
--   not).

local here = redis.call('EXISTS', KEYS[1])
redis.call('SELECT', '0')
if here == 1 then
  redis.call('SADD', KEYS[2], ARGV[2])
else
  redis.call('SREM', KEYS[2], ARGV[2])
end
return here
