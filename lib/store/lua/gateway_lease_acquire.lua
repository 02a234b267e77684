-- gateway_lease_acquire: takes a mycelium-gateway's lease when nobody holds it, or
-- extends it when this replica's token still holds it (a holder that stopped because
-- its renewals failed, and whose key survived).
--
-- KEYS: [1] coord:gateway:<pk> (keys.GatewayLease; primary server, DB 0).
-- ARGV: [1] this replica's token, [2] TTL (ms).
-- Reply: {1} held, or {0, the key's PTTL in ms}.

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return {0, redis.call('PTTL', KEYS[1])}
