-- check_busy: reads what a context has waiting or held, and with tidy keeps its
-- entry in coord:busy true.
--
-- KEYS: none; the keys are derived (below).
-- ARGV: [1] context id, [2] tidy (1: remove the context from coord:busy when it has
--   nothing waiting and no lease, add it when it has), [3…] the script types.
-- Reply: {lease count, {list, length}…} of the lists that are not empty.
-- Derives: context DB: msg_out, msg_in, queue:<type> and the pinned queues
--   coord:rq:<runner>:<type> of the runners of coord:idx:runners (the runners are read
--   here), coord:leases; DB 0 (SELECT 0): coord:busy.

local ctx, tidy = ARGV[1], ARGV[2] == '1'
local out = {}
local function look(q)
  local n = redis.call('LLEN', q)
  if n > 0 then out[#out + 1] = q; out[#out + 1] = n end
end
look(K_MSG_OUT)
look(K_MSG_IN)
local runners = redis.call('ZRANGE', K_RUNNER_INDEX, 0, -1)
for i = 3, #ARGV do
  look(K_QUEUE .. ARGV[i])
  for _, r in ipairs(runners) do look(K_PINNED_QUEUE .. r .. ':' .. ARGV[i]) end
end
local leases = redis.call('ZCARD', K_LEASES)
if tidy then
  redis.call('SELECT', 0)
  if #out == 0 and leases == 0 then
    redis.call('ZREM', K_BUSY, ctx)
  else
    redis.call('ZADD', K_BUSY, 'NX', 0, ctx)
  end
end
return {leases, out}
