-- split_request: replaces a claimed job request of several jobs by one request each.
-- The new messages go on msg_out (a wake token each); the claimed one is marked
-- processed and its claim released, only while the claim holds it.
--
-- KEYS: [1] msg_out, [2] the processing list, [3] coord:leases.
-- ARGV: [1] context id, [2] caller id, [3] now (s), [4] now (ms), [5] the claimed
--   message's key, [6] its lease member, [7] the flow id, then per job: its id, the
--   number n of its message's field/value items and those n items.
-- Reply: the number of messages pushed (0: the claim no longer held the message).
-- Derives: context DB: message:<caller>:<id> (fresh ids), coord:seq:message,
--   coord:flowmsgs:<flow>; DB 0 (SELECT 0, last): coord:wake:msg_out,
--   coord:busy.

local mo, proc, leases = KEYS[1], KEYS[2], KEYS[3]
local ctx, caller, now_s, now_ms, item, member, flow = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
-- Only while the claim holds the message: a second run of this script (a retry after
-- a lost answer) or a claim lost meanwhile splits nothing again.
if redis.call('LREM', proc, '1', item) == 0 then return 0 end
local i, pushed = 8, 0
while i <= #ARGV do
  local id, nf = ARGV[i], tonumber(ARGV[i + 1])
  local first, last = i + 2, i + 1 + nf
  i = last + 1
  local mk = store_message(caller, first, now_ms, last)
  track_msg(caller, id, mk, flow)
  redis.call('LPUSH', mo, mk)
  pushed = pushed + 1
end
redis.call('HSET', item, 'status', MSG_PROCESSED, 'updated_at', now_s)
redis.call('ZREM', leases, member)
wake_msg_out(ctx, pushed)
return pushed
