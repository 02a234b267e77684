-- runnerHereScript says whether runner:<id> exists in this context and keeps the
-- server's index of the runner's contexts (keys.RunnerContexts, DB 0) true for it, in
-- one step: KEYS none; ARGV runner id, context id. Returns 1 when the runner exists
-- (the context is then in the index), 0 when not (the context is not).

local here = redis.call('EXISTS', K_RUNNER .. ARGV[1])
redis.call('SELECT', 0)
if here == 1 then
  redis.call('SADD', K_RUNNER_COORD .. ARGV[1] .. ':contexts', ARGV[2])
else
  redis.call('SREM', K_RUNNER_COORD .. ARGV[1] .. ':contexts', ARGV[2])
end
return here
