-- extend: extends a claim's lease while it is held.
--
-- KEYS: [1] coord:leases.
-- ARGV: [1] the lease member, [2] the new expiry (ms).
-- Reply: 1 extended, 0 the lease is gone (the claim was taken back).

if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  return 1
end
return 0
