-- ack_message: a request message sent to another node moves dispatched →
-- acknowledged, once (the far node queued its job).
--
-- KEYS:
--   message  message:<caller>:<id>
-- ARGV:
--   now_s   int  now (s)
--   now_ms  int  now (ms)
-- Reply: int 1 acknowledged now, 0 it was not dispatched (gone, or acknowledged already).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local now_s = ARGV[1]
local now_ms = ARGV[2]
-- luagen: end of the prologue

if rcall('HGET', KEYS[1], 'status') == MSG_DISPATCHED then
  rcall('HSET', KEYS[1], 'status', MSG_ACKNOWLEDGED, 'acked_at_ms', now_ms, 'updated_at', now_s)
  return 1
end
return 0
