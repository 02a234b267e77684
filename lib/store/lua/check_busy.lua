-- check_busy: reads what a context has waiting or held, and with tidy keeps its
-- entry in coord:busy true.
--
-- KEYS: [1] msg_out, [2] msg_in, [3] coord:leases, [4] coord:idx:runners, [5] coord:busy
--   (DB 0, SELECT 0).
-- ARGV: [1] context id, [2] tidy (1: remove the context from coord:busy when it has
--   nothing waiting and no lease, add it when it has), [3…] the script types.
-- Reply: {lease count, {list, length}…} of the lists that are not empty.
-- Derives (context DB): queue:<type> of the script types of ARGV (and its
--   coord:prio:queue:<type>, keys.Priority, counted with it) and the pinned queues
--   coord:rq:<runner>:<type> of the runners of coord:idx:runners (read here).

local ctx, tidy = ARGV[1], ARGV[2] == '1'
local out = {}
local function look(q, prio)
  local n = redis.call('LLEN', q)
  if prio then n = n + redis.call('ZCARD', K_PRIO .. q) end
  if n > 0 then out[#out + 1] = q; out[#out + 1] = n end
end
look(KEYS[1])
look(KEYS[2])
local runners = redis.call('ZRANGE', KEYS[4], 0, -1)
for i = 3, #ARGV do
  look(K_QUEUE .. ARGV[i], true)
  for _, r in ipairs(runners) do look(K_PINNED_QUEUE .. r .. ':' .. ARGV[i]) end
end
local leases = redis.call('ZCARD', KEYS[3])
if tidy then
  redis.call('SELECT', '0')
  if #out == 0 and leases == 0 then
    redis.call('ZREM', KEYS[5], ctx)
  else
    redis.call('ZADD', KEYS[5], 'NX', 0, ctx)
  end
end
return {leases, out}
