-- acceptInboundScript: ARGV ctx, dedup key ("" for none), dedup ttl s, caller, now_ms,
-- then the message's field/value pairs (without id). Stores an inbound message and
-- queues it on msg_in with a wake token (and marks the context busy), unless the dedup key says it came already.
-- Returns {1, message key} or {0, ""} for a duplicate.

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
