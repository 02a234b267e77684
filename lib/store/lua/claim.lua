-- claim: moves one item from the consuming end of a queue to a processing list and
-- records its lease.
--
-- KEYS:
--   queue   the queue
--   proc    the processing list (coord:proc:<consumer>)
--   leases  coord:leases
-- ARGV:
--   consumer    string  the consumer
--   queue_name  string  the queue's name
--   expiry_ms   int     the lease's expiry (ms)
--   claim       string  the claim's id
-- Reply: string the item, or nil when the queue is empty.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local consumer = ARGV[1]
local queue_name = ARGV[2]
local expiry_ms = ARGV[3]
local claim = ARGV[4]
-- luagen: end of the prologue

local item = rcall('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
if not item then return false end
rcall('ZADD', KEYS[3], expiry_ms, consumer .. '\t' .. queue_name .. '\t' .. item .. '\t' .. claim)
return item
