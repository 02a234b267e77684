-- claim: moves one item from the consuming end of a queue to a processing list and
-- records its lease.
--
-- KEYS: [1] the queue, [2] the processing list (coord:proc:<consumer>), [3] coord:leases.
-- ARGV: [1] consumer, [2] queue name, [3] lease expiry (ms), [4] claim id.
-- Reply: the item, or nil when the queue is empty.

local item = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
if not item then return false end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1] .. '\t' .. ARGV[2] .. '\t' .. item .. '\t' .. ARGV[4])
return item
