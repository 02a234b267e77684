-- accept_inbound: stores a message that came from another node and queues it on
-- msg_in for the router, unless its dedup key says it came already.
--
-- KEYS: none; the keys are derived (below).
-- ARGV: [1] context id, [2] dedup key ("": none), [3] dedup TTL (s), [4] caller id,
--   [5] now (ms), [6…] the message's field/value pairs (without its id).
-- Reply: {1, message key}, or {0, ""} for a duplicate.
-- Derives: context DB: the dedup key (ARGV, its name made by lib/remote), message:<caller>:<id>
--   (a fresh id from coord:seq:message), coord:idx:messages, msg_in; then DB 0 (SELECT 0, the
--   context's server): coord:wake:msg_in and coord:busy (the router's wake-up).

local ctx, dedup, ttl, caller, now_ms = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
if dedup ~= '' then
  if redis.call('SET', dedup, '1', 'NX', 'EX', ttl) == false then return {0, ''} end
end
local mk = store_message(caller, 6, now_ms)
redis.call('LPUSH', K_MSG_IN, mk)
redis.call('SELECT', 0)
redis.call('LPUSH', K_WAKE_MSG_IN, ctx)
mark_busy(ctx)
return {1, mk}
