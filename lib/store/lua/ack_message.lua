-- ack_message: a request message sent to another node moves dispatched →
-- acknowledged, once (the far node queued its job).
--
-- KEYS: [1] message:<caller>:<id>.
-- ARGV: [1] now (s), [2] now (ms).
-- Reply: 1 acknowledged now, 0 it was not dispatched (gone, or acknowledged already).

if redis.call('HGET', KEYS[1], 'status') == MSG_DISPATCHED then
  redis.call('HSET', KEYS[1], 'status', MSG_ACKNOWLEDGED, 'acked_at_ms', ARGV[2], 'updated_at', ARGV[1])
  return 1
end
return 0
