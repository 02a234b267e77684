-- gateway_lease_release: deletes a gateway's lease if this replica's token holds it
-- and tells the standbys on the channel of the same name.
--
-- KEYS: [1] coord:gateway:<pk> (keys.GatewayLease; primary server, DB 0; also the
--   pub/sub channel).
-- ARGV: [1] this replica's token.
-- Reply: 1 released, 0 not ours.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], ARGV[1])
  return 1
end
return 0
