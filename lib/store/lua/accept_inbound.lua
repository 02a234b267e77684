-- accept_inbound: stores a message that came from another node and queues it on
-- msg_in for the router, unless its dedup key says it came already.
--
-- KEYS: [1] msg_in, [2] coord:wake:msg_in (DB 0, SELECT 0).
-- ARGV: [1] context id, [2] dedup key ("": none), [3] dedup TTL (s), [4] caller id,
--   [5] now (ms), [6…] the message's field/value pairs (without its id).
-- Reply: {1, message key}, or {0, ""} for a duplicate.
-- Derives: context DB: the dedup key (ARGV: keys.Inbound, named by the router),
--   message:<caller>:<id> (a fresh id from coord:seq:message: only known here),
--   then DB 0 (SELECT 0, the context's server): coord:busy.

local ctx, dedup, ttl, caller, now_ms = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
if dedup ~= '' then
  if redis.call('SET', dedup, '1', 'NX', 'EX', ttl) == false then return {0, ''} end
end
local mk = store_message(caller, 6, now_ms)
redis.call('LPUSH', KEYS[1], mk)
redis.call('SELECT', '0')
redis.call('LPUSH', KEYS[2], ctx)
mark_busy(ctx)
return {1, mk}
