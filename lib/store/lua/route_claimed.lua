-- route_claimed: acknowledges claimed job request messages and pushes their jobs onto
-- their queues, with their wake tokens. A message is routed only while the claim holds
-- it (LREM from the processing list): a second run (a retry after a lost answer) or a
-- claim lost meanwhile queues no job twice.
--
-- KEYS: [1] the processing list, [2] coord:leases.
-- ARGV: [1] context id, [2] now (s), then per message 4 items: its key, its lease
--   member, the target queue, the job key.
-- Reply: the number of messages routed.
-- Derives: the messages, target queues and coord:wakers:<queue> (named in ARGV; context
--   DB), then in DB 0 (SELECT 0) coord:wake:runner:<id>:<queue> and coord:busy.

local proc, leases = KEYS[1], KEYS[2]
local now_s = ARGV[2]
local tokens, targets = {}, {}
local n = 0
for i = 3, #ARGV, 4 do
  local mk, member, target, jk = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('LREM', proc, '-1', mk) == 1 then -- from the tail: the oldest claims
    redis.call('ZREM', leases, member)
    redis.call('HSET', mk, 'status', MSG_ACKNOWLEDGED, 'updated_at', now_s)
    redis.call('LPUSH', target, jk)
    if not tokens[target] then tokens[target] = 0; targets[#targets + 1] = target end
    tokens[target] = tokens[target] + 1
    n = n + 1
  end
end
if #targets > 0 then
  local wakers = {}
  for _, t in ipairs(targets) do wakers[t] = wake_targets(t) end
  redis.call('SELECT', '0')
  for _, t in ipairs(targets) do wake_runners(ARGV[1], t, wakers[t], tokens[t]) end
  mark_busy(ARGV[1])
end
return n
