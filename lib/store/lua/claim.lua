-- claimScript: KEYS queue, processing list, leases; ARGV consumer, queue name, expiry
-- ms, claim id.

local item = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
if not item then return false end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1] .. '\t' .. ARGV[2] .. '\t' .. item .. '\t' .. ARGV[4])
return item
