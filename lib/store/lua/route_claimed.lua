-- route_claimed: acknowledges claimed job request messages and pushes their jobs onto
-- their queues, with their wake tokens. A message is routed only while the claim holds
-- it (LREM from the processing list): a second run (a retry after a lost answer) or a
-- claim lost meanwhile queues no job twice.
--
-- KEYS:
--   proc    the processing list
--   leases  coord:leases
-- ARGV:
--   ctx       int      the context id
--   now_s     int      now (s)
--   messages  []claimed  the claimed messages
--     key     string   the message's key
--     member  string   its lease member
--     target  string   the target queue
--     job     string   the job's key
-- Libs: lib_busy lib_wake
-- Reply: int the number of messages routed.
-- Derives: the messages, target queues and coord:wakers:<queue> (named in ARGV; context
--   DB), then in DB 0 (SELECT 0) coord:wake:runner:<id>:<queue> and coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local now_s = ARGV[2]
local argi = 3
local messages
local n_messages = tonumber(ARGV[argi])
messages = {}
argi = argi + 1
for k = 1, n_messages do
  messages[k] = {key = ARGV[argi], member = ARGV[argi + 1], target = ARGV[argi + 2], job = ARGV[argi + 3]}
  argi = argi + 4
end
-- luagen: end of the prologue

local proc, leases = KEYS[1], KEYS[2]
local tokens, targets = {}, {}
local n = 0
for _, m in ipairs(messages) do
  local mk, member, target, jk = m.key, m.member, m.target, m.job
  if rcall('LREM', proc, '-1', mk) == 1 then -- from the tail: the oldest claims
    rcall('ZREM', leases, member)
    rcall('HSET', mk, 'status', MSG_ACKNOWLEDGED, 'updated_at', now_s)
    rcall('LPUSH', target, jk)
    if not tokens[target] then tokens[target] = 0; targets[#targets + 1] = target end
    tokens[target] = tokens[target] + 1
    n = n + 1
  end
end
if #targets > 0 then
  local wakers = {}
  for _, t in ipairs(targets) do wakers[t] = wake_targets(t) end
  rcall('SELECT', '0')
  for _, t in ipairs(targets) do wake_runners(ctx, t, wakers[t], tokens[t]) end
  mark_busy(ctx)
end
return n
