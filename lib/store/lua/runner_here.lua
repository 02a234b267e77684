-- runner_here: says whether a runner record exists in this context and keeps the
-- server's index of the runner's contexts true for it, in one step.
--
-- KEYS: none; the keys are derived (below).
-- ARGV: [1] runner id, [2] context id.
-- Reply: 1 when the runner exists (the context is then in the index), 0 when not (it is
--   not).
-- Derives: runner:<id> (context DB), then coord:runner:<id>:contexts (DB 0, SELECT 0).

local here = redis.call('EXISTS', K_RUNNER .. ARGV[1])
redis.call('SELECT', 0)
if here == 1 then
  redis.call('SADD', K_RUNNER_COORD .. ARGV[1] .. ':contexts', ARGV[2])
else
  redis.call('SREM', K_RUNNER_COORD .. ARGV[1] .. ':contexts', ARGV[2])
end
return here
