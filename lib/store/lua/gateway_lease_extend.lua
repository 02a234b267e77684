-- gateway_lease_extend: renews a gateway's lease if this replica's token holds it.
--
-- KEYS: [1] coord:gateway:<pk> (keys.GatewayLease; primary server, DB 0).
-- ARGV: [1] this replica's token, [2] TTL (ms).
-- Reply: 1 renewed, 0 not ours.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
